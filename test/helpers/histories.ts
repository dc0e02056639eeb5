/** Stored histories that several runtime tests start from. */
import type { HistoryEvent } from '../../src/history/events.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { historyBuilder } from '../../src/testing/history-builder.js';

/** A suspended multi-turn task of at least `n` events: turns of 20 steps. */
export function longHistory(taskId: string, n: number): HistoryEvent[] {
  const b = historyBuilder(taskId, { tick: 1 }).created({ workflow: 'long', kind: 'multi-turn', policy: { turnTimeoutMs: 1e12 } });
  for (let turn = 1; b.lastEventId < n; turn++) {
    b.input({ turn }).turnStarted();
    for (let i = 0; i < 20; i++) b.step('s', i);
    b.suspended('waiting');
  }
  return b.build();
}

/** A memory store holding tasks left mid-turn by a dead engine (input 'before', turn 1 started). */
export async function crashedTasks(ids: string[], workflow = 'echo', kind: 'one-shot' | 'multi-turn' = 'one-shot'): Promise<MemoryHistoryStore> {
  const store = new MemoryHistoryStore();
  await store.open();
  for (const id of ids) {
    const events = historyBuilder(id, { start: Date.now() }).created({ workflow, kind }).input('before').turnStarted().build();
    await store.append(id, events, { expectedLastEventId: 0, generation: events[0]!.generation });
  }
  return store;
}
