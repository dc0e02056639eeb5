/**
 * Pure: what to write. Turns the replayer's decisions and attempt outcomes into drafts (events
 * without eventId, generation and time) — no store, no clock, no timers. The engine's driver and
 * supervisor lock, append these and schedule (STYLE.md §5 "Decide purely, then carry out").
 * Table-tested in test/runtime/drafts.test.ts.
 */
import { PayloadTooLargeError } from '../errors.js';
import type { DistributiveOmit, ExecutorKind, HistoryEvent, Lease, Payload, TaskOutcome } from '../history/events.js';
import { errorToFailure } from '../history/failure.js';
import type { PayloadLimits } from '../history/payload.js';
import { payloadSize } from '../history/payload.js';
import type { TaskState } from '../history/state.js';
import type { Decision } from '../replay/decision.js';
import type { AttemptOutcome } from '../attempt/host.js';

/** An event before the appender numbers, fences and stamps it. */
export type Draft = DistributiveOmit<HistoryEvent, 'eventId' | 'generation' | 'time'>;

/** Why the engine cut a turn off at the hard cap. */
export type HardCapReason = 'timeout' | 'cancel';

/** A cancelled turn records the reason its cancel was requested with, however it ended. */
export function cancelReason(s: TaskState, fallback: string): string {
  return s.openTurn?.cancelRequested?.reason ?? s.cancelRequested?.reason ?? fallback;
}

/** A cancel request as a draft, or undefined when there is nothing (more) to cancel. */
export function cancelDraft(s: TaskState, scope: 'task' | 'turn', reason: string): Draft | undefined {
  if (s.status === 'completed') return undefined;
  if (s.cancelRequested || s.openTurn?.cancelRequested?.scope === 'task') return undefined;
  if (scope === 'turn' && !s.openTurn) return undefined;
  if (scope === 'turn' && s.openTurn?.cancelRequested) return undefined;
  return { type: 'CancelRequested', scope, turn: s.openTurn?.turn ?? 0, reason };
}

/** The terminal event of a turn the replayer decided to finalize (recovery, backstop, cancel). */
export function terminalDraft(d: Extract<Decision, { kind: 'finalize-turn' }>, s: TaskState): Draft {
  switch (d.terminal) {
    case 'TurnCancelled':
      return { type: 'TurnCancelled', turn: d.turn, reason: cancelReason(s, d.reason) };
    case 'TurnTimedOut':
      return { type: 'TurnTimedOut', turn: d.turn, cause: d.cause ?? 'recovery_backstop' };
    case 'TurnFailed':
      return {
        type: 'TurnFailed',
        turn: d.turn,
        failure: { message: d.reason, type: d.rule === 'worker-crashes-exhausted' ? 'WorkerCrashed' : 'RecoveriesExhausted', code: d.rule === 'worker-crashes-exhausted' ? 'TURNLOG_WORKER_CRASHED' : 'TURNLOG_TURN_FAILED', nonRetryable: true },
      };
  }
}

/** A `finalize-turn` decision as drafts: `pending` first, the terminal, TaskCompleted if it ends the task. */
export function finalizeDrafts(d: Extract<Decision, { kind: 'finalize-turn' }>, s: TaskState, pending: Draft[]): Draft[] {
  const drafts: Draft[] = [...pending, terminalDraft(d, s)];
  if (d.completeTask) drafts.push({ type: 'TaskCompleted', outcome: d.completeTask });
  return drafts;
}

/** The terminal draft plus TaskCompleted when this ends the task. */
export function endDrafts(s: TaskState, terminal: Draft, outcome: TaskOutcome): Draft[] {
  const drafts = [terminal];
  const ot = s.openTurn;
  if (s.kind === 'one-shot') drafts.push({ type: 'TaskCompleted', outcome });
  else if (ot?.cancelRequested?.scope === 'task') drafts.push({ type: 'TaskCompleted', outcome: 'cancelled' });
  return drafts;
}

/** How a turn cut off at the hard cap ends: timed out (hard cap), or cancelled after a cancel's grace. */
export function hardCapDrafts(s: TaskState, turn: number, why: HardCapReason): Draft[] {
  return why === 'timeout'
    ? endDrafts(s, { type: 'TurnTimedOut', turn, cause: 'hard_cap' }, 'timed_out')
    : endDrafts(s, { type: 'TurnCancelled', turn, reason: cancelReason(s, 'cancel grace expired') }, 'cancelled');
}

/** Who is starting the attempt, and with what (the shell reserves the worker and claims the lease). */
export interface AttemptStart {
  owner: string;
  instance: string;
  executor: ExecutorKind;
  /** The worker's pid, 0 while it waits for a free worker. */
  pid: number;
  now: number;
  turnTimeoutMs: number;
  /** The lease this attempt runs under (from `nextLease`), and the one cached before it. */
  lease: Lease;
  previous: Lease | undefined;
  /** `defineWorkflow({ version })` of the code starting the attempt, if it set one. */
  workflowVersion?: number | undefined;
}

/** A `start-turn` or `rerun` decision as drafts: `pending`, LeaseClaimed if the lease changed, TurnStarted. */
export function turnStartDrafts(d: Extract<Decision, { kind: 'rerun' | 'start-turn' }>, preview: TaskState, pending: Draft[], a: AttemptStart): Draft[] {
  const { lease, previous } = a;
  const drafts: Draft[] = [...pending];
  if (!previous || lease.generation !== previous.generation || lease.instance !== previous.instance) {
    drafts.push({
      type: 'LeaseClaimed',
      owner: lease.owner,
      instance: lease.instance,
      previousGeneration: previous?.generation ?? 0,
      reason: d.kind === 'rerun' ? 'recovery' : 'turn-start',
      expiresAt: lease.expiresAt,
    });
  }
  const open = preview.openTurn;
  if (d.kind === 'rerun') {
    drafts.push({
      type: 'TurnStarted',
      turn: d.turn,
      attempt: d.attempt,
      inputIds: open!.inputIds,
      entryMode: 'recovered',
      steered: open!.steered,
      owner: a.owner,
      instance: a.instance,
      executor: a.executor,
      pid: a.pid,
      turnStartedAt: open!.turnStartedAt,
      deadline: open!.deadline,
      ...(a.workflowVersion !== undefined ? { workflowVersion: a.workflowVersion } : {}),
    });
  } else {
    drafts.push({
      type: 'TurnStarted',
      turn: d.turn,
      attempt: 1,
      inputIds: d.inputIds,
      entryMode: d.entryMode,
      steered: d.steered,
      owner: a.owner,
      instance: a.instance,
      executor: a.executor,
      pid: a.pid,
      turnStartedAt: a.now,
      deadline: a.now + a.turnTimeoutMs,
      ...(a.workflowVersion !== undefined ? { workflowVersion: a.workflowVersion } : {}),
    });
  }
  return drafts;
}

/** The attempt an outcome belongs to, as the supervisor saw it end. */
export interface EndedAttempt {
  turn: number;
  attempt: number;
  /** Why the engine killed the worker, when it did. */
  killReason?: HardCapReason;
}

/**
 * An attempt's outcome as drafts. `lease` is the task's lease: exit-for-recovery releases it
 * (expiresAt = now) in the same batch, so another instance may take over at once.
 * `encodesFailureText`: the engine's payload codecs encode failure text (see {@link crashMessage}).
 */
export function outcomeDrafts(s: TaskState, a: EndedAttempt, outcome: AttemptOutcome, lease: Lease | undefined, now: number, encodesFailureText: boolean): { drafts: Draft[]; lease?: Lease } {
  const turn = a.turn;
  switch (outcome.kind) {
    case 'completed': {
      const d: Draft = { type: 'TurnCompleted', turn, output: outcome.output };
      if (outcome.state) d.state = outcome.state;
      return { drafts: endDrafts(s, d, 'succeeded') };
    }
    case 'suspended': {
      const d: Draft = { type: 'TurnSuspended', turn, reason: outcome.reason };
      if (outcome.output) d.output = outcome.output;
      if (outcome.state) d.state = outcome.state;
      return { drafts: endDrafts(s, d, 'succeeded') };
    }
    case 'failed':
      return { drafts: endDrafts(s, { type: 'TurnFailed', turn, failure: outcome.failure }, 'failed') };
    case 'cancelled':
      return { drafts: endDrafts(s, { type: 'TurnCancelled', turn, reason: cancelReason(s, outcome.reason) }, 'cancelled') };
    case 'timed-out':
      return { drafts: endDrafts(s, { type: 'TurnTimedOut', turn, cause: 'cooperative' }, 'timed_out') };
    case 'exit-for-recovery': {
      const drafts: Draft[] = [{ type: 'TurnExitedForRecovery', turn, attempt: a.attempt, reason: outcome.reason }];
      return lease ? { drafts, lease: { ...lease, expiresAt: now } } : { drafts };
    }
    case 'crashed':
      return { drafts: [{ type: 'WorkerCrashed', turn, attempt: a.attempt, pid: outcome.pid, exitCode: outcome.exitCode, signal: outcome.signal, message: crashMessage(outcome, encodesFailureText) }] };
    case 'killed': {
      const killed: Draft = { type: 'WorkerKilled', turn, pid: outcome.pid, signal: outcome.signal, reason: a.killReason === 'cancel' ? 'cancel grace expired' : 'turn timeout hard cap' };
      return { drafts: [killed, ...hardCapDrafts(s, turn, a.killReason ?? 'timeout')] };
    }
  }
}

/**
 * A crashed worker's message with its stderr tail. The tail quotes uncaught errors (messages,
 * stacks): with failure text encoded by the codecs it is not stored in plain text; the worker's
 * stderr is in the engine's log anyway.
 */
export function crashMessage(outcome: Extract<AttemptOutcome, { kind: 'crashed' }>, encodesFailureText: boolean): string {
  const tail = outcome.stderrTail;
  if (!tail) return outcome.message;
  return encodesFailureText ? `${outcome.message}; stderr not stored (payload codecs encode failure text), see the engine's log` : `${outcome.message}; last stderr:\n${tail}`;
}

/** Each field's limit, named once: a key built per call (`${field}Bytes`) is a fresh string to look up on every step. */
const LIMIT_OF = { stepResult: 'stepResultBytes', checkpoint: 'checkpointBytes', state: 'stateBytes', output: 'outputBytes' } as const;

/** The handler's payload over its limit, as the error to record; undefined when it fits. */
export function oversized(limits: Readonly<PayloadLimits>, field: keyof typeof LIMIT_OF, p: Payload | undefined, subject: string): PayloadTooLargeError | undefined {
  if (!p) return undefined;
  const size = payloadSize(p);
  const limit = limits[LIMIT_OF[field]];
  return size > limit ? new PayloadTooLargeError(field, size, limit, subject) : undefined;
}

/**
 * A completed or suspended outcome whose output or state is over its limit becomes a failure;
 * so does any completed, suspended or failed outcome of an attempt whose checkpoint was `refused`.
 */
export function withinLimits(limits: Readonly<PayloadLimits>, taskId: string, a: { turn: number; refused?: PayloadTooLargeError | undefined }, o: AttemptOutcome): AttemptOutcome {
  if (o.kind !== 'completed' && o.kind !== 'suspended' && o.kind !== 'failed') return o;
  const at = `Task ${taskId}, turn ${a.turn}`;
  const refused =
    a.refused ??
    (o.kind === 'failed'
      ? undefined
      : (oversized(limits, 'output', o.output, `${at}, ${o.kind === 'suspended' ? 'suspend output' : 'output'}`) ?? oversized(limits, 'state', o.state, `${at}, ctx.state`)));
  return refused ? { kind: 'failed', failure: errorToFailure(refused) } : o;
}

/**
 * How the wait at `seq` of the open turn ends now (ctx.waitFor), or undefined while it waits:
 * with the first buffered signal of its name (a signal wins over a deadline that also passed),
 * else by its timeout once `now` reaches the recorded deadline.
 */
export function waitEndDraft(s: TaskState, seq: number, now: number): Draft | undefined {
  const ot = s.openTurn;
  const call = ot?.calls[seq - 1];
  if (!ot || call?.kind !== 'wait' || call.ended) return undefined;
  const sig = s.signals?.find((x) => x.name === call.name);
  if (sig) return { type: 'WaitEnded', turn: ot.turn, seq, signalId: sig.signalId, timedOut: false };
  if (call.deadline !== undefined && now >= call.deadline) return { type: 'WaitEnded', turn: ot.turn, seq, signalId: '', timedOut: true };
  return undefined;
}
