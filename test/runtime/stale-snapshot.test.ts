// Review: a snapshot is only a shortcut (task-cache). putSnapshot carries no generation, so a
// late cadence snapshot (a zombie engine's on a shared store, written after another engine
// compacted) can name an event inside the compacted range. Loading the task must then fold the
// whole history, not isolate the task as corrupt.
import { afterEach, expect, it } from 'vitest';
import { join } from 'node:path';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { compactedChat } from '../fixtures/workflows/compacted-chat.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const chat = compactedChat;

it('a snapshot older than the compaction cut: the task still loads, with its exact state', async () => {
  const d = await makeTmpDir('turnlog-review-snap-');
  cleanups.push(() => d.remove());
  const path = join(d.path, 'store');
  const store = new LevelHistoryStore(path);
  const engine = await Engine.open({ store, workflows: [chat], logger: silentLogger, scanIntervalMs: 0, snapshotEvery: 4 });
  await (await engine.start(chat, 'm1', { taskId: 'c' })).nextTurn();
  await engine.turnResult('c', await engine.sendInput('c', 'm2'));
  const early = await store.getSnapshot('c');
  expect(early).toBeDefined();
  for (let i = 3; i <= 6; i++) await engine.turnResult('c', await engine.sendInput('c', `m${i}`));
  for (;;) {
    const e = (await store.readEvents('c'))[1];
    if (e?.type === 'HistoryCompacted' && e.turns >= 4) break;
    await new Promise((r) => setTimeout(r, 5));
  }
  const compacted = (await store.readEvents('c'))[1] as { throughEventId: number };
  expect(early!.eventId).toBeLessThan(compacted.throughEventId);
  // The late write lands after the compaction.
  await store.putSnapshot('c', early!);
  await engine.shutdown({ graceMs: 0 });
  await store.close();

  const again = await Engine.open({ store: new LevelHistoryStore(path), workflows: [chat], logger: silentLogger, scanIntervalMs: 0 });
  cleanups.push(() => again.shutdown({ graceMs: 0 }).catch(() => undefined));
  const desc = await again.describe('c');
  expect(desc.state).toEqual({ messages: ['m1', 'm2', 'm3', 'm4', 'm5', 'm6'] });
  await again.turnResult('c', await again.sendInput('c', 'm7'));
  expect(((await again.describe('c')).state as { messages: string[] }).messages.at(-1)).toBe('m7');
});
