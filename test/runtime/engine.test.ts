import { afterEach, describe, expect, it } from 'vitest';
import { Engine, type EngineOptions } from '../../src/runtime/engine.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { silentLogger } from '../../src/logger.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { isTurnlogError } from '../../src/errors.js';
import type { HistoryEvent } from '../../src/history/events.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { historyBuilder } from '../../src/testing/history-builder.js';

const engines: Engine[] = [];
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
  for (const c of cleanups.splice(0)) await c();
});

async function open(options: Partial<EngineOptions> & Pick<EngineOptions, 'workflows'>): Promise<Engine> {
  const engine = await Engine.open({ store: new MemoryHistoryStore(), logger: silentLogger, scanIntervalMs: 0, ...options });
  engines.push(engine);
  return engine;
}

/** Polls until `cond` holds: LevelDB writes finish on real I/O, not on the manual clock. */
async function until(cond: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 2000 && !(await cond()); i++) await new Promise((r) => setTimeout(r, 5));
}

async function readAll(dir: string, taskId: string): Promise<HistoryEvent[]> {
  const store = new LevelHistoryStore(dir);
  await store.open();
  try {
    return await store.readEvents(taskId);
  } finally {
    await store.close();
  }
}

function types(events: HistoryEvent[]): string[] {
  return events.map((e) => e.type);
}

/** A promise the test settles by hand. */
function gate<T = void>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

describe('one-shot workflows', () => {
  it('runs a turn to completion and records one terminal event and TaskCompleted', async () => {
    const double = defineWorkflow({ name: 'double', turn: async (ctx, x: number) => ctx.step('mul', () => x * 2) });
    const engine = await open({ workflows: [double] });
    const h = await engine.start(double, 21, { taskId: 't1' });
    expect(await h.result()).toBe(42);
    const events = await h.history();
    expect(types(events)).toEqual([
      'TaskCreated',
      'InputQueued',
      'LeaseClaimed',
      'TurnStarted',
      'StepCompleted',
      'TurnCompleted',
      'TaskCompleted',
    ]);
    expect(events.map((e) => e.eventId)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect((await h.describe()).status).toBe('completed');
    expect((await h.describe()).outcome).toBe('succeeded');
  });

  it('records a thrown error as TurnFailed and result() throws TURNLOG_TURN_FAILED with the cause', async () => {
    const boom = defineWorkflow({
      name: 'boom',
      turn: async () => {
        throw new TypeError('bad input');
      },
    });
    const engine = await open({ workflows: [boom] });
    const h = await engine.start(boom, null);
    const err = await h.result().catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_TURN_FAILED')).toBe(true);
    expect((err as Error).message).toContain('bad input');
    const failed = (await h.history()).find((e) => e.type === 'TurnFailed');
    expect(failed && failed.type === 'TurnFailed' && failed.failure.type).toBe('TypeError');
    expect((await h.describe()).outcome).toBe('failed');
  });

  it('rejects a second input to a completed task with TaskConflictError and writes nothing', async () => {
    const wf = defineWorkflow({ name: 'w', turn: () => 1 });
    const engine = await open({ workflows: [wf] });
    const h = await engine.start(wf, 0, { taskId: 'done' });
    await h.result();
    const before = (await h.history()).length;
    const err = await engine.start(wf, 0, { taskId: 'done' }).catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_TASK_CONFLICT')).toBe(true);
    expect((err as Error).message).toContain('done');
    expect((await h.history()).length).toBe(before);
  });

  it('does not send an input twice when the caller reuses its inputId', async () => {
    let runs = 0;
    const chat = defineWorkflow({ name: 'chat', kind: 'multi-turn', turn: () => ++runs });
    const engine = await open({ workflows: [chat] });
    const a = await engine.start(chat, 'x', { taskId: 'c', inputId: 'msg-1' });
    await a.nextTurn();
    const b = await engine.start(chat, 'x', { taskId: 'c', inputId: 'msg-1' });
    expect((await b.nextTurn()).turn).toBe(1);
    expect(runs).toBe(1);
  });
});

describe('multi-turn workflows', () => {
  const chat = defineWorkflow({
    name: 'chat',
    kind: 'multi-turn',
    initialState: () => ({ seen: [] as string[] }),
    turn: async (ctx, text: string) => {
      ctx.state.seen.push(text);
      return ctx.step('reply', () => `${ctx.turn}:${ctx.state.seen.join(',')}`);
    },
  });

  it('carries durable state across turns and suspends between them', async () => {
    const engine = await open({ workflows: [chat] });
    const h = await engine.start(chat, 'a', { taskId: 'c1' });
    expect((await h.nextTurn()).output).toBe('1:a');
    expect((await h.describe()).status).toBe('suspended');
    await h.send('b');
    const r = await h.nextTurn();
    expect(r).toMatchObject({ turn: 2, status: 'completed', output: '2:a,b' });
  });

  it('describe() shows the durable state and last output; list() pages tasks by status', async () => {
    const engine = await open({ workflows: [chat] });
    const h = await engine.start(chat, 'a', { taskId: 'd1' });
    await h.nextTurn();
    await h.send('b');
    await h.nextTurn();
    const d = await h.describe();
    expect(d.state).toEqual({ seen: ['a', 'b'] });
    expect(d.lastOutput).toBe('2:a,b');
    await (await engine.start(chat, 'x', { taskId: 'd2' })).nextTurn();
    const page = await engine.list({ status: 'suspended', limit: 1 });
    expect(page.tasks).toHaveLength(1);
    const rest = await engine.list({ status: 'suspended', cursor: page.next! });
    expect([...page.tasks, ...rest.tasks].map((t) => t.taskId).sort()).toEqual(['d1', 'd2']);
    expect((await engine.list({ status: 'completed' })).tasks).toEqual([]);
  });

  it('checks ifLastInputId and reports the actual last input', async () => {
    const engine = await open({ workflows: [chat] });
    const h = await engine.start(chat, 'a', { taskId: 'c2', inputId: 'i1' });
    await h.nextTurn();
    const err = await h.send('b', { ifLastInputId: 'nope' }).catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_LAST_INPUT_ID_PRECONDITION')).toBe(true);
    expect((err as Error).message).toContain('i1');
    await h.send('b', { ifLastInputId: 'i1' });
    expect((await h.nextTurn()).output).toBe('2:a,b');
  });

  it('ctx.suspend ends a turn as TurnSuspended with its reason and output', async () => {
    const approval = defineWorkflow({
      name: 'approval',
      kind: 'multi-turn',
      turn: (ctx, req: string) => ctx.suspend('awaiting-approval', { req }),
    });
    const engine = await open({ workflows: [approval] });
    const h = await engine.start(approval, 'refund');
    const r = await h.nextTurn();
    expect(r.status).toBe('suspended');
    expect(r.output).toEqual({ req: 'refund' });
    const ev = (await h.history()).find((e) => e.type === 'TurnSuspended');
    expect(ev && ev.type === 'TurnSuspended' && ev.reason).toBe('awaiting-approval');
  });
});

describe('steering', () => {
  it('queues inputs sent while a turn runs, drains them into later turns, and lets a turn take them', async () => {
    const release = gate();
    const seen: string[][] = [];
    const agent = defineWorkflow({
      name: 'agent',
      kind: 'multi-turn',
      turn: async (ctx, text: string) => {
        if (text === 'first') await release.promise;
        const extra = text === 'first' ? await ctx.takeInputs<string>() : [];
        seen.push([text, ...extra]);
        return seen.length;
      },
    });
    const engine = await open({ workflows: [agent] });
    const h = await engine.start(agent, 'first', { taskId: 's1' });
    const taken = await h.send('steer-1');
    expect((await h.describe()).queuedInputIds).toEqual([taken]);
    release.resolve();
    const r1 = await h.turnResult(taken);
    expect(r1.turn).toBe(1);
    expect(seen).toEqual([['first', 'steer-1']]);
    const queuedEvent = (await h.history()).find((e) => e.type === 'InputQueued' && e.inputId === taken);
    expect(queuedEvent && queuedEvent.type === 'InputQueued' && queuedEvent.steering).toBe(true);
  });

  it('drains a queued input into the next turn as a steered, resumed turn', async () => {
    const release = gate();
    const agent = defineWorkflow({
      name: 'agent2',
      kind: 'multi-turn',
      turn: async (ctx, text: string) => {
        if (text === 'slow') await release.promise;
        return `${text}:${ctx.entryMode}:${ctx.steered}`;
      },
    });
    const engine = await open({ workflows: [agent] });
    const h = await engine.start(agent, 'slow', { taskId: 's2' });
    const second = await h.send('next');
    release.resolve();
    expect((await h.turnResult(second)).output).toBe('next:resumed:true');
  });

  it('enforces the queue cap with SteeringQueueFull and writes nothing', async () => {
    const release = gate();
    const agent = defineWorkflow({ name: 'capped', kind: 'multi-turn', steering: { maxQueued: 2 }, turn: () => release.promise });
    const engine = await open({ workflows: [agent] });
    const h = await engine.start(agent, 0, { taskId: 'cap' });
    await h.send(1);
    await h.send(2);
    const before = (await h.history()).length;
    const err = await h.send(3).catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_STEERING_QUEUE_FULL')).toBe(true);
    expect((await h.history()).length).toBe(before);
    release.resolve();
  });

  it('rejects input to a busy non-steerable task with TaskConflictError', async () => {
    const release = gate();
    const wf = defineWorkflow({ name: 'solo', kind: 'multi-turn', steering: false, turn: () => release.promise });
    const engine = await open({ workflows: [wf] });
    const h = await engine.start(wf, 0, { taskId: 'solo' });
    const err = await h.send(1).catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_TASK_CONFLICT')).toBe(true);
    expect((err as Error).message).toContain('steering');
    release.resolve();
  });

  it('withdraws a queued input; its waiter sees withdrawn and no turn runs it', async () => {
    const release = gate();
    const ran: number[] = [];
    const wf = defineWorkflow({
      name: 'wd',
      kind: 'multi-turn',
      turn: async (_ctx, n: number) => {
        ran.push(n);
        if (n === 0) await release.promise;
      },
    });
    const engine = await open({ workflows: [wf] });
    const h = await engine.start(wf, 0, { taskId: 'wd' });
    const first = h.inputId!;
    const id = await h.send(1);
    await h.withdraw(id);
    expect((await h.turnResult(id)).status).toBe('withdrawn');
    release.resolve();
    await h.turnResult(first);
    expect(ran).toEqual([0]);
  });
});

describe('steps', () => {
  it('retries a failing step per its policy and records only the final result', async () => {
    let calls = 0;
    const wf = defineWorkflow({
      name: 'flaky',
      retry: { maxAttempts: 3, initialIntervalMs: 1 },
      turn: (ctx) =>
        ctx.step('call', () => {
          if (++calls < 3) throw new Error('transient');
          return 'ok';
        }),
    });
    const engine = await open({ workflows: [wf] });
    const h = await engine.start(wf, null);
    expect(await h.result()).toBe('ok');
    expect(calls).toBe(3);
    expect(types(await h.history()).filter((t) => t === 'StepCompleted')).toHaveLength(1);
  });

  it('does not retry a TerminalError and records the failure', async () => {
    const { TerminalError } = await import('../../src/errors.js');
    let calls = 0;
    const wf = defineWorkflow({
      name: 'terminal',
      retry: { maxAttempts: 5, initialIntervalMs: 1 },
      turn: (ctx) =>
        ctx.step('charge', () => {
          calls++;
          throw new TerminalError('card declined', { type: 'CardDeclined' });
        }),
    });
    const engine = await open({ workflows: [wf] });
    const h = await engine.start(wf, null);
    await expect(h.result()).rejects.toThrow('card declined');
    expect(calls).toBe(1);
    const step = (await h.history()).find((e) => e.type === 'StepCompleted');
    expect(step && step.type === 'StepCompleted' && step.failure?.type).toBe('CardDeclined');
  });

  it('records parallel steps densely in call order', async () => {
    const wf = defineWorkflow({
      name: 'par',
      turn: async (ctx) => {
        const slow = ctx.step('slow', async () => {
          await new Promise((r) => setTimeout(r, 20));
          return 'a';
        });
        const fast = ctx.step('fast', () => 'b');
        return (await slow) + (await fast);
      },
    });
    const engine = await open({ workflows: [wf] });
    const h = await engine.start(wf, null);
    expect(await h.result()).toBe('ab');
    const steps = (await h.history()).filter((e) => e.type === 'StepCompleted');
    expect(steps.map((e) => (e.type === 'StepCompleted' ? [e.seq, e.name] : []))).toEqual([
      [1, 'slow'],
      [2, 'fast'],
    ]);
  });

  it('records parallel steps in call order when they finish in reverse, a failed one among them', async () => {
    const wf = defineWorkflow({
      name: 'par3',
      turn: async (ctx) => {
        const gate = (ms: number) => new Promise((r) => setTimeout(r, ms));
        const first = ctx.step('first', async () => (await gate(30), 'a'));
        const second = ctx.step(
          'second',
          async () => {
            await gate(15);
            throw new Error('no');
          },
          { retry: { maxAttempts: 1 } },
        ).catch(() => 'x');
        const third = ctx.step('third', () => 'c');
        return (await first) + (await second) + (await third);
      },
    });
    const engine = await open({ workflows: [wf] });
    const h = await engine.start(wf, null);
    expect(await h.result()).toBe('axc');
    const steps = (await h.history()).filter((e) => e.type === 'StepCompleted');
    expect(steps.map((e) => (e.type === 'StepCompleted' ? [e.seq, e.name, e.failure ? 'failed' : 'ok'] : []))).toEqual([
      [1, 'first', 'ok'],
      [2, 'second', 'failed'],
      [3, 'third', 'ok'],
    ]);
  });

  it('a record the store could not take: the parallel record queued behind it is not written on top of the gap; the attempt exits for recovery and the re-run records both', async () => {
    const { TurnlogError } = await import('../../src/errors.js');
    class Flaky extends MemoryHistoryStore {
      failures = 1;
      override append(taskId: string, events: readonly HistoryEvent[], options: Parameters<MemoryHistoryStore['append']>[2]) {
        if (this.failures > 0 && events.some((e) => e.type === 'StepCompleted' && e.seq === 1)) {
          this.failures--;
          return Promise.reject(new TurnlogError('TURNLOG_STORE_UNAVAILABLE', 'the store went away'));
        }
        return super.append(taskId, events, options);
      }
    }
    const store = new Flaky();
    const runs: string[] = [];
    const wf = defineWorkflow({
      name: 'gap',
      turn: async (ctx) => {
        const first = ctx.step('first', async () => {
          runs.push('first');
          await new Promise((r) => setTimeout(r, 20));
          return 'a';
        });
        // Done at once: its record waits for first's slot, then finds the attempt fenced.
        const second = ctx.step('second', () => (runs.push('second'), 'b'));
        return (await Promise.all([first, second])).join('');
      },
    });
    const engine = await open({ workflows: [wf], store });
    const h = await engine.start(wf, null);
    await until(async () => (await h.history()).some((e) => e.type === 'TurnExitedForRecovery'));
    const firstAttempt = await h.history();
    expect(firstAttempt.filter((e) => e.type === 'StepCompleted')).toEqual([]);
    await engine.recover();
    expect(await h.result()).toBe('ab');
    const steps = (await h.history()).filter((e) => e.type === 'StepCompleted');
    expect(steps.map((e) => (e.type === 'StepCompleted' ? [e.seq, e.name, e.attempt] : []))).toEqual([
      [1, 'first', 2],
      [2, 'second', 2],
    ]);
    // Neither was recorded by attempt 1, so each ran again (once).
    expect(runs.sort()).toEqual(['first', 'first', 'second', 'second']);
  });

  it('a step fn may return a plain value, a promise subclass or a foreign thenable, throw at once, or return a value that throws when read: each is recorded as an awaited one was', async () => {
    class Later<T> extends Promise<T> {}
    let touchy = 0;
    const wf = defineWorkflow({
      name: 'returns',
      retry: { maxAttempts: 2, initialIntervalMs: 1 },
      turn: async (ctx) => {
        const obj = { n: 1, nested: { s: 'x' } };
        const plain = await ctx.step('plain', () => obj);
        const sub = await ctx.step('subclass', () => Later.resolve('sub'));
        const thenable = await ctx.step('thenable', () => ({ then: (ok: (v: string) => void) => ok('foreign') }) as unknown as Promise<string>);
        const syncThrow = await ctx.step('sync-throw', (): string => {
          throw new Error('at once');
        }).catch((e: Error) => `caught ${e.message}`);
        // `then` throws when read: the try fails (and is retried), as `await` of it failed.
        const proxy = await ctx.step('then-throws', () => {
          if (++touchy > 1) return 'second try';
          return new Proxy({}, { get: () => { throw new Error('no reading me'); } }) as unknown as string;
        });
        // A value whose getter throws while it is encoded: the step fails with that error.
        const getter = await ctx.step('getter-throws', () => ({ get bad(): string { throw new Error('getter'); } })).catch((e: Error) => `caught ${e.message}`);
        return { plainIsCopy: plain !== obj, plain, sub, thenable, syncThrow, proxy, getter };
      },
    });
    const engine = await open({ workflows: [wf] });
    const h = await engine.start(wf, null);
    expect(await h.result()).toEqual({
      plainIsCopy: true,
      plain: { n: 1, nested: { s: 'x' } },
      sub: 'sub',
      thenable: 'foreign',
      syncThrow: 'caught at once',
      proxy: 'second try',
      getter: expect.stringContaining('(getter)'),
    });
    expect(touchy).toBe(2);
    const steps = (await h.history()).filter((e) => e.type === 'StepCompleted');
    expect(steps.map((e) => (e.type === 'StepCompleted' ? [e.seq, e.name, e.failure ? e.failure.message : 'ok'] : []))).toEqual([
      [1, 'plain', 'ok'],
      [2, 'subclass', 'ok'],
      [3, 'thenable', 'ok'],
      [4, 'sync-throw', 'at once'],
      [5, 'then-throws', 'ok'],
      [6, 'getter-throws', expect.stringContaining('(getter)')],
    ]);
  });
});

describe('timeouts (inline, injected clock)', () => {
  it('appends the marker before aborting ctx.signal; a cooperative wind-down records TurnTimedOut(cooperative)', async () => {
    const clock = new ManualClock();
    const store = new MemoryHistoryStore();
    let markerSeenInAbort = false;
    const wf = defineWorkflow({
      name: 'coop',
      turnTimeoutMs: 1000,
      graceMs: 500,
      turn: (ctx) =>
        new Promise((_, reject) => {
          ctx.signal.addEventListener('abort', () => {
            void store.readEvents(ctx.taskId).then((events) => {
              markerSeenInAbort = events.some((e) => e.type === 'TimeoutCancelRequested');
              reject(ctx.signal.reason);
            });
          });
        }),
    });
    const engine = await open({ workflows: [wf], store, clock });
    const h = await engine.start(wf, null, { taskId: 'coop' });
    await clock.advance(1000);
    const err = await h.result().catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_TURN_TIMED_OUT')).toBe(true);
    expect(markerSeenInAbort).toBe(true);
    const events = await h.history();
    expect(types(events).slice(-3)).toEqual(['TimeoutCancelRequested', 'TurnTimedOut', 'TaskCompleted']);
    const timedOut = events.find((e) => e.type === 'TurnTimedOut');
    expect(timedOut && timedOut.type === 'TurnTimedOut' && timedOut.cause).toBe('cooperative');
  });

  it('keeps the handler outcome when it finishes within the grace', async () => {
    const clock = new ManualClock();
    const wf = defineWorkflow({
      name: 'grace',
      turnTimeoutMs: 1000,
      graceMs: 500,
      turn: (ctx) => new Promise((resolve) => ctx.signal.addEventListener('abort', () => resolve({ woundDown: true, timeoutExceeded: ctx.timeoutExceeded }))),
    });
    const engine = await open({ workflows: [wf], clock });
    const h = await engine.start(wf, null);
    await clock.advance(1000);
    expect(await h.result()).toEqual({ woundDown: true, timeoutExceeded: true });
  });

  it('finalizes a runaway inline turn at the hard cap, discards its late result and fences its later steps', async () => {
    const clock = new ManualClock();
    const release = gate();
    let lateStep: unknown;
    const wf = defineWorkflow({
      name: 'runaway',
      turnTimeoutMs: 1000,
      graceMs: 500,
      turn: async (ctx) => {
        await release.promise; // ignores ctx.signal
        lateStep = await ctx.step('late', () => 'x').catch((e: unknown) => e);
        return 'late result';
      },
    });
    const engine = await open({ workflows: [wf], clock });
    const h = await engine.start(wf, null, { taskId: 'runaway' });
    await clock.advance(1000);
    expect(types(await h.history())).toContain('TimeoutCancelRequested');
    expect((await h.describe()).status).toBe('in_progress');
    await clock.advance(500);
    await expect(h.result()).rejects.toMatchObject({ code: 'TURNLOG_TURN_TIMED_OUT' });
    release.resolve();
    await new Promise((r) => setTimeout(r, 10));
    expect(isTurnlogError(lateStep, 'TURNLOG_FENCED')).toBe(true);
    const events = await h.history();
    expect(types(events).slice(-3)).toEqual(['TimeoutCancelRequested', 'TurnTimedOut', 'TaskCompleted']);
    expect(events.some((e) => e.type === 'StepCompleted')).toBe(false);
    const t = events.find((e) => e.type === 'TurnTimedOut');
    expect(t && t.type === 'TurnTimedOut' && t.cause).toBe('hard_cap');
  });

  it('a multi-turn runaway drains to the queued next input after the hard cap', async () => {
    const clock = new ManualClock();
    const wf = defineWorkflow({
      name: 'mt-runaway',
      kind: 'multi-turn',
      turnTimeoutMs: 1000,
      graceMs: 100,
      turn: async (_ctx, x: string) => (x === 'hang' ? new Promise(() => {}) : `done ${x}`),
    });
    const engine = await open({ workflows: [wf], clock });
    const h = await engine.start(wf, 'hang', { taskId: 'mt' });
    const next = await h.send('B');
    await clock.advance(1100);
    expect(await h.turnResult(next)).toMatchObject({ turn: 2, status: 'completed', output: 'done B' });
  });
});

describe('cancel', () => {
  it('cancels the running turn cooperatively; the one-shot task completes as cancelled and never runs again', async () => {
    const started = gate();
    const wf = defineWorkflow({
      name: 'cancellable',
      turn: (ctx) =>
        new Promise((_, reject) => {
          started.resolve();
          ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason));
        }),
    });
    const engine = await open({ workflows: [wf] });
    const h = await engine.start(wf, null, { taskId: 'cx' });
    await started.promise;
    await h.cancel('user pressed stop');
    await expect(h.result()).rejects.toMatchObject({ code: 'TURNLOG_TURN_CANCELLED' });
    const events = await h.history();
    expect(types(events)).toEqual(expect.arrayContaining(['CancelRequested', 'TurnCancelled', 'TaskCompleted']));
    expect((await h.describe()).outcome).toBe('cancelled');
    await engine.recover();
    expect((await h.history()).length).toBe(events.length);
  });

  it('a steering input still queued when the task is cancelled never runs: its waiter says cancelled, the summary and describe keep it queued (docs/steering.md)', async () => {
    const started = gate();
    const runs: string[] = [];
    const wf = defineWorkflow({
      name: 'steer-cancel',
      kind: 'multi-turn',
      turn: (ctx, x: string) => {
        runs.push(x);
        started.resolve();
        return new Promise((_, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)));
      },
    });
    const store = new MemoryHistoryStore();
    const engine = await open({ workflows: [wf], store });
    const h = await engine.start(wf, 'first', { taskId: 'sc' });
    await started.promise;
    const steer = await h.send('steer');
    await h.cancel('stop');
    expect((await h.turnResult(steer)).status).toBe('cancelled');
    expect(await store.getSummary('sc')).toMatchObject({ status: 'completed', outcome: 'cancelled', queued: 1 });
    expect((await h.describe()).queuedInputIds).toEqual([steer]);
    await engine.recover();
    expect(runs).toEqual(['first']);
  });

  it('cancelTurn on a multi-turn task cancels only the turn; the task takes its next input', async () => {
    const wf = defineWorkflow({
      name: 'ct',
      kind: 'multi-turn',
      turn: (ctx, x: string) =>
        x === 'long' ? new Promise((_, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason))) : `ok ${x}`,
    });
    const engine = await open({ workflows: [wf] });
    const h = await engine.start(wf, 'long', { taskId: 'ct' });
    const first = h.inputId!;
    await h.cancelTurn('changed my mind');
    expect((await h.turnResult(first)).status).toBe('cancelled');
    await h.send('short');
    expect((await h.nextTurn()).output).toBe('ok short');
  });
});

describe('recovery and shutdown', () => {
  it('re-runs an interrupted turn as recovered, replaying recorded steps instead of running them', async () => {
    const dir = await makeTmpDir();
    cleanups.push(dir.remove);
    const runs: Record<string, number> = {};
    const hang = gate();
    const wf = defineWorkflow({
      name: 'rec',
      turn: async (ctx) => {
        const a = await ctx.step('a', () => {
          runs['a'] = (runs['a'] ?? 0) + 1;
          return 'A';
        });
        await ctx.checkpoint({ after: 'a' });
        if (ctx.attempt === 1) await hang.promise; // the "crash" window
        const b = await ctx.step('b', () => {
          runs['b'] = (runs['b'] ?? 0) + 1;
          return 'B';
        });
        return { a, b, mode: ctx.entryMode, attempt: ctx.attempt, checkpoint: ctx.checkpointData };
      },
    });
    const e1 = await Engine.open({ store: dir.path, workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    const h1 = await e1.start(wf, null, { taskId: 'r1' });
    while (!(await h1.history()).some((e) => e.type === 'Checkpointed')) await new Promise((r) => setTimeout(r, 5));
    const deferred = h1.result().catch((e: unknown) => e);
    await e1.shutdown({ graceMs: 0 }); // leaves the turn in progress, like a crash
    expect(isTurnlogError(await deferred, 'TURNLOG_TURN_DEFERRED')).toBe(true);

    const e2 = await Engine.open({ store: dir.path, workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    engines.push(e2);
    const h2 = e2.task('r1');
    const result = await h2.turnResult(h1.inputId!);
    expect(result.output).toEqual({ a: 'A', b: 'B', mode: 'recovered', attempt: 2, checkpoint: { after: 'a' } });
    expect(runs).toEqual({ a: 1, b: 1 });
    const events = await h2.history();
    const claims = events.filter((e) => e.type === 'LeaseClaimed');
    expect(claims.map((e) => e.generation)).toEqual([1, 2]);
    expect(types(events).filter((t) => t === 'TurnCompleted')).toHaveLength(1);
    hang.resolve();
  });

  it('lets a handler exitForRecovery during shutdown; the turn stays in progress and the next engine re-runs it', async () => {
    const dir = await makeTmpDir();
    cleanups.push(dir.remove);
    const started = gate();
    const wf = defineWorkflow({
      name: 'efr',
      turn: async (ctx) => {
        if (ctx.attempt === 1) {
          started.resolve();
          await new Promise((r) => ctx.signal.addEventListener('abort', r));
          return ctx.exitForRecovery('draining');
        }
        return `attempt ${ctx.attempt} ${ctx.entryMode}`;
      },
    });
    const e1 = await Engine.open({ store: dir.path, workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    const h = await e1.start(wf, null, { taskId: 'efr' });
    await started.promise;
    await e1.shutdown({ graceMs: 5000 });
    const e2 = await Engine.open({ store: dir.path, workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    engines.push(e2);
    expect(await e2.turnResult('efr', h.inputId!)).toMatchObject({ status: 'completed', output: 'attempt 2 recovered' });
    expect(types(await e2.history('efr'))).toContain('TurnExitedForRecovery');
  });

  it('exitForRecovery outside shutdown fails the turn with a clear error', async () => {
    const wf = defineWorkflow({ name: 'efr2', turn: (ctx) => ctx.exitForRecovery() });
    const engine = await open({ workflows: [wf] });
    const h = await engine.start(wf, null);
    const err = await h.result().catch((e: unknown) => e);
    expect((err as Error).message).toContain('exitForRecovery() is only allowed while the engine shuts down');
  });

  it('finalizes (never re-runs) a turn whose marker is in the history when the engine died during the grace', async () => {
    const dir = await makeTmpDir();
    cleanups.push(dir.remove);
    const clock = new ManualClock();
    let runs = 0;
    const wf = defineWorkflow({
      name: 'nores',
      turnTimeoutMs: 1000,
      graceMs: 10_000,
      turn: async () => {
        runs++;
        await new Promise(() => {});
      },
    });
    const e1 = await Engine.open({ store: dir.path, workflows: [wf], logger: silentLogger, scanIntervalMs: 0, clock });
    await e1.start(wf, null, { taskId: 'nr' });
    await clock.advance(1000);
    await until(async () => types(await e1.history('nr')).includes('TimeoutCancelRequested'));
    expect(types(await e1.history('nr'))).toContain('TimeoutCancelRequested');
    await e1.shutdown({ graceMs: 0 });
    const e2 = await Engine.open({ store: dir.path, workflows: [wf], logger: silentLogger, scanIntervalMs: 0, clock });
    engines.push(e2);
    await until(async () => types(await e2.history('nr')).includes('TaskCompleted'));
    const events = await e2.history('nr');
    expect(types(events).slice(-2)).toEqual(['TurnTimedOut', 'TaskCompleted']);
    const t = events.find((e) => e.type === 'TurnTimedOut');
    expect(t && t.type === 'TurnTimedOut' && t.cause).toBe('recovery_marker');
    expect(runs).toBe(1);
  });

  it('recovers at once under a new owner: leases of a dead process are void (the store lock proves it dead)', async () => {
    const dir = await makeTmpDir();
    cleanups.push(dir.remove);
    const wf = defineWorkflow({
      name: 'owners',
      turn: async (ctx) => {
        if (ctx.attempt === 1) await new Promise(() => {}); // ignores cancel: left in progress at shutdown
        return `recovered by ${ctx.entryMode}`;
      },
    });
    const e1 = await Engine.open({ store: dir.path, workflows: [wf], owner: 'session-a', leaseMs: 3_600_000, logger: silentLogger, scanIntervalMs: 0 });
    const h = await e1.start(wf, null, { taskId: 'own' });
    await e1.shutdown({ graceMs: 0 });
    const e2 = await Engine.open({ store: dir.path, workflows: [wf], owner: 'session-b', leaseMs: 3_600_000, logger: silentLogger, scanIntervalMs: 0 });
    engines.push(e2);
    expect(await e2.turnResult('own', h.inputId!)).toMatchObject({ status: 'completed', output: 'recovered by recovered' });
    const claims = (await e2.history('own')).filter((e) => e.type === 'LeaseClaimed');
    expect(claims.map((e) => (e.type === 'LeaseClaimed' ? [e.owner, e.generation] : []))).toEqual([
      ['session-a', 1],
      ['session-b', 2],
    ]);
  });

  it('leaves a task of an unregistered workflow untouched during recovery; an engine that has it recovers it', async () => {
    const dir = await makeTmpDir();
    cleanups.push(dir.remove);
    const hang = gate();
    const wf = defineWorkflow({
      name: 'needed',
      turn: async (ctx) => {
        if (ctx.attempt === 1) await hang.promise;
        return 'recovered';
      },
    });
    const other = defineWorkflow({ name: 'other', turn: () => 1 });
    const e1 = await Engine.open({ store: dir.path, workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    const h = await e1.start(wf, null, { taskId: 'waits' });
    await e1.shutdown({ graceMs: 0 });
    const before = (await readAll(dir.path, 'waits')).length;
    const warnings: string[] = [];
    const e2 = await Engine.open({ store: dir.path, workflows: [other], scanIntervalMs: 0, logger: { ...silentLogger, warn: (m) => warnings.push(m) } });
    await e2.recover();
    expect((await e2.history('waits')).length).toBe(before);
    expect(warnings.some((w) => w.includes('not registered'))).toBe(true);
    await e2.shutdown();
    const e3 = await Engine.open({ store: dir.path, workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    engines.push(e3);
    expect(await e3.turnResult('waits', h.inputId!)).toMatchObject({ status: 'completed', output: 'recovered' });
    hang.resolve();
  });

  it('still finalizes a timed-out turn of an unregistered workflow (backstop): that decision runs no workflow code', async () => {
    const store = new MemoryHistoryStore();
    await store.open();
    const events = historyBuilder('late').created({ workflow: 'gone', kind: 'multi-turn' }).input('x').turnStarted().build();
    await store.append('late', events, { expectedLastEventId: 0, generation: 1 });
    const started = events.find((e) => e.type === 'TurnStarted')!;
    const clock = new ManualClock(started.time + 120_000); // past the 60 s deadline
    const e = await Engine.open({ store, workflows: [], clock, logger: silentLogger, scanIntervalMs: 0 });
    engines.push(e);
    await e.recovered();
    const last = (await e.history('late')).at(-1)!;
    expect(last.type === 'TurnTimedOut' && last.cause).toBe('recovery_backstop');
  });

  it('rejects a second engine on the same directory with TURNLOG_STORE_LOCKED', async () => {
    const dir = await makeTmpDir();
    cleanups.push(dir.remove);
    const wf = defineWorkflow({ name: 'x', turn: () => 1 });
    const e1 = await Engine.open({ store: dir.path, workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    engines.push(e1);
    const err = await Engine.open({ store: new LevelHistoryStore(dir.path), workflows: [wf], logger: silentLogger }).catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_STORE_LOCKED')).toBe(true);
  });
});

describe('determinism', () => {
  it('fails a recovered attempt that calls a different step than recorded with NonDeterminismError naming both', async () => {
    const dir = await makeTmpDir();
    cleanups.push(dir.remove);
    const hang = gate();
    const v1 = defineWorkflow({
      name: 'nd',
      turn: async (ctx) => {
        await ctx.step('search', () => 1);
        await hang.promise;
      },
    });
    const e1 = await Engine.open({ store: dir.path, workflows: [v1], logger: silentLogger, scanIntervalMs: 0 });
    await e1.start(v1, null, { taskId: 'nd' });
    while (!(await e1.history('nd')).some((e) => e.type === 'StepCompleted')) await new Promise((r) => setTimeout(r, 5));
    await e1.shutdown({ graceMs: 0 });
    const v2 = defineWorkflow({ name: 'nd', turn: async (ctx) => ctx.step('lookup', () => 2) });
    const e2 = await Engine.open({ store: dir.path, workflows: [v2], logger: silentLogger, scanIntervalMs: 0 });
    engines.push(e2);
    await until(async () => types(await e2.history('nd')).includes('TurnFailed'));
    const failed = (await e2.history('nd')).find((e) => e.type === 'TurnFailed');
    expect(failed && failed.type === 'TurnFailed' && failed.failure.code).toBe('TURNLOG_NON_DETERMINISM');
    expect(failed && failed.type === 'TurnFailed' && failed.failure.message).toMatch(/step "search".*step "lookup"/);
    hang.resolve();
  });
});

describe('leases', () => {
  it('renews the lease while a turn runs and cancels the turn after three failed renewals', async () => {
    const clock = new ManualClock();
    const store = new MemoryHistoryStore();
    let renewals = 0;
    let failing = false;
    const renew = store.renewLease.bind(store);
    store.renewLease = async (...args) => {
      renewals++;
      if (failing) throw new Error('store unreachable');
      return renew(...args);
    };
    const wf = defineWorkflow({
      name: 'leased',
      turnTimeoutMs: 3_600_000,
      turn: (ctx) => new Promise((resolve) => ctx.signal.addEventListener('abort', () => resolve({ cancelRequested: ctx.cancelRequested }))),
    });
    const engine = await open({ workflows: [wf], store, clock, leaseMs: 1000 });
    const h = await engine.start(wf, null, { taskId: 'leased' });
    await clock.advance(500);
    await until(async () => renewals >= 1);
    const lease = await store.getLease('leased');
    expect(lease!.expiresAt).toBe(clock.now() + 1000);
    failing = true;
    for (let i = 0; i < 3; i++) {
      const before = renewals;
      await clock.advance(500);
      await until(async () => renewals > before);
    }
    expect(await h.result()).toEqual({ cancelRequested: true });
  });
});

describe('snapshots', () => {
  it('writes a folded-state snapshot every N events and loads a task from it plus the tail only', async () => {
    const dir = await makeTmpDir();
    cleanups.push(dir.remove);
    const chat = defineWorkflow({
      name: 'snap',
      kind: 'multi-turn',
      initialState: () => ({ n: 0 }),
      turn: async (ctx, x: number) => {
        ctx.state.n += x;
        return ctx.step('echo', () => ctx.state.n);
      },
    });
    const e1 = await Engine.open({ store: dir.path, workflows: [chat], snapshotEvery: 10, logger: silentLogger, scanIntervalMs: 0 });
    const h = await e1.start(chat, 1, { taskId: 'snap' });
    await h.nextTurn();
    for (let i = 2; i <= 8; i++) {
      await h.send(i);
      await h.nextTurn();
    }
    const total = (await h.history()).length;
    await until(async () => (await e1.store.getSnapshot('snap')) !== undefined);
    await e1.shutdown();

    const store = new LevelHistoryStore(dir.path);
    const reads: (number | undefined)[] = [];
    const readEvents = store.readEvents.bind(store);
    store.readEvents = (taskId, options) => (reads.push(options?.fromEventId), readEvents(taskId, options));
    const e2 = await Engine.open({ store, workflows: [chat], logger: silentLogger, scanIntervalMs: 0 });
    engines.push(e2);
    const snap = await store.getSnapshot('snap');
    expect(snap!.eventId).toBeGreaterThanOrEqual(10);
    reads.length = 0;
    await e2.sendInput('snap', 9);
    expect(reads).toEqual([snap!.eventId + 1]); // the load read only the tail after the snapshot
    expect((await e2.turnResult('snap', (await e2.describe('snap')).lastInputId!)).output).toBe(45);
    expect((await e2.history('snap')).length).toBeGreaterThan(total);
    await store.close();
  });
});

describe('retention', () => {
  it('deletes completed tasks once older than retentionMs, on a scan; open and suspended tasks stay', async () => {
    const clock = new ManualClock();
    const once = defineWorkflow({ name: 'ret-once', turn: () => 'done' });
    const chat = defineWorkflow({ name: 'ret-chat', kind: 'multi-turn', turn: () => 'hi' });
    const engine = await open({ workflows: [once, chat], clock, retentionMs: 60_000 });
    await (await engine.start(once, null, { taskId: 'old' })).result();
    await (await engine.start(chat, null, { taskId: 'talking' })).nextTurn();
    await clock.advance(30_000);
    await (await engine.start(once, null, { taskId: 'young' })).result();
    await clock.advance(31_000);
    await engine.recover();
    expect(await engine.store.getSummary('old')).toBeUndefined();
    expect(await engine.store.readEvents('old')).toEqual([]);
    expect((await engine.store.getSummary('young'))?.status).toBe('completed');
    expect((await engine.store.getSummary('talking'))?.status).toBe('suspended');
  });

  it('rejects a non-positive retentionMs with a clear error', async () => {
    const wf = defineWorkflow({ name: 'r', turn: () => 1 });
    await expect(Engine.open({ store: new MemoryHistoryStore(), workflows: [wf], retentionMs: 0 })).rejects.toMatchObject({ code: 'TURNLOG_INVALID_ARGUMENT' });
  });
});

describe('exportHistory', () => {
  it('exports a task as a history file that reads back to the same events', async () => {
    const { parseHistoryFile } = await import('../../src/history/history-file.js');
    const { encodeEvent } = await import('../../src/history/codec.js');
    const bytes = (events: HistoryEvent[]) => events.map((e) => Buffer.from(encodeEvent(e)).toString('hex'));
    const wf = defineWorkflow({ name: 'ex', turn: async (ctx, x: number) => ctx.step('inc', () => x + 1) });
    const engine = await open({ workflows: [wf] });
    const h = await engine.start(wf, 1, { taskId: 'ex-1' });
    await h.result();
    for (const format of ['json', 'binary'] as const) {
      const file = parseHistoryFile(await engine.exportHistory('ex-1', format), `ex-1.${format}`);
      expect(bytes(file.tasks[0]!.events)).toEqual(bytes(await h.history()));
    }
    await expect(engine.exportHistory('missing')).rejects.toMatchObject({ code: 'TURNLOG_TASK_NOT_FOUND' });
  });
});

describe('payload codecs', () => {
  it('stores only encoded payloads and hands handlers plain values', async () => {
    const xor = (p: { metadata: Record<string, Uint8Array>; data: Uint8Array }) => ({ ...p, data: p.data.map((b) => b ^ 0x5a) });
    const codec = { encode: xor, decode: xor };
    const store = new MemoryHistoryStore();
    const wf = defineWorkflow({ name: 'secret', turn: async (ctx, s: string) => ctx.step('echo', () => `${s}!`) });
    const engine = await open({ workflows: [wf], store, payloadCodecs: [codec] });
    const h = await engine.start(wf, 'classified', { taskId: 'sec' });
    expect(await h.result()).toBe('classified!');
    const raw = JSON.stringify((await store.readEvents('sec')).map((e) => ('input' in e ? Buffer.from(e.input.data).toString() : '')));
    expect(raw).not.toContain('classified');
  });
});

describe('recovery with a task that cannot be loaded', () => {
  it('recovers the other tasks and opens the engine; the bad task is logged', async () => {
    // A task whose history cannot be read (here a store that refuses it; in the field an id
    // an older version accepted, 201–512 characters, or a corrupt history) used to abort the
    // whole pass, and so Engine.open: no task was recovered and the engine never opened.
    const park = new Promise<never>(() => undefined);
    const wf = defineWorkflow({ name: 'parks-first', turn: async (ctx, _i: null) => (ctx.attempt === 1 ? park : 'recovered') });
    const shared = new MemoryHistoryStore();
    const crashed = await open({ store: shared, workflows: [wf], instance: 'crashed' });
    await crashed.start(wf, null, { taskId: 'a-bad' });
    const good = await crashed.start(wf, null, { taskId: 'b-good' });
    const unreadable = new Proxy(shared, {
      get(target, prop) {
        const v = Reflect.get(target, prop, target) as unknown;
        if (prop === 'readEvents' || prop === 'getSnapshot') {
          return (taskId: string, ...rest: unknown[]) => {
            if (taskId === 'a-bad') return Promise.reject(new Error('unreadable task'));
            return (v as (...a: unknown[]) => Promise<unknown>).call(target, taskId, ...rest);
          };
        }
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    const errors: Record<string, unknown>[] = [];
    const logger = { ...silentLogger, error: (_m: string, f: Record<string, unknown> = {}) => void errors.push(f) };
    const next = await open({ store: unreadable, workflows: [wf], instance: 'next', logger });
    expect(await next.turnResult('b-good', good.inputId!)).toMatchObject({ status: 'completed', output: 'recovered' });
    await next.recovered();
    expect(errors).toEqual([expect.objectContaining({ taskId: 'a-bad' })]);
  });
});
