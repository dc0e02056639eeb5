/**
 * The snapshot-aware lifecycle (issue 7). Every scenario starts from the same store: a chat task
 * whose turn 1 (input A) was interrupted by an engine shutdown with grace 0, with B and C queued
 * behind it (steering). After a successful restore: turn 1 is recovered and completes once, B is
 * promoted and runs while C stays queued; once B is released, C runs once. Real LevelDB.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { SESSION_ENV, SnapshotLifecycle, type ActivationPhase, type SnapshotLifecycleOptions } from '../../src/runtime/lifecycle.js';
import { systemClock, type Clock, type Timer, type TimerOptions } from '../../src/runtime/clock.js';
import { silentLogger } from '../../src/logger.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { isTurnlogError } from '../../src/errors.js';
import { isTurnTerminal, type HistoryEvent } from '../../src/history/events.js';
import { fold } from '../../src/replay/index.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const TASK = 'chat';
/**
 * Every engine here runs as the session's owner. The store rejects a claim by a new owner while an
 * older owner's lease is live, even though opening LevelDB proves that owner dead (reported with the
 * lifecycle work); a turn that ignored the shutdown would leave such a lease until it expires.
 */
const OWNER = 'agent|session:sess';
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Polls until `cond` holds (LevelDB and turns finish on real I/O); never asserts elapsed time. */
async function until(cond: () => boolean | Promise<boolean>, what = 'condition'): Promise<void> {
  for (let i = 0; i < 4000; i++) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error(`timed out waiting for ${what}`);
}

function aborted(signal: AbortSignal): Promise<void> {
  return new Promise((r) => (signal.aborted ? r() : signal.addEventListener('abort', () => r(), { once: true })));
}

/** Real timers, counting the live background ones: the engine's only background timer is the scanner. */
class TrackingClock implements Clock {
  background = 0;
  now(): number {
    return systemClock.now();
  }
  setTimer(fn: () => void, ms: number, options?: TimerOptions): Timer {
    const bg = options?.background === true;
    let live = true;
    const done = () => {
      if (live && bg) this.background--;
      live = false;
    };
    if (bg) this.background++;
    const t = systemClock.setTimer(() => {
      done();
      fn();
    }, ms, options);
    return {
      cancel: () => {
        done();
        t.cancel();
      },
    };
  }
}

interface Scenario {
  dir: string;
  runs: Record<'A' | 'B' | 'C', number>;
  wf: ReturnType<typeof chatWorkflow>['wf'];
  releaseB(): void;
}

function chatWorkflow() {
  const runs = { A: 0, B: 0, C: 0 };
  let releaseB!: () => void;
  const gateB = new Promise<void>((r) => (releaseB = r));
  const wf = defineWorkflow({
    name: 'chat',
    kind: 'multi-turn',
    turn: async (ctx, text: 'A' | 'B' | 'C') => {
      runs[text]++;
      if (text === 'A' && ctx.attempt === 1) await aborted(ctx.signal); // the interrupted turn
      if (text === 'B') await Promise.race([gateB, aborted(ctx.signal)]); // keeps C queued
      ctx.signal.throwIfAborted();
      return `${text}:${ctx.entryMode}:${ctx.attempt}`;
    },
  });
  return { wf, runs, releaseB: () => releaseB() };
}

/** Turn 1 (A) interrupted in progress, B and C queued behind it. */
async function interruptedChat(): Promise<Scenario> {
  const tmp = await makeTmpDir('turnlog-lifecycle-');
  cleanups.push(tmp.remove);
  const { wf, runs, releaseB } = chatWorkflow();
  cleanups.push(releaseB);
  // The same owner as the restores bind (OWNER): see the note at OWNER.
  const e0 = await Engine.open({ store: tmp.path, workflows: [wf], logger: silentLogger, scanIntervalMs: 0, owner: OWNER });
  const h = await e0.start(wf, 'A', { taskId: TASK, inputId: 'a' });
  await until(() => runs.A === 1, 'turn 1 to start');
  await h.send('B', { inputId: 'b' });
  await h.send('C', { inputId: 'c' });
  await e0.shutdown({ graceMs: 0 });
  const events = await readHistory(tmp.path);
  expect(fold(TASK, events).openTurn?.turn).toBe(1);
  return { dir: tmp.path, runs, wf, releaseB };
}

/** Reading the store also proves nobody holds its lock (LevelDB allows one process, one handle). */
async function readHistory(dir: string): Promise<HistoryEvent[]> {
  const store = new LevelHistoryStore(dir);
  await store.open();
  try {
    return await store.readEvents(TASK);
  } finally {
    await store.close();
  }
}

function engineFor(s: Scenario, clock: Clock): Engine {
  const engine = Engine.create({ store: s.dir, workflows: [s.wf], logger: silentLogger, clock, scanIntervalMs: 3_600_000, owner: OWNER });
  cleanups.push(() => engine.shutdown({ graceMs: 0 }));
  return engine;
}

function lifecycleFor(engine: Engine | undefined, options: Partial<SnapshotLifecycleOptions> = {}) {
  const env: NodeJS.ProcessEnv = { PATH: '/bin', ...options.env };
  const lifecycle = new SnapshotLifecycle({ name: 'agent', graceMs: 0, ...options, ...(engine ? { engine } : {}), env });
  return { lifecycle, env };
}

function terminals(events: HistoryEvent[], turn: number): HistoryEvent[] {
  return events.filter((e) => isTurnTerminal(e) && e.turn === turn);
}

/** Which turns consumed each input (attempt 1 of a turn, or a takeInputs). */
function consumers(events: HistoryEvent[]): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  for (const e of events) {
    if (e.type === 'TurnStarted' && e.attempt === 1) for (const id of e.inputIds) (out[id] ??= []).push(e.turn);
    if (e.type === 'InputsTaken') for (const id of e.inputIds) (out[id] ??= []).push(e.turn);
  }
  return out;
}

/**
 * After a successful restore: turn 1 completed once, B promoted and running (`bRuns` times in
 * all), C still queued; then B is released, completes once, and C runs exactly once.
 */
async function expectRecoveredThenDrain(s: Scenario, engine: Engine, bRuns: number): Promise<void> {
  await until(() => s.runs.B === bRuns, `B to run (${bRuns})`);
  const d = await engine.describe(TASK);
  expect(d.openTurn).toMatchObject({ turn: 2, running: true });
  expect(d.queuedInputIds).toEqual(['c']);
  expect(s.runs.C).toBe(0);
  expect(terminals(await engine.history(TASK), 1).map((e) => e.type)).toEqual(['TurnCompleted']);
  s.releaseB();
  const c = await engine.turnResult(TASK, 'c');
  expect(c).toMatchObject({ turn: 3, status: 'completed', output: 'C:resumed:1' });
  expect(s.runs.B).toBe(bRuns);
  expect(s.runs.C).toBe(1);
  const events = await engine.history(TASK);
  for (const turn of [1, 2, 3]) expect(terminals(events, turn).map((e) => e.type), `turn ${turn}`).toEqual(['TurnCompleted']);
  expect(consumers(events)).toEqual({ a: [1], b: [2], c: [3] });
}

/** After a failed or cancelled activation: nothing open, nothing promoted, turn 1 still in progress. */
async function expectRolledBack(s: Scenario, engine: Engine, clock: TrackingClock): Promise<void> {
  expect(engine.active).toBe(false);
  expect(clock.background).toBe(0);
  const err = await engine.describe(TASK).catch((e: unknown) => e);
  expect(isTurnlogError(err, 'TURNLOG_ENGINE_NOT_ACTIVATED')).toBe(true);
  expect(s.runs.B).toBe(0);
  expect(s.runs.C).toBe(0);
  const events = await readHistory(s.dir);
  const state = fold(TASK, events);
  expect(state.queue.map((q) => q.inputId)).toEqual(['b', 'c']);
  // No handler ran: every phase that can fail comes before recovery starts a turn.
  expect(state.openTurn?.turn).toBe(1);
  expect(terminals(events, 1)).toEqual([]);
  expect(s.runs.A).toBe(1);
}

type Capture = 'absent' | 'false' | 'true';
const CAPTURES: Capture[] = ['absent', 'false', 'true'];
function captureEnv(c: Capture): Record<string, string> {
  return c === 'absent' ? {} : { TURNLOG_SNAPSHOT_CAPTURE: c };
}

describe('truth table: TURNLOG_SNAPSHOT_CAPTURE at startup and at restore × resilience', () => {
  for (const atStartup of CAPTURES) {
    for (const atRestore of CAPTURES) {
      it(`resilience enabled, capture ${atStartup} at startup, ${atRestore} at restore`, async () => {
        const s = await interruptedChat();
        const clock = new TrackingClock();
        const engine = engineFor(s, clock);
        const { lifecycle, env } = lifecycleFor(engine, { env: captureEnv(atStartup) });
        const deferred = atStartup === 'true';
        expect(await lifecycle.start()).toBe(deferred ? 'deferred' : 'active');
        if (deferred) {
          // Capture: registered, nothing open, no lease written, no timer, task API refused.
          expect(engine.active).toBe(false);
          expect(clock.background).toBe(0);
          expect((await readHistory(s.dir)).at(-1)?.type).not.toBe('LeaseClaimed');
          const err = await engine.start(s.wf, 'X' as 'A').catch((e: unknown) => e);
          expect(isTurnlogError(err, 'TURNLOG_ENGINE_NOT_ACTIVATED')).toBe(true);
          expect(s.runs).toEqual({ A: 1, B: 0, C: 0 });
        } else {
          // Cold start: immediate recovery, one scanner. Turn 1 completes; B is promoted.
          expect(engine.active).toBe(true);
          expect(clock.background).toBe(1);
          await until(() => s.runs.B === 1, 'B promoted at cold start');
        }
        const r = await lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r1', env: captureEnv(atRestore) });
        expect(r).toMatchObject({ outcome: 'activated', owner: 'agent|session:sess' });
        expect(engine.owner).toBe('agent|session:sess');
        expect(env[SESSION_ENV]).toBe('sess');
        expect(clock.background).toBe(1);
        // A cold-started engine is rebound to the session: B is interrupted and recovered once.
        await expectRecoveredThenDrain(s, engine, deferred ? 1 : 2);
        expect(s.runs.A).toBe(2);
      });

      it(`resilience disabled, capture ${atStartup} at startup, ${atRestore} at restore: nothing opens`, async () => {
        const s = await interruptedChat();
        const before = await readHistory(s.dir);
        const { lifecycle, env } = lifecycleFor(undefined, { env: captureEnv(atStartup) });
        expect(await lifecycle.start()).toBe('no-engine');
        expect(await lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r1', env: captureEnv(atRestore) })).toMatchObject({ outcome: 'no-engine' });
        expect(lifecycle.active).toBe(false);
        // The hooks still bind the session and the env.
        expect(env[SESSION_ENV]).toBe('sess');
        const err = await lifecycle.afterRestore({ sessionId: 'sess-2', restoreId: 'r2' }).catch((e: unknown) => e);
        expect(isTurnlogError(err, 'TURNLOG_SESSION_MISMATCH')).toBe(true);
        expect(await lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r1' })).toMatchObject({ outcome: 'duplicate' });
        await lifecycle.beforeSnapshot();
        expect(await readHistory(s.dir)).toEqual(before);
        expect(s.runs).toEqual({ A: 1, B: 0, C: 0 });
      });
    }
  }
});

describe('restore ids', () => {
  it('a retry of a completed restore id is a no-op that leaves the engine active; a new id rebinds with a new instance; a late old id is a no-op', async () => {
    const s = await interruptedChat();
    const clock = new TrackingClock();
    const engine = engineFor(s, clock);
    const { lifecycle } = lifecycleFor(engine, { capture: true });
    await lifecycle.start();
    const r1 = await lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r1' });
    expect(r1.outcome).toBe('activated');
    await until(() => s.runs.B === 1, 'B promoted');
    const retry = await lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r1' });
    expect(retry).toMatchObject({ outcome: 'duplicate', instance: r1.instance });
    expect(engine.active).toBe(true);
    expect(clock.background).toBe(1);
    expect(s.runs.B).toBe(1); // the retry disturbed nothing

    const r2 = await lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r2' });
    expect(r2.outcome).toBe('activated');
    expect(r2.instance).not.toBe(r1.instance);
    expect(r2.owner).toBe('agent|session:sess');
    expect(clock.background).toBe(1);
    const late = await lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r1' });
    expect(late).toMatchObject({ outcome: 'duplicate', instance: r2.instance });
    // The rebind interrupted B under r1's binding; r2's binding recovered it.
    await expectRecoveredThenDrain(s, engine, 2);
    const claims = (await engine.history(TASK)).filter((e) => e.type === 'LeaseClaimed');
    expect(new Set(claims.map((e) => e.generation)).size).toBe(claims.length); // every claim fenced the one before
  });

  it('a different session once one was assigned is SessionMismatchError, and changes nothing', async () => {
    const s = await interruptedChat();
    const engine = engineFor(s, new TrackingClock());
    const { lifecycle, env } = lifecycleFor(engine, { capture: true });
    await lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r1', env: { MODEL: 'small' } });
    const err = await lifecycle.afterRestore({ sessionId: 'sess-b', restoreId: 'r2', env: { MODEL: 'large' } }).catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_SESSION_MISMATCH')).toBe(true);
    expect((err as Error).message).toContain('sess');
    expect((err as Error).message).toContain('sess-b');
    expect(env['MODEL']).toBe('small');
    expect(engine.owner).toBe('agent|session:sess');
    await expectRecoveredThenDrain(s, engine, 1);
  });
});

describe('failures in each activation phase', () => {
  for (const phase of ['open', 'recovery', 'scanner'] as const) {
    for (const times of [1, 2]) {
      it(`${phase} fails ${times === 1 ? 'once' : 'twice'}: rolled back each time, pinned, retried to success`, async () => {
        const s = await interruptedChat();
        const clock = new TrackingClock();
        const engine = engineFor(s, clock);
        let failures = 0;
        const onPhase = (p: ActivationPhase) => {
          if (p === phase && failures < times) {
            failures++;
            throw new Error(`injected ${p} failure ${failures}`);
          }
        };
        const { lifecycle, env } = lifecycleFor(engine, { capture: true, onPhase });
        expect(await lifecycle.start()).toBe('deferred');
        for (let i = 1; i <= times; i++) {
          // First attempt and a retry with the same id, then a new id.
          const restoreId = 'r1';
          const err = await lifecycle.afterRestore({ sessionId: 'sess', restoreId, env: { MODEL: 'large' } }).catch((e: unknown) => e);
          expect(isTurnlogError(err, 'TURNLOG_ACTIVATION_FAILED')).toBe(true);
          expect((err as Error).message).toContain(`phase ${phase}`);
          expect(((err as Error).cause as Error).message).toBe(`injected ${phase} failure ${i}`);
          await expectRolledBack(s, engine, clock);
          expect(env['MODEL']).toBeUndefined();
          expect(env[SESSION_ENV]).toBeUndefined();
          expect(lifecycle.sessionId).toBe('sess'); // a failed restore pins the session
          const mismatch = await lifecycle.afterRestore({ sessionId: 'other', restoreId: 'rx' }).catch((e: unknown) => e);
          expect(isTurnlogError(mismatch, 'TURNLOG_SESSION_MISMATCH')).toBe(true);
        }
        const ok = await lifecycle.afterRestore({ sessionId: 'sess', restoreId: times === 1 ? 'r1' : 'r-new', env: { MODEL: 'large' } });
        expect(ok.outcome).toBe('activated');
        expect(env['MODEL']).toBe('large');
        expect(clock.background).toBe(1);
        await expectRecoveredThenDrain(s, engine, 1);
      });
    }
  }
});

describe('cancellation', () => {
  for (const phase of ['open', 'recovery', 'scanner'] as const) {
    it(`cancelled during activation (at ${phase}): rolled back with the abort reason, then retried`, async () => {
      const s = await interruptedChat();
      const clock = new TrackingClock();
      const engine = engineFor(s, clock);
      const controller = new AbortController();
      const onPhase = (p: ActivationPhase) => {
        if (p === phase && !controller.signal.aborted) controller.abort(new Error('host cancelled the restore'));
      };
      const { lifecycle, env } = lifecycleFor(engine, { capture: true, onPhase });
      const err = await lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r1', env: { MODEL: 'large' }, signal: controller.signal }).catch((e: unknown) => e);
      expect((err as Error).message).toBe('host cancelled the restore');
      await expectRolledBack(s, engine, clock);
      expect(env['MODEL']).toBeUndefined();
      expect(lifecycle.activeRestoreId).toBeUndefined();
      expect((await lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r1', env: { MODEL: 'large' } })).outcome).toBe('activated');
      await expectRecoveredThenDrain(s, engine, 1);
    });
  }

  it('a cancel after the commit point (recovery started) is too late: the restore completes, nothing is interrupted', async () => {
    const s = await interruptedChat();
    const engine = engineFor(s, new TrackingClock());
    const controller = new AbortController();
    const onPhase = (p: ActivationPhase) => {
      if (p === 'recovery') setImmediate(() => controller.abort(new Error('late cancel')));
    };
    const { lifecycle } = lifecycleFor(engine, { capture: true, onPhase });
    expect((await lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r1', signal: controller.signal })).outcome).toBe('activated');
    expect(engine.active).toBe(true);
    await expectRecoveredThenDrain(s, engine, 1);
    expect(s.runs.A).toBe(2);
  });

  it('an already-aborted signal applies and pins nothing', async () => {
    const s = await interruptedChat();
    const engine = engineFor(s, new TrackingClock());
    const { lifecycle, env } = lifecycleFor(engine, { capture: true });
    const err = await lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r1', signal: AbortSignal.abort(new Error('gone')) }).catch((e: unknown) => e);
    expect((err as Error).message).toBe('gone');
    expect(lifecycle.sessionId).toBeUndefined();
    expect(env[SESSION_ENV]).toBeUndefined();
    expect((await lifecycle.afterRestore({ sessionId: 'other', restoreId: 'r1' })).outcome).toBe('activated');
  });

  it('hooks are serialized; a restore cancelled while queued behind another never runs', async () => {
    const s = await interruptedChat();
    const engine = engineFor(s, new TrackingClock());
    const log: string[] = [];
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const { lifecycle } = lifecycleFor(engine, {
      capture: true,
      onPhase: async (p) => {
        log.push(p);
        if (p === 'recovery' && log.length === 3) await held;
      },
    });
    const first = lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r1' });
    const controller = new AbortController();
    const second = lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r2', signal: controller.signal }).catch((e: unknown) => e);
    const third = lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r1' });
    await until(() => log.length === 3, 'first restore to reach recovery');
    controller.abort(new Error('superseded'));
    release();
    expect((await first).outcome).toBe('activated');
    expect(((await second) as Error).message).toBe('superseded');
    expect((await third).outcome).toBe('duplicate');
    expect(log).toEqual(['open', 'scanner', 'recovery']);
    await expectRecoveredThenDrain(s, engine, 1);
  });
});

describe('lifespans and snapshots', () => {
  it('sequential lifespans: the same restore payload in a second lifespan re-activates instead of answering with nothing running', async () => {
    const s = await interruptedChat();
    const clock = new TrackingClock();
    const engine = engineFor(s, clock);
    const { lifecycle } = lifecycleFor(engine, { capture: true });
    expect(await lifecycle.start()).toBe('deferred');
    expect((await lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r1' })).outcome).toBe('activated');
    await until(() => s.runs.B === 1, 'B promoted');
    await lifecycle.stop(); // lifespan ends while B runs: B is left in progress
    expect(engine.active).toBe(false);
    expect(clock.background).toBe(0);
    expect(fold(TASK, await readHistory(s.dir)).openTurn?.turn).toBe(2);

    expect(await lifecycle.start()).toBe('deferred');
    expect(engine.active).toBe(false);
    const again = await lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r1' });
    expect(again.outcome).toBe('activated');
    expect(engine.active).toBe(true);
    expect(clock.background).toBe(1);
    await expectRecoveredThenDrain(s, engine, 2);
  });

  it('beforeSnapshot quiesces to no open handles, is idempotent until the next restore, and the next restore recovers', async () => {
    const s = await interruptedChat();
    const clock = new TrackingClock();
    const engine = engineFor(s, clock);
    const { lifecycle, env } = lifecycleFor(engine, { capture: true });
    await lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r1', env: { MODEL: 'large' } });
    await until(() => s.runs.B === 1, 'B promoted');
    await lifecycle.beforeSnapshot();
    expect(engine.active).toBe(false);
    expect(clock.background).toBe(0);
    await readHistory(s.dir); // the lock is free
    env['MODEL'] = 'changed-after-snapshot';
    await lifecycle.beforeSnapshot(); // no-op: the baseline is not refreshed again
    // A restore that omits MODEL reverts it to the baseline taken at the first beforeSnapshot.
    expect((await lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r2' })).outcome).toBe('activated');
    expect(env['MODEL']).toBe('large');
    await expectRecoveredThenDrain(s, engine, 2);
  });

  it('an interrupted drain (turn 1 ended, crash before turn 2 started) promotes B exactly once after restore; C stays queued', async () => {
    const tmp = await makeTmpDir('turnlog-lifecycle-');
    cleanups.push(tmp.remove);
    const { wf, runs, releaseB } = chatWorkflow();
    cleanups.push(releaseB);
    const events = historyBuilder(TASK, { start: Date.now() - 10_000, tick: 10 })
      .created({ workflow: 'chat', kind: 'multi-turn' })
      .input('A', { id: 'a' })
      .turnStarted()
      .input('B', { id: 'b', steering: true })
      .input('C', { id: 'c', steering: true })
      .completed('A:fresh:1')
      .build();
    const store = new LevelHistoryStore(tmp.path);
    await store.open();
    await store.append(TASK, events, { expectedLastEventId: 0, generation: 1 });
    await store.close();
    const s: Scenario = { dir: tmp.path, runs, wf, releaseB };
    const engine = engineFor(s, new TrackingClock());
    const { lifecycle } = lifecycleFor(engine, { capture: true });
    expect(await lifecycle.start()).toBe('deferred');
    expect((await lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r1' })).outcome).toBe('activated');
    await expectRecoveredThenDrain(s, engine, 1);
    expect(runs.A).toBe(0); // turn 1 had ended: never re-run
  });
});

describe('validation and env', () => {
  it('rejects bad ids and env atomically: nothing applied, nothing pinned', async () => {
    const { lifecycle, env } = lifecycleFor(undefined);
    const bad = [
      { sessionId: '', restoreId: 'r' },
      { sessionId: 's', restoreId: 'a\u0000b' },
      // Not printable either: DEL, a C1 control, and a lone surrogate (a session id without a
      // UTF-8 form would be pinned, then fail activation as an ill-formed owner).
      { sessionId: 's', restoreId: 'a\u007fb' },
      { sessionId: 's', restoreId: 'a\u0085b' },
      { sessionId: 'a\ud800', restoreId: 'r' },
      { sessionId: 's', restoreId: 'r', env: { 'BAD-NAME': 'x' } },
      { sessionId: 's', restoreId: 'r', env: { GOOD: 'x', NUL: 'a\u0000' } },
      { sessionId: 's', restoreId: 'r', env: { [SESSION_ENV]: 'other' } },
    ];
    for (const req of bad) {
      let err: unknown;
      try {
        await lifecycle.afterRestore(req);
      } catch (e) {
        err = e;
      }
      expect(isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT'), JSON.stringify(req)).toBe(true);
    }
    expect(env['GOOD']).toBeUndefined();
    expect(lifecycle.sessionId).toBeUndefined();
    expect((await lifecycle.afterRestore({ sessionId: 's', restoreId: 'r', env: { [SESSION_ENV]: 's' } })).outcome).toBe('no-engine');
  });

  it('applies overrides before activation; a later restore reverts omitted keys to the baseline', async () => {
    const s = await interruptedChat();
    const engine = engineFor(s, new TrackingClock());
    const seen: (string | undefined)[] = [];
    const { lifecycle, env } = lifecycleFor(engine, {
      capture: true,
      env: { KEEP: 'base', MODEL: 'base-model' },
      onPhase: (p) => {
        if (p === 'open') seen.push(env['MODEL']);
      },
    });
    await lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r1', env: { MODEL: 'large', EXTRA: '1' } });
    expect(seen).toEqual(['large']);
    expect(env).toMatchObject({ KEEP: 'base', MODEL: 'large', EXTRA: '1', [SESSION_ENV]: 'sess' });
    await lifecycle.afterRestore({ sessionId: 'sess', restoreId: 'r2', env: { EXTRA: '2' } });
    expect(env['MODEL']).toBe('base-model');
    expect(env['EXTRA']).toBe('2');
    expect(seen).toEqual(['large', 'base-model']);
    s.releaseB();
  });
});
