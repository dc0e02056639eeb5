// The pure half of the engine: decisions and attempt outcomes as drafts, without an engine.
import { describe, expect, it } from 'vitest';
import { PayloadTooLargeError } from '../../src/errors.js';
import type { Lease, Payload } from '../../src/history/events.js';
import { defaultPayloadConverter } from '../../src/history/payload.js';
import { DEFAULT_PAYLOAD_LIMITS } from '../../src/history/payload.js';
import { decide } from '../../src/replay/decide.js';
import { fold } from '../../src/replay/fold.js';
import {
  cancelDraft,
  crashMessage,
  endDrafts,
  finalizeDrafts,
  hardCapDrafts,
  outcomeDrafts,
  terminalDraft,
  turnStartDrafts,
  withinLimits,
  type Draft,
} from '../../src/runtime/drafts.js';
import type { AttemptOutcome } from '../../src/attempt/host.js';
import { historyBuilder, T0 } from '../../src/testing/history-builder.js';

const p = (v: unknown): Payload => defaultPayloadConverter.toPayload(v);
const oneShot = () => fold('task-1', historyBuilder().created({ kind: 'one-shot' }).input('q').turnStarted().build());
const multi = () => fold('task-1', historyBuilder().created({ kind: 'multi-turn' }).input('q').turnStarted().build());
const multiTaskCancel = () => fold('task-1', historyBuilder().created({ kind: 'multi-turn' }).input('q').turnStarted().cancel('task', 'user left').build());
const multiTurnCancel = () => fold('task-1', historyBuilder().created({ kind: 'multi-turn' }).input('q').turnStarted().cancel('turn', 'stop that').build());
const lease: Lease = { owner: 'o', instance: 'i-1', generation: 1, expiresAt: T0 + 60_000 };
const types = (ds: Draft[]) => ds.map((d) => (d.type === 'TaskCompleted' ? `TaskCompleted:${d.outcome}` : d.type));

describe('outcomeDrafts: every attempt outcome, one-shot and multi-turn', () => {
  const cases: { name: string; state: () => ReturnType<typeof oneShot>; outcome: AttemptOutcome; killReason?: 'timeout' | 'cancel'; expected: string[]; check?: (d: Draft[]) => void }[] = [
    { name: 'completed, one-shot', state: oneShot, outcome: { kind: 'completed', output: p(1) }, expected: ['TurnCompleted', 'TaskCompleted:succeeded'] },
    { name: 'completed, multi-turn', state: multi, outcome: { kind: 'completed', output: p(1), state: p({ n: 1 }) }, expected: ['TurnCompleted'], check: (d) => expect(d[0]).toHaveProperty('state') },
    { name: 'suspended, multi-turn', state: multi, outcome: { kind: 'suspended', reason: 'ask', output: p('?') }, expected: ['TurnSuspended'], check: (d) => expect(d[0]).toMatchObject({ reason: 'ask' }) },
    { name: 'failed, one-shot', state: oneShot, outcome: { kind: 'failed', failure: { message: 'x', type: 'Error' } }, expected: ['TurnFailed', 'TaskCompleted:failed'] },
    { name: 'failed, multi-turn with a task cancel', state: multiTaskCancel, outcome: { kind: 'failed', failure: { message: 'x', type: 'Error' } }, expected: ['TurnFailed', 'TaskCompleted:cancelled'] },
    {
      name: 'cancelled: the requested reason wins over the handler\'s',
      state: multiTurnCancel,
      outcome: { kind: 'cancelled', reason: 'aborted' },
      expected: ['TurnCancelled'],
      check: (d) => expect(d[0]).toMatchObject({ reason: 'stop that' }),
    },
    { name: 'timed out cooperatively', state: multi, outcome: { kind: 'timed-out' }, expected: ['TurnTimedOut'], check: (d) => expect(d[0]).toMatchObject({ cause: 'cooperative' }) },
    { name: 'exit for recovery', state: oneShot, outcome: { kind: 'exit-for-recovery', reason: 'shutdown' }, expected: ['TurnExitedForRecovery'] },
    { name: 'crashed', state: oneShot, outcome: { kind: 'crashed', pid: 7, exitCode: 1, signal: null, message: 'gone' }, expected: ['WorkerCrashed'] },
    { name: 'killed at the timeout hard cap', state: oneShot, outcome: { kind: 'killed', pid: 7, signal: 'SIGKILL' }, expected: ['WorkerKilled', 'TurnTimedOut', 'TaskCompleted:timed_out'] },
    {
      name: 'killed after a cancel grace',
      state: multiTurnCancel,
      outcome: { kind: 'killed', pid: 7, signal: 'SIGKILL' },
      killReason: 'cancel',
      expected: ['WorkerKilled', 'TurnCancelled'],
      check: (d) => expect(d).toMatchObject([{ reason: 'cancel grace expired' }, { reason: 'stop that' }]),
    },
  ];
  it.each(cases)('$name', (c) => {
    const s = c.state();
    const { drafts } = outcomeDrafts(s, { turn: 1, attempt: 1, ...(c.killReason ? { killReason: c.killReason } : {}) }, c.outcome, lease, T0 + 5, false);
    expect(types(drafts)).toEqual(c.expected);
    c.check?.(drafts);
  });

  it('exit for recovery releases the lease in the same batch (expires now); no lease, no release', () => {
    expect(outcomeDrafts(oneShot(), { turn: 1, attempt: 1 }, { kind: 'exit-for-recovery', reason: 'r' }, lease, T0 + 5, false).lease).toEqual({ ...lease, expiresAt: T0 + 5 });
    expect(outcomeDrafts(oneShot(), { turn: 1, attempt: 1 }, { kind: 'exit-for-recovery', reason: 'r' }, undefined, T0 + 5, false).lease).toBeUndefined();
    expect(outcomeDrafts(oneShot(), { turn: 1, attempt: 1 }, { kind: 'completed', output: p(1) }, lease, T0 + 5, false).lease).toBeUndefined();
  });
});

describe('crashMessage: a crashed worker\'s stderr tail', () => {
  const crashed = (stderrTail?: string): Extract<AttemptOutcome, { kind: 'crashed' }> => ({ kind: 'crashed', pid: 7, exitCode: 1, signal: null, message: 'worker exited with code 1', ...(stderrTail === undefined ? {} : { stderrTail }) });
  it.each([
    { name: 'no tail: the message alone', tail: undefined, encodes: false, expected: 'worker exited with code 1' },
    { name: 'an empty tail: the message alone', tail: '', encodes: true, expected: 'worker exited with code 1' },
    { name: 'plain failure text: the tail is stored', tail: 'Error: secret-123', encodes: false, expected: 'worker exited with code 1; last stderr:\nError: secret-123' },
    { name: 'codecs encode failure text: the tail is not stored', tail: 'Error: secret-123', encodes: true, expected: "worker exited with code 1; stderr not stored (payload codecs encode failure text), see the engine's log" },
  ])('$name', ({ tail, encodes, expected }) => {
    expect(crashMessage(crashed(tail), encodes)).toBe(expected);
    const { drafts } = outcomeDrafts(oneShot(), { turn: 1, attempt: 1 }, crashed(tail), lease, T0 + 5, encodes);
    expect(drafts).toEqual([{ type: 'WorkerCrashed', turn: 1, attempt: 1, pid: 7, exitCode: 1, signal: null, message: expected }]);
  });
});

describe('hardCapDrafts and endDrafts', () => {
  it.each([
    { why: 'timeout' as const, state: oneShot, expected: ['TurnTimedOut', 'TaskCompleted:timed_out'] },
    { why: 'timeout' as const, state: multi, expected: ['TurnTimedOut'] },
    { why: 'cancel' as const, state: multiTurnCancel, expected: ['TurnCancelled'] },
    { why: 'cancel' as const, state: multiTaskCancel, expected: ['TurnCancelled', 'TaskCompleted:cancelled'] },
  ])('$why on $expected', ({ why, state, expected }) => {
    const d = hardCapDrafts(state(), 1, why);
    expect(types(d)).toEqual(expected);
    if (why === 'timeout') expect(d[0]).toMatchObject({ cause: 'hard_cap' });
  });

  it('endDrafts completes a one-shot task with the given outcome, a multi-turn one only on a task cancel', () => {
    const t: Draft = { type: 'TurnFailed', turn: 1, failure: { message: 'x', type: 'Error' } };
    expect(types(endDrafts(oneShot(), t, 'failed'))).toEqual(['TurnFailed', 'TaskCompleted:failed']);
    expect(types(endDrafts(multi(), t, 'failed'))).toEqual(['TurnFailed']);
    expect(types(endDrafts(multiTaskCancel(), t, 'failed'))).toEqual(['TurnFailed', 'TaskCompleted:cancelled']);
  });
});

describe('decisions as drafts', () => {
  it('finalize-turn: a backstop after the deadline times the turn out and ends a one-shot task', () => {
    const s = oneShot();
    const d = decide(s, undefined, s.openTurn!.deadline + 1);
    if (d.kind !== 'finalize-turn') throw new Error(`expected finalize-turn, got ${d.kind}`);
    const pending: Draft[] = [{ type: 'InputQueued', inputId: 'x', input: p(1), steering: true }];
    const drafts = finalizeDrafts(d, s, pending);
    expect(types(drafts)).toEqual(['InputQueued', 'TurnTimedOut', 'TaskCompleted:timed_out']);
    expect(drafts[1]).toEqual(terminalDraft(d, s));
  });

  it('finalize-turn: exhausted worker crashes fail the turn as WorkerCrashed, non-retryable', () => {
    let b = historyBuilder().created({ kind: 'one-shot' }).input('q').turnStarted().crashed();
    b = b.recovered().crashed().recovered().crashed();
    const s = fold('task-1', b.build());
    const d = decide(s, undefined, T0 + 10_000);
    if (d.kind !== 'finalize-turn') throw new Error(`expected finalize-turn, got ${d.kind}`);
    expect(terminalDraft(d, s)).toMatchObject({ type: 'TurnFailed', failure: { type: 'WorkerCrashed', code: 'TURNLOG_WORKER_CRASHED', nonRetryable: true } });
  });

  const who = { owner: 'o', instance: 'i-2', executor: 'inline' as const, pid: 42, now: T0 + 100, turnTimeoutMs: 60_000 };
  it('start-turn: LeaseClaimed only when the lease changed; a fresh turn gets now and now + timeout', () => {
    const s = fold('task-1', historyBuilder().created({ kind: 'multi-turn' }).input('q').build());
    const d = decide(s, undefined, who.now);
    if (d.kind !== 'start-turn') throw new Error(`expected start-turn, got ${d.kind}`);
    const claimed = turnStartDrafts(d, s, [], { ...who, lease: { ...lease, instance: 'i-2', generation: 2 }, previous: lease });
    expect(types(claimed)).toEqual(['LeaseClaimed', 'TurnStarted']);
    expect(claimed[0]).toMatchObject({ previousGeneration: 1, reason: 'turn-start' });
    expect(claimed[1]).toMatchObject({ attempt: 1, turnStartedAt: who.now, deadline: who.now + 60_000, pid: 42, inputIds: ['in-1'] });
    expect(types(turnStartDrafts(d, s, [], { ...who, lease, previous: lease }))).toEqual(['TurnStarted']);
  });

  it('rerun: the next attempt keeps the turn start and deadline, entry recovered, lease reason recovery', () => {
    const s = fold('task-1', historyBuilder().created({ kind: 'multi-turn' }).input('q').turnStarted().crashed().build());
    const d = decide(s, undefined, T0 + 10_000);
    if (d.kind !== 'rerun') throw new Error(`expected rerun, got ${d.kind}`);
    const drafts = turnStartDrafts(d, s, [], { ...who, lease: { ...lease, generation: 2 }, previous: undefined });
    expect(drafts[0]).toMatchObject({ type: 'LeaseClaimed', previousGeneration: 0, reason: 'recovery' });
    expect(drafts[1]).toMatchObject({ type: 'TurnStarted', attempt: 2, entryMode: 'recovered', turnStartedAt: s.openTurn!.turnStartedAt, deadline: s.openTurn!.deadline });
  });
});

describe('withinLimits', () => {
  const limits = { ...DEFAULT_PAYLOAD_LIMITS, outputBytes: 64, stateBytes: 64 };
  it.each([
    { name: 'a small output passes', o: { kind: 'completed', output: p(1) } as AttemptOutcome, failed: false },
    { name: 'an oversized output fails the turn', o: { kind: 'completed', output: p('x'.repeat(200)) } as AttemptOutcome, failed: true },
    { name: 'an oversized suspend state fails the turn', o: { kind: 'suspended', reason: 'r', state: p('x'.repeat(200)) } as AttemptOutcome, failed: true },
    { name: 'a crash is left alone', o: { kind: 'crashed', pid: 1, exitCode: 1, signal: null, message: 'm' } as AttemptOutcome, failed: false },
  ])('$name', ({ o, failed }) => {
    const r = withinLimits(limits, 'task-1', { turn: 1 }, o);
    expect(r.kind === 'failed' && o.kind !== 'failed').toBe(failed);
    if (failed && r.kind === 'failed') expect(r.failure.code).toBe('TURNLOG_PAYLOAD_TOO_LARGE');
  });

  it('a refused checkpoint fails even a small completed or a failed turn with the refusal', () => {
    const refused = new PayloadTooLargeError('checkpoint', 20, 8, 'Task task-1, turn 1, checkpoint');
    const a = { turn: 1, refused };
    expect(withinLimits(limits, 'task-1', a, { kind: 'completed', output: p(1) })).toMatchObject({ kind: 'failed', failure: { code: 'TURNLOG_PAYLOAD_TOO_LARGE' } });
    expect(withinLimits(limits, 'task-1', a, { kind: 'failed', failure: { message: 'own', type: 'Error' } })).toMatchObject({ kind: 'failed', failure: { code: 'TURNLOG_PAYLOAD_TOO_LARGE' } });
    expect(withinLimits(limits, 'task-1', { turn: 1 }, { kind: 'completed', output: p(1) }).kind).toBe('completed');
  });
});

describe('cancelDraft', () => {
  const suspended = () => fold('task-1', historyBuilder().created({ kind: 'multi-turn' }).input('q').turnStarted().completed('a').build());
  const done = () => fold('task-1', historyBuilder().created({ kind: 'one-shot' }).input('q').turnStarted().completed('a').build());
  it.each([
    { name: 'task cancel of a running turn', state: multi, scope: 'task' as const, expected: { scope: 'task', turn: 1 } },
    { name: 'turn cancel of a running turn', state: multi, scope: 'turn' as const, expected: { scope: 'turn', turn: 1 } },
    { name: 'task cancel of a suspended task (no open turn: turn 0)', state: suspended, scope: 'task' as const, expected: { scope: 'task', turn: 0 } },
    { name: 'turn cancel with no open turn: nothing', state: suspended, scope: 'turn' as const, expected: undefined },
    { name: 'a completed task: nothing', state: done, scope: 'task' as const, expected: undefined },
    { name: 'a second turn cancel: nothing', state: multiTurnCancel, scope: 'turn' as const, expected: undefined },
    { name: 'a task cancel after a turn cancel escalates', state: multiTurnCancel, scope: 'task' as const, expected: { scope: 'task', turn: 1 } },
    { name: 'anything after a task cancel: nothing', state: multiTaskCancel, scope: 'turn' as const, expected: undefined },
  ])('$name', ({ state, scope, expected }) => {
    const d = cancelDraft(state(), scope, 'why');
    if (expected === undefined) expect(d).toBeUndefined();
    else expect(d).toEqual({ type: 'CancelRequested', reason: 'why', ...expected });
  });
});
