/**
 * src/runtime/task-cache.ts createNew: `engine.start` without a taskId names the task with a
 * fresh random id, so the engine reads nothing about it before its first append (issue #16:
 * store reads were a third of the CPU of new one-step tasks), and its first append tells the store
 * the id is fresh (AppendOptions.fresh), so the store reads nothing either. A given taskId is
 * still loaded, and its appends never claim to be fresh.
 */
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import type { AppendOptions } from '../../src/store/history-store.js';

const engines: Engine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
});

const one = defineWorkflow({ name: 'one', turn: (ctx, x: number) => ctx.step('s', () => x + 1) });

function readCounting(store: MemoryHistoryStore): { reads: string[] } {
  const reads: string[] = [];
  for (const m of ['getSnapshot', 'readEvents', 'getLease'] as const) {
    const orig = store[m].bind(store) as (...a: unknown[]) => unknown;
    (store as unknown as Record<string, unknown>)[m] = (taskId: string, ...rest: unknown[]) => (reads.push(`${m} ${taskId}`), orig(taskId, ...rest));
  }
  return { reads };
}

it('a task named by the engine is created without reading the store', async () => {
  const store = new MemoryHistoryStore();
  const engine = await Engine.open({ store, workflows: [one], logger: silentLogger, scanIntervalMs: 0 });
  engines.push(engine);
  const { reads } = readCounting(store);
  const h = await engine.start(one, 1);
  expect(reads.filter((r) => r.endsWith(h.taskId))).toEqual([]);
  expect(await h.result()).toBe(2);
  expect((await h.history()).map((e) => e.type)).toContain('TaskCompleted');
});

it('a given taskId is still loaded from the store', async () => {
  const store = new MemoryHistoryStore();
  const engine = await Engine.open({ store, workflows: [one], logger: silentLogger, scanIntervalMs: 0 });
  engines.push(engine);
  await (await engine.start(one, 1, { taskId: 'given' })).result();
  await engine.shutdown();
  const again = await Engine.open({ store, workflows: [one], logger: silentLogger, scanIntervalMs: 0 });
  engines.push(again);
  const { reads } = readCounting(store);
  // Loaded from the store, so the engine knows the task ended and refuses new input.
  await expect(again.start(one, 5, { taskId: 'given' })).rejects.toThrow(/Task given is completed/);
  expect(reads.some((r) => r.endsWith(' given'))).toBe(true);
});

it('only the first append of a task the engine named says fresh; the name carries the time and 96 random bits', async () => {
  const store = new MemoryHistoryStore();
  const engine = await Engine.open({ store, workflows: [one], logger: silentLogger, scanIntervalMs: 0 });
  engines.push(engine);
  const appends: { taskId: string; fresh: boolean }[] = [];
  const orig = store.append.bind(store);
  store.append = (taskId, events, options: AppendOptions) => (appends.push({ taskId, fresh: options.fresh === true }), orig(taskId, events, options));
  const h = await engine.start(one, 1);
  await h.result();
  await (await engine.start(one, 1, { taskId: 'given' })).result();
  expect(h.taskId).toMatch(/^task-[0-9a-z]{9}[A-Za-z0-9_-]{16}$/);
  const named = appends.filter((a) => a.taskId === h.taskId).map((a) => a.fresh);
  expect(named.length).toBeGreaterThan(1);
  expect(named).toEqual([true, ...named.slice(1).map(() => false)]);
  expect(appends.filter((a) => a.taskId === 'given').every((a) => !a.fresh)).toBe(true);
});
