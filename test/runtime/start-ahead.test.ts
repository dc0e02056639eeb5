/**
 * A turn start builds its attempt (spec, host, deadline timer) while its write is made durable
 * (Appender.append's `ahead`, driver.ts #startAttempt). The deadline timer may fire before the
 * start is durable: its callback waits for the task lock, which the start holds until the attempt
 * is the task's active one, so the marker goes after TurnStarted (tier 1). A start whose write
 * fails leaves no timer armed and writes no marker.
 */
import { afterEach, expect, it } from 'vitest';
import type { AppendOptions, AppendResult } from '../../src/store/history-store.js';
import type { HistoryEvent } from '../../src/history/events.js';
import type { Logger } from '../../src/logger.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { Engine } from '../../src/runtime/engine.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A memory store whose appends of a TurnStarted wait for `release` (or fail with `fail`). */
class HeldStarts extends MemoryHistoryStore {
  held = 0;
  #gate: { promise: Promise<void>; resolve: () => void; reject: (e: unknown) => void } | undefined;
  hold(): void {
    let resolve!: () => void;
    let reject!: (e: unknown) => void;
    const promise = new Promise<void>((r, j) => ((resolve = r), (reject = j)));
    this.#gate = { promise, resolve, reject };
  }
  release(): void {
    this.#gate?.resolve();
    this.#gate = undefined;
  }
  fail(err: Error): void {
    this.#gate?.reject(err);
    this.#gate = undefined;
  }
  override async append(taskId: string, events: readonly HistoryEvent[], options: AppendOptions): Promise<AppendResult> {
    const gate = this.#gate;
    if (gate && events.some((e) => e.type === 'TurnStarted')) {
      this.held++;
      await gate.promise;
    }
    return super.append(taskId, events, options);
  }
}

function capture(): Logger & { errors: string[] } {
  const errors: string[] = [];
  return { errors, info: () => {}, warn: (m) => void errors.push(`warn ${m}`), error: (m) => void errors.push(`error ${m}`) };
}

async function until(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !cond(); i++) await new Promise((r) => setImmediate(r));
  expect(cond()).toBe(true);
}

const slow = defineWorkflow({
  name: 'slow',
  turnTimeoutMs: 1_000,
  graceMs: 60_000,
  turn: async (ctx) => {
    if (!ctx.signal.aborted) await new Promise((r) => ctx.signal.addEventListener('abort', r, { once: true }));
    return ctx.timeoutExceeded ? 'saw the timeout' : 'cancelled otherwise';
  },
});

async function open(store: HeldStarts, clock: ManualClock, logger: Logger): Promise<Engine> {
  await store.open();
  const engine = await Engine.open({ store, clock, workflows: [slow], logger, scanIntervalMs: 0 });
  cleanups.push(() => engine.shutdown({ graceMs: 0 }));
  return engine;
}

for (const fresh of [true, false]) {
  const how = fresh ? 'a new task named by the engine' : 'a task named by its caller';
  it(`${how}: a deadline that passes while the turn start is written marks the turn after its start, and the handler sees the timeout`, async () => {
    const clock = new ManualClock();
    const store = new HeldStarts();
    const logger = capture();
    const engine = await open(store, clock, logger);
    store.hold();
    const started = engine.start(slow, null, fresh ? {} : { taskId: 'named' });
    await until(() => store.held === 1);
    // The deadline timer was armed while the start is unwritten: it fires now and waits for the lock.
    await clock.advance(5_000);
    store.release();
    const h = await started;
    expect(await h.result()).toBe('saw the timeout');
    const types = (await engine.history(h.taskId)).map((e) => e.type);
    expect(types).toEqual(['TaskCreated', 'InputQueued', 'LeaseClaimed', 'TurnStarted', 'TimeoutCancelRequested', 'TurnCompleted', 'TaskCompleted']);
    expect(logger.errors).toEqual([]);
  });

  for (const firedFirst of [true, false]) {
    it(`${how}: a turn start whose write fails ${firedFirst ? 'after' : 'before'} its deadline leaves no timer and writes no marker`, async () => {
      const clock = new ManualClock();
      const store = new HeldStarts();
      const logger = capture();
      const engine = await open(store, clock, logger);
      const idle = clock.pendingTimers;
      store.hold();
      const started = engine.start(slow, null, fresh ? {} : { taskId: 'named' });
      await until(() => store.held === 1);
      expect(clock.pendingTimers).toBe(idle + 1); // the deadline, armed ahead
      if (firedFirst) await clock.advance(5_000);
      store.fail(new Error('disk full'));
      await expect(started).rejects.toThrow('disk full');
      expect(clock.pendingTimers).toBe(idle);
      await clock.advance(10_000);
      expect(logger.errors.filter((l) => !l.includes('disk full'))).toEqual([]);
      // Nothing was written; the task can be started again and times out as usual.
      const h = await engine.start(slow, null, fresh ? {} : { taskId: 'named' });
      await clock.advance(1_500);
      expect(await h.result()).toBe('saw the timeout');
      const types = (await engine.history(h.taskId)).map((e) => e.type);
      expect(types).toEqual(['TaskCreated', 'InputQueued', 'LeaseClaimed', 'TurnStarted', 'TimeoutCancelRequested', 'TurnCompleted', 'TaskCompleted']);
    });
  }
}

/** Returns only when its turn times out: a shutdown's abort leaves it running (its engine "crashed"). */
const stubborn = defineWorkflow({
  name: 'slow',
  turnTimeoutMs: 1_000,
  graceMs: 60_000,
  turn: async (ctx) => {
    await new Promise<void>((r) => ctx.signal.addEventListener('abort', () => ctx.timeoutExceeded && r()));
    return 'saw the timeout';
  },
});

it('a recovered attempt (the scanner drives it under a free lock at once): a deadline that passes while its start is written marks the turn after that start', async () => {
  const clock = new ManualClock();
  const store = new HeldStarts();
  const logger = capture();
  await store.open();
  const first = await Engine.open({ store, clock, workflows: [stubborn], logger, scanIntervalMs: 0 });
  const h = await first.start(stubborn, null, { taskId: 'crashed' });
  await first.shutdown({ graceMs: 0 }); // the turn stays in progress, as after a crash
  await clock.advance(10);
  store.hold();
  const engine = await Engine.open({ store, clock, workflows: [stubborn], logger, scanIntervalMs: 0 });
  cleanups.push(() => engine.shutdown({ graceMs: 0 }));
  await until(() => store.held === 1);
  await clock.advance(5_000);
  store.release();
  await engine.recovered();
  expect(await engine.task(h.taskId).result()).toBe('saw the timeout');
  const types = (await engine.history(h.taskId)).map((e) => e.type);
  // Attempt 1 (the dead engine's), attempt 2 recovered, its marker, its own outcome.
  expect(types.slice(types.lastIndexOf('TurnStarted'))).toEqual(['TurnStarted', 'TimeoutCancelRequested', 'TurnCompleted', 'TaskCompleted']);
  expect(types.filter((t) => t === 'TurnStarted')).toHaveLength(2);
  expect(logger.errors.filter((l) => !l.startsWith('warn'))).toEqual([]);
});
