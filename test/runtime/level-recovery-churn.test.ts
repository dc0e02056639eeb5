/**
 * Review attack on the recovery pass over a real LevelDB store (scanner.ts Slots, level-store.ts
 * readTaskStart from the claim's read, task-cache.ts LRU eviction): a cache of 3 entries, 4 at
 * once, every task loaded by describe() meanwhile, some tasks moved between the claim and their
 * load (a snapshot written, an event appended by an operator). No step runs twice, every turn ends
 * once, and each recovered task is driven from what is stored when it is driven.
 */
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

it('a LevelDB recovery pass with a tiny cache, concurrency 4 and loads churning: each step once, each turn ends once', async () => {
  const dir = await makeTmpDir();
  cleanups.push(dir.remove);
  const ids = Array.from({ length: 60 }, (_, i) => `t${i}-\u00e9\u{1F600}`);
  const seed = new LevelHistoryStore(dir.path);
  await seed.open();
  for (const [i, id] of ids.entries()) {
    const b = historyBuilder(id, { start: Date.now() }).created({ workflow: 'two', policy: { turnTimeoutMs: 1e9 } }).input(i).turnStarted();
    // Every other task recorded its first step before its engine died.
    if (i % 2 === 0) b.step('a', `A${i}`);
    const events = b.build();
    await seed.append(id, events, { expectedLastEventId: 0, generation: events[0]!.generation });
  }
  await seed.close();

  const ran = new Map<string, number>();
  const count = (key: string) => ran.set(key, (ran.get(key) ?? 0) + 1);
  const two = defineWorkflow({
    name: 'two',
    turn: async (ctx, i: number) => {
      count(`turn:${ctx.taskId}`);
      const a = await ctx.step('a', () => (count(`a:${ctx.taskId}`), `a${i}`));
      await new Promise((r) => setTimeout(r, i % 3));
      const b = await ctx.step('b', () => (count(`b:${ctx.taskId}`), `b${i}`));
      return `${a}+${b}`;
    },
  });
  const store = new LevelHistoryStore(dir.path);
  const engine = await Engine.open({ store, workflows: [two], logger: silentLogger, scanIntervalMs: 0, maxCachedTasks: 3, recoveryConcurrency: 4 });
  cleanups.push(() => engine.shutdown({ graceMs: 0 }));
  const churn = Promise.all(ids.map((id) => engine.describe(id).catch(() => undefined)));
  await engine.recovered();
  await churn;
  for (const [i, id] of ids.entries()) {
    expect(await engine.task(id).result()).toBe(`${i % 2 === 0 ? `A${i}` : `a${i}`}+b${i}`);
    expect(ran.get(`a:${id}`) ?? 0).toBe(i % 2 === 0 ? 0 : 1);
    expect(ran.get(`b:${id}`)).toBe(1);
    expect(ran.get(`turn:${id}`)).toBe(1);
  }
  for (const id of ids) {
    const events = await store.readEvents(id);
    expect(events.filter((e) => e.type === 'TurnCompleted').length).toBe(1);
    expect(events.filter((e) => e.type === 'StepCompleted').length).toBeLessThanOrEqual(2);
    expect(events.map((e) => e.eventId)).toEqual(events.map((_, k) => k + 1));
  }
});

it('a task moved between the LevelDB claim and its load is driven as stored then (a cancel request appended: cancelled, never re-run)', async () => {
  const dir = await makeTmpDir();
  cleanups.push(dir.remove);
  const ids = Array.from({ length: 12 }, (_, i) => `m${i}`);
  const histories = new Map<string, ReturnType<typeof historyBuilder>>();
  const seed = new LevelHistoryStore(dir.path);
  await seed.open();
  for (const id of ids) {
    const b = historyBuilder(id, { start: Date.now() }).created({ workflow: 'slow', policy: { turnTimeoutMs: 1e9 } }).input('x').turnStarted().step('a', 'A');
    histories.set(id, b);
    const events = b.build();
    await seed.append(id, events, { expectedLastEventId: 0, generation: events[0]!.generation });
  }
  await seed.close();

  // Every other task gets a cancel request right after the page that lists it was claimed (read
  // with its heads, snapshot and tail: the hints readTaskStart serves).
  const cancelled = new Set(ids.filter((_, i) => i % 2 === 1));
  class Moving extends LevelHistoryStore {
    override async claimDueWork(request: Parameters<LevelHistoryStore['claimDueWork']>[0]) {
      const batch = await super.claimDueWork(request);
      for (const e of batch.tasks) {
        if (!cancelled.has(e.taskId)) continue;
        cancelled.delete(e.taskId);
        const events = histories.get(e.taskId)!.cancel('task', 'moved after the claim').build();
        const last = events[events.length - 1]!;
        await this.append(e.taskId, [last], { expectedLastEventId: last.eventId - 1, generation: last.generation });
      }
      return batch;
    }
  }
  const ran: string[] = [];
  const slow = defineWorkflow({
    name: 'slow',
    turn: async (ctx, x: string) => {
      ran.push(ctx.taskId);
      return `${await ctx.step('a', () => 'again')}${x}`;
    },
  });
  const store = new Moving(dir.path);
  const engine = await Engine.open({ store, workflows: [slow], logger: silentLogger, scanIntervalMs: 0, maxCachedTasks: 3, recoveryConcurrency: 4 });
  cleanups.push(() => engine.shutdown({ graceMs: 0 }));
  await engine.recovered();
  expect(cancelled.size).toBe(0);
  for (const [i, id] of ids.entries()) {
    const d = await engine.describe(id);
    if (i % 2 === 1) {
      expect(d.status).toBe('completed');
      expect(d.outcome).toBe('cancelled');
      expect(ran).not.toContain(id);
    } else {
      expect(await engine.task(id).result()).toBe('Ax');
    }
  }
});
