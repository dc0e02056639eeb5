/**
 * Review of src/runtime/task-cache.ts load/#pin/#evictIdle (busy counter, setImmediate unpin).
 * Checked: every caller of #load takes the lock or registers its waiter synchronously after the
 * await, so the pin (until the next macrotask) covers the gap; active, busy and waited-on entries
 * are never evicted. Regression guard: with a cache of 2 entries and many concurrent tasks and
 * describe() loads churning the cache, no turn runs twice and every task ends in one turn.
 */
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { systemClock } from '../../src/runtime/clock.js';
import type { Runtime } from '../../src/runtime/runtime.js';
import { TaskCache } from '../../src/runtime/task-cache.js';
import { historyBuilder } from '../../src/testing/history-builder.js';

const engines: Engine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
});

it('a tiny task cache under churn never re-runs a running turn', async () => {
  const runs = new Map<string, number>();
  const release: (() => void)[] = [];
  const wf = defineWorkflow({
    name: 'churn',
    kind: 'multi-turn',
    turn: async (ctx, n: number) => {
      runs.set(ctx.taskId, (runs.get(ctx.taskId) ?? 0) + 1);
      await new Promise<void>((r) => release.push(r));
      return ctx.step('s', () => n + 1);
    },
  });
  const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [wf], logger: silentLogger, scanIntervalMs: 0, maxCachedTasks: 2 });
  engines.push(engine);
  const ids = Array.from({ length: 24 }, (_, i) => `t${i}`);
  const handles = await Promise.all(ids.map((id, i) => engine.start(wf, i, { taskId: id })));
  // Churn: loads of every task (and of unknown ones) while the turns wait, then release them.
  await Promise.all([...ids, 'nope-1', 'nope-2'].map((id) => engine.describe(id).catch(() => undefined)));
  await engine.recover();
  while (release.length < ids.length) await new Promise((r) => setTimeout(r, 1));
  for (const r of release.splice(0)) r();
  const results = await Promise.all(handles.map((h) => h.nextTurn()));
  expect(results.map((r) => r.output)).toEqual(ids.map((_, i) => i + 1));
  expect([...runs.values()].every((n) => n === 1)).toBe(true);
  expect(runs.size).toBe(ids.length);
});

it('entries loaded in one macrotask are all unpinned by the next, and only then evictable', async () => {
  const store = new MemoryHistoryStore();
  await store.open();
  for (const id of ['a', 'b', 'c', 'd']) {
    const events = historyBuilder(id).created().input(1).build();
    await store.append(id, events, { expectedLastEventId: 0, generation: 1 });
  }
  const rt = { store, maxCached: 2, log: silentLogger, workflows: new Map(), clock: systemClock } as unknown as Runtime;
  const cache = new TaskCache(rt);
  // Pinned until the next macrotask: none of the three can be evicted by a load meanwhile.
  await Promise.all(['a', 'b', 'c'].map((id) => cache.load(id)));
  expect(['a', 'b', 'c'].map((id) => cache.get(id) !== undefined)).toEqual([true, true, true]);
  await new Promise((r) => setImmediate(r));
  // Unpinned (one immediate for all three): loading another evicts the oldest idle ones.
  await cache.load('d');
  expect(['a', 'b', 'c', 'd'].map((id) => cache.get(id) !== undefined)).toEqual([false, false, true, true]);
});
