/**
 * Fencing in the engine (DESIGN invariant 3): an engine whose task another instance claimed at a
 * higher generation is a zombie. Its next step or terminal is refused by the store, nothing of it
 * reaches the history, its attempt is stopped, its cached entry dropped, and it never retries.
 * Two engines share one MemoryHistoryStore; the second claims the task like a recovering engine.
 */
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { ProcessExecutor } from '../../src/executor/process-executor.js';
import { stepThenSpinLong } from '../fixtures/workflows/fencing.js';
import type { AttemptHandle, Executor } from '../../src/executor/executor.js';
import type { AttemptOutcome } from '../../src/attempt/host.js';
import { Engine } from '../../src/runtime/engine.js';
import type { Logger } from '../../src/logger.js';
import { silentLogger } from '../../src/logger.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import type { HistoryStore } from '../../src/store/history-store.js';
import { isTurnlogError } from '../../src/errors.js';
import type { HistoryEvent } from '../../src/history/events.js';

const engines: Engine[] = [];
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
  for (const c of cleanups.splice(0)) await c();
});

/** Polls `cond` until true (bounded); a wait, not a timing assertion. */
async function until(cond: () => boolean | Promise<boolean>, what: string, limitMs = 15_000): Promise<void> {
  const end = Date.now() + limitMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function gate<T = void>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

interface LogLine {
  level: string;
  message: string;
  fields: Record<string, unknown>;
}
function capture(lines: LogLine[]): Logger {
  const at = (level: string) => (message: string, fields: Record<string, unknown> = {}) => void lines.push({ level, message, fields });
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

/** The shared store as one engine sees it, counting that engine's rejected appends. */
function spyAppends(store: HistoryStore, rejected: unknown[]): HistoryStore {
  return new Proxy(store, {
    get(target, prop) {
      const v = Reflect.get(target, prop, target) as unknown;
      if (prop === 'append') {
        return (...args: Parameters<HistoryStore['append']>) =>
          target.append(...args).catch((err: unknown) => {
            rejected.push(err);
            throw err;
          });
      }
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

/**
 * Attempt 1 (engine A) records step "one", then parks until released; then it either records
 * step "two" or returns at once. Attempt 2 (engine B, after its claim) replays "one" and returns.
 */
function scenario(zombieDoes: 'step' | 'terminal') {
  const parked = gate<AbortSignal>();
  const release = gate();
  const zombieEnded = gate<{ stepError?: unknown; aborted: boolean }>();
  const wf = defineWorkflow({
    name: 'fenced',
    turn: async (ctx, _input: null) => {
      await ctx.step('one', () => 1);
      if (ctx.attempt > 1) return 'B';
      parked.resolve(ctx.signal);
      await release.promise;
      let stepError: unknown;
      try {
        if (zombieDoes === 'step') await ctx.step('two', () => 2);
        return 'A';
      } catch (err) {
        stepError = err;
        throw err;
      } finally {
        zombieEnded.resolve({ stepError, aborted: ctx.signal.aborted });
      }
    },
  });
  return { wf, parked, release, zombieEnded };
}

async function twoEngines(wf: ReturnType<typeof scenario>['wf']) {
  const shared = new MemoryHistoryStore();
  await shared.open();
  const logs: LogLine[] = [];
  const rejected: unknown[] = [];
  const a = await Engine.open({ store: spyAppends(shared, rejected), workflows: [wf], instance: 'A', logger: capture(logs), scanIntervalMs: 0 });
  engines.push(a);
  const openB = async () => {
    const b = await Engine.open({ store: shared, workflows: [wf], instance: 'B', logger: silentLogger, scanIntervalMs: 0 });
    engines.push(b);
    return b;
  };
  return { shared, a, openB, logs, rejected };
}

function afterTakeover(events: HistoryEvent[]): HistoryEvent[] {
  const i = events.findIndex((e) => e.type === 'LeaseClaimed' && e.instance === 'B');
  expect(i).toBeGreaterThan(0);
  return events.slice(i);
}

describe('a zombie engine is fenced', () => {
  for (const zombieDoes of ['step', 'terminal'] as const) {
    it(`its next ${zombieDoes} is refused with FencedError/StaleGenerationError, nothing reaches the history, the attempt stops and is not retried`, async () => {
      const sc = scenario(zombieDoes);
      const { shared, a, openB, logs, rejected } = await twoEngines(sc.wf);
      const h = await a.start(sc.wf, null, { taskId: 't1' });
      await sc.parked.promise;

      // B opens the shared store, recovers the in-progress task at generation 2 and completes it.
      const b = await openB();
      expect(await b.turnResult('t1', h.inputId!)).toMatchObject({ status: 'completed', output: 'B' });
      const before = await shared.readEvents('t1');
      expect(afterTakeover(before).every((e) => e.generation === 2)).toBe(true);

      const waiting = h.nextTurn().then(
        () => undefined,
        (err: unknown) => err,
      );
      sc.release.resolve();
      const ended = await sc.zombieEnded.promise;
      // A zombie still running is cancelled cooperatively; one that already returned has nothing to stop.
      expect(ended.aborted).toBe(zombieDoes === 'step');
      if (zombieDoes === 'step') {
        expect(isTurnlogError(ended.stepError, 'TURNLOG_FENCED')).toBe(true);
        expect(isTurnlogError((ended.stepError as Error).cause, 'TURNLOG_STALE_GENERATION')).toBe(true);
      }
      // A's waiter is told the turn is not this engine's to report any more.
      expect(isTurnlogError(await waiting, 'TURNLOG_TURN_DEFERRED')).toBe(true);

      // Exactly one refused append (no retry), a stale generation, and nothing of A stored.
      await new Promise((r) => setImmediate(r));
      expect(rejected).toHaveLength(1);
      expect(isTurnlogError(rejected[0], 'TURNLOG_STALE_GENERATION')).toBe(true);
      expect(rejected[0]).toMatchObject({ taskId: 't1', generation: 1, current: 2 });
      expect(await shared.readEvents('t1')).toEqual(before);

      const fenced = logs.filter((l) => l.message.startsWith('task fenced'));
      expect(fenced).toHaveLength(1);
      expect(fenced[0]).toMatchObject({ level: 'warn', fields: { taskId: 't1', turn: 1, attempt: 1, code: 'TURNLOG_STALE_GENERATION' } });
      expect(logs.filter((l) => l.level === 'error')).toEqual([]);

      // A dropped its cached entry: it now reads the history B wrote, not its stale copy.
      expect(await a.describe('t1')).toMatchObject({ status: 'completed', outcome: 'succeeded', lastOutput: 'B' });
    });
  }

  it('a lease renewal refused for a stale generation fences the attempt at once', async () => {
    const sc = scenario('step');
    const shared = new MemoryHistoryStore();
    await shared.open();
    const logs: LogLine[] = [];
    // leaseMs 40: A renews every 20 ms of real time; another instance of the same owner claims in between.
    const a = await Engine.open({ store: shared, workflows: [sc.wf], owner: 'o', instance: 'A', leaseMs: 40, logger: capture(logs), scanIntervalMs: 0 });
    engines.push(a);
    await a.start(sc.wf, null, { taskId: 't1' });
    const signal = await sc.parked.promise;
    expect((await shared.claimLease('t1', { owner: 'o', instance: 'B', durationMs: 3_600_000, now: Date.now() })).generation).toBe(2);
    await until(() => logs.some((l) => l.message.startsWith('task fenced')), 'the renewal to fence the task');

    // The renewal alone fenced the parked zombie: its signal aborted before it did anything.
    expect(signal.aborted).toBe(true);
    sc.release.resolve();
    const end = await sc.zombieEnded.promise;
    expect(isTurnlogError(end.stepError, 'TURNLOG_FENCED')).toBe(true);
    expect(logs.filter((l) => l.message.startsWith('task fenced'))).toHaveLength(1);
    expect((await shared.readEvents('t1')).some((e) => e.type === 'StepCompleted' && e.name === 'two')).toBe(false);
  });
});

describe('a zombie process worker', () => {
  it('is killed when its engine is fenced, and nothing of it reaches the history', async () => {
    // Workers import the compiled fixtures: run `npm run build` first.
    const module = fileURLToPath(new URL('../../dist/test/fixtures/workflows/index.js', import.meta.url));
    const exec = new ProcessExecutor({ workflowsModule: module, execArgv: [], logger: silentLogger });
    cleanups.push(async () => {
      const pids = exec.workerPids;
      await exec.close();
      for (const pid of pids) if (alive(pid)) process.kill(pid, 'SIGKILL');
    });
    const shared = new MemoryHistoryStore();
    await shared.open();
    const logs: LogLine[] = [];
    const a = await Engine.open({
      store: shared,
      workflows: [stepThenSpinLong],
      executors: { process: exec },
      owner: 'o',
      instance: 'A',
      leaseMs: 100,
      logger: capture(logs),
      scanIntervalMs: 0,
    });
    engines.push(a);
    await a.start(stepThenSpinLong, null, { taskId: 'p1' });
    await until(async () => (await shared.readEvents('p1')).some((e) => e.type === 'StepCompleted'), 'the worker to record its step');
    const pid = exec.workerPids[0]!;
    expect(alive(pid)).toBe(true);

    await shared.claimLease('p1', { owner: 'o', instance: 'B', durationMs: 3_600_000, now: Date.now() });
    const before = await shared.readEvents('p1');
    // The turn's timeout is an hour away: only the fencing can have killed the spinning worker.
    await until(() => !alive(pid), `worker ${pid} to be killed`);
    expect(logs.filter((l) => l.message.startsWith('task fenced'))).toHaveLength(1);
    await until(() => exec.workerPids.length === 0, 'the executor to forget the killed worker');
    expect(await shared.readEvents('p1')).toEqual(before);
  });
});

describe('a worker that was still starting when its engine was fenced', () => {
  it('is fenced and killed as soon as its handle arrives', async () => {
    const started = gate();
    const handleReady = gate();
    const calls: string[] = [];
    // A process-like executor whose start() the test holds open.
    const slowStart: Executor = {
      kind: 'process',
      start: async () => {
        started.resolve();
        await handleReady.promise;
        let end!: (o: AttemptOutcome) => void;
        const handle: AttemptHandle = {
          outcome: new Promise<AttemptOutcome>((r) => (end = r)),
          pid: 4242,
          cancel: (kind) => void calls.push(`cancel:${kind}`),
          kill: () => {
            calls.push('kill');
            end({ kind: 'killed', pid: 4242, signal: 'SIGKILL' });
          },
          fence: () => void calls.push('fence'),
        };
        return handle;
      },
      close: async () => undefined,
    };
    const wf = defineWorkflow({ name: 'slow-start', executor: 'process', turn: async () => 'never runs' });
    const shared = new MemoryHistoryStore();
    await shared.open();
    const logs: LogLine[] = [];
    const a = await Engine.open({ store: shared, workflows: [wf], executors: { process: slowStart }, owner: 'o', instance: 'A', leaseMs: 40, logger: capture(logs), scanIntervalMs: 0 });
    engines.push(a);
    await a.start(wf, null, { taskId: 's1' });
    await started.promise;
    await shared.claimLease('s1', { owner: 'o', instance: 'B', durationMs: 3_600_000, now: Date.now() });
    await until(() => logs.some((l) => l.message.startsWith('task fenced')), 'the renewal to fence the task');
    const before = await shared.readEvents('s1');

    handleReady.resolve();
    await until(() => calls.includes('kill'), 'the late handle to be killed');
    expect(calls.slice(0, 2)).toEqual(['fence', 'kill']);
    await new Promise((r) => setImmediate(r));
    expect(await shared.readEvents('s1')).toEqual(before); // its killed outcome is discarded
  });
});

describe('a ConcurrencyError does not wedge a task', () => {
  it('re-reads the history and decides again, so the call itself succeeds', async () => {
    const chat = defineWorkflow({
      name: 'chat',
      kind: 'multi-turn',
      turn: async (ctx, text: string) => ctx.suspend('waiting', `echo ${text}`),
    });
    const shared = new MemoryHistoryStore();
    await shared.open();
    const logs: LogLine[] = [];
    const a = await Engine.open({ store: shared, workflows: [chat], instance: 'A', logger: capture(logs), scanIntervalMs: 0 });
    engines.push(a);
    const h = await a.start(chat, 'hi', { taskId: 'c1' });
    expect(await h.nextTurn()).toMatchObject({ status: 'suspended' });

    // Another writer appends under the same generation behind A's back.
    const events = await shared.readEvents('c1');
    const last = events[events.length - 1]!;
    const first = events.find((e) => e.type === 'InputQueued')!;
    const foreign: HistoryEvent = { ...first, eventId: last.eventId + 1, generation: last.generation, time: last.time, inputId: 'foreign' };
    await shared.append('c1', [foreign], { expectedLastEventId: last.eventId, generation: last.generation });

    // The send meets the race, the engine re-reads the history (a warning) and sends on top.
    const again = await h.send('again');
    expect(logs.some((l) => l.level === 'warn' && l.fields['code'] === 'TURNLOG_CONCURRENCY')).toBe(true);
    expect(await a.turnResult('c1', again)).toMatchObject({ status: 'suspended', output: 'echo again' });
    expect((await shared.readEvents('c1')).filter((e) => e.type === 'InputQueued').map((e) => e.inputId)).toEqual([first.inputId, 'foreign', again]);
  });
});

describe('a ConcurrencyError that shows the running turn ended', () => {
  it('stops the attempt: no later step runs, its waiter gets the recorded end, nothing is logged as an error', async () => {
    // A runs the turn; B (another owner, same generation: it claims nothing) cancels the task,
    // which finalizes the turn in B. A learns it from the ConcurrencyError of its next record.
    const parked = gate();
    const release = gate();
    const ran: string[] = [];
    const ended = gate<unknown[]>();
    const wf = defineWorkflow({
      name: 'cancelled-elsewhere',
      turn: async (ctx, _input: null) => {
        await ctx.step('one', () => 1);
        parked.resolve();
        await release.promise;
        const errors: unknown[] = [];
        for (const name of ['two', 'three']) {
          await ctx.step(name, () => void ran.push(name)).catch((err: unknown) => void errors.push(err));
        }
        ended.resolve(errors);
        return 'A';
      },
    });
    const shared = new MemoryHistoryStore();
    await shared.open();
    const logs: LogLine[] = [];
    const a = await Engine.open({ store: shared, workflows: [wf], owner: 'a', instance: 'A', logger: capture(logs), scanIntervalMs: 0 });
    engines.push(a);
    const b = await Engine.open({ store: shared, workflows: [wf], owner: 'b', instance: 'B', logger: silentLogger, scanIntervalMs: 0 });
    engines.push(b);
    const h = await a.start(wf, null, { taskId: 'x1' });
    await parked.promise;
    await b.cancel('x1', 'cancelled from B');
    const before = await shared.readEvents('x1');
    expect(before.slice(-2).map((e) => e.type)).toEqual(['TurnCancelled', 'TaskCompleted']);

    const result = h.nextTurn();
    release.resolve();
    const errors = await ended.promise;
    // Step "two" ran before its record met the race; "three" belongs to a cancelled turn (invariant 7).
    expect(ran).toEqual(['two']);
    expect(errors.map((e) => (e as { code?: string }).code)).toEqual(['TURNLOG_FENCED', 'TURNLOG_FENCED']);
    expect(await result).toMatchObject({ status: 'cancelled', turn: 1 });
    await new Promise((r) => setImmediate(r));
    expect(await shared.readEvents('x1')).toEqual(before);
    expect(logs.filter((l) => l.level === 'error')).toEqual([]);
  });
});

describe('a ConcurrencyError from a harmless same-generation append', () => {
  for (const next of ['step', 'terminal'] as const) {
    it(`leaves the turn this attempt's: its next ${next} goes on top, and the withdrawn input's waiter resolves`, async () => {
      // A runs a steerable turn and queues a steering input; B (another owner) withdraws it under
      // the same generation. A's next append meets the race. It used to fail the step's record
      // (step) or lose the turn's end, leaving its waiter hanging (terminal).
      const parked = gate();
      const release = gate();
      const stepErrors: unknown[] = [];
      const wf = defineWorkflow({
        name: 'withdrawn-elsewhere',
        kind: 'multi-turn',
        turn: async (ctx, _text: string) => {
          await ctx.step('one', () => 1);
          parked.resolve();
          await release.promise;
          if (next === 'step') await ctx.step('two', () => 2).catch((err: unknown) => void stepErrors.push(err));
          return ctx.suspend('waiting', 'done');
        },
      });
      const shared = new MemoryHistoryStore();
      await shared.open();
      const logs: LogLine[] = [];
      const a = await Engine.open({ store: shared, workflows: [wf], owner: 'a', instance: 'A', logger: capture(logs), scanIntervalMs: 0 });
      engines.push(a);
      const b = await Engine.open({ store: shared, workflows: [wf], owner: 'b', instance: 'B', logger: silentLogger, scanIntervalMs: 0 });
      engines.push(b);
      const h = await a.start(wf, 'hi', { taskId: 'w1' });
      const first = h.inputId!;
      await parked.promise;
      const steer = await h.send('steer');
      const steerResult = a.turnResult('w1', steer);
      await b.withdraw('w1', steer, 'withdrawn from B');

      release.resolve();
      expect(await a.turnResult('w1', first)).toMatchObject({ status: 'suspended', output: 'done', turn: 1 });
      expect(await steerResult).toMatchObject({ status: 'withdrawn', reason: 'withdrawn from B' });
      expect(stepErrors).toEqual([]);
      const types = (await shared.readEvents('w1')).map((e) => e.type);
      expect(types.slice(-3)).toEqual(next === 'step' ? ['InputWithdrawn', 'StepCompleted', 'TurnSuspended'] : ['InputQueued', 'InputWithdrawn', 'TurnSuspended']);
      expect(logs.filter((l) => l.level === 'error')).toEqual([]);
    });
  }
});
