// Opt-in compaction through the engine (docs/history.md#compaction): old turns' events are
// replaced by their folded state; the task goes on, reloads and replays its kept turns.
import { afterEach, describe, expect, it } from 'vitest';
import { isTurnlogError } from '../../src/errors.js';
import type { HistoryEvent } from '../../src/history/events.js';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { replayHistory } from '../../src/testing/replay-history.js';
import { parseHistoryFile } from '../../src/history/history-file.js';
import { fold } from '../../src/replay/fold.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { appendHistory } from '../../src/store/append-history.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

const chat = defineWorkflow({
  name: 'chat',
  kind: 'multi-turn',
  compaction: { keepTurns: 2 },
  initialState: () => ({ messages: [] as string[] }),
  turn: async (ctx, text: string) => {
    ctx.state.messages.push(text);
    const reply = await ctx.step('model', () => `reply to ${text}`);
    ctx.state.messages.push(reply);
    return reply;
  },
});

async function compactedTo(store: LevelHistoryStore, turns: number): Promise<HistoryEvent[]> {
  // Compaction runs in the background after a turn ends: wait for it (bounded by the test timeout).
  for (;;) {
    const events = await store.readEvents('c');
    const e = events[1];
    if (e?.type === 'HistoryCompacted' && e.turns >= turns) return events;
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('compaction', () => {
  it('keeps the last turns, drops older events behind a HistoryCompacted, reloads and replays', async () => {
    const d = await makeTmpDir('turnlog-compact-');
    const store = new LevelHistoryStore(join(d.path, 'store'));
    const engine = await Engine.open({ store, workflows: [chat], logger: silentLogger, scanIntervalMs: 0 });
    cleanups.push(async () => {
      await engine.shutdown({ graceMs: 0 }).catch(() => undefined);
      await d.remove();
    });
    await (await engine.start(chat, 'm1', { taskId: 'c' })).nextTurn();
    for (let i = 2; i <= 6; i++) await engine.turnResult('c', await engine.sendInput('c', `m${i}`));
    const events = await compactedTo(store, 4);
    expect(events[1]).toMatchObject({ type: 'HistoryCompacted', turns: 4 });
    const starts = events.filter((e) => e.type === 'TurnStarted').map((e) => (e as { turn: number }).turn);
    expect(starts).toEqual([5, 6]);
    const messages = Array.from({ length: 6 }, (_, i) => [`m${i + 1}`, `reply to m${i + 1}`]).flat();
    expect((await engine.describe('c')).state).toEqual({ messages });
    await engine.shutdown({ graceMs: 0 });

    // A new engine loads it (snapshot or events) and goes on.
    await store.putSnapshot('c', { eventId: 0, data: new Uint8Array() }).catch(() => undefined);
    const again = await Engine.open({ store, workflows: [chat], logger: silentLogger, scanIntervalMs: 0 });
    cleanups.unshift(() => again.shutdown({ graceMs: 0 }));
    expect((await again.describe('c')).state).toEqual({ messages });
    await again.turnResult('c', await again.sendInput('c', 'm7'));
    expect(((await again.describe('c')).state as { messages: string[] }).messages).toHaveLength(14);

    // Replay testing replays the kept turns from the compacted state.
    const file = join(d.path, 'c.json');
    await writeFile(file, await again.exportHistory('c'));
    const report = await replayHistory({ history: file, workflows: [chat] });
    expect(report.results.every((r) => r.status === 'ok')).toBe(true);
    expect(report.results[0]!.turn).toBeGreaterThan(4);

    // Export/import carries the compacted form: the gap after event 2 is accepted, the summary follows.
    const parsed = parseHistoryFile(await again.exportHistory('c'), 'c.json').tasks[0]!;
    const mem = new MemoryHistoryStore();
    await mem.open();
    await appendHistory(mem, 'c2', parsed.events, 'turnlog-import', 'test');
    const imported = await mem.readEvents('c2');
    expect(Buffer.from(fold('c2', imported).state!.data)).toEqual(Buffer.from(fold('c', parsed.events).state!.data));
    expect(await mem.getSummary('c2')).toMatchObject({ lastEventId: parsed.events.at(-1)!.eventId, status: 'suspended', turn: 7 });
  });

  it('is opt-in and multi-turn only', () => {
    let code: string | undefined;
    try {
      defineWorkflow({ name: 'x', compaction: { keepTurns: 1 }, turn: () => 1 });
    } catch (err) {
      code = isTurnlogError(err) ? err.code : undefined;
    }
    expect(code).toBe('TURNLOG_WORKFLOW_INVALID');
    expect(defineWorkflow({ name: 'y', kind: 'multi-turn', turn: () => 1 }).compaction).toBeUndefined();
  });
});
