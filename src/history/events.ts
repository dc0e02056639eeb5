/**
 * The history event catalogue as plain TypeScript types. This is what the public API, the
 * replayer and the engine speak; `codec.ts` is the only place that maps it to protobuf.
 * docs/history.md describes each event and when it is written.
 */

/**
 * Version of the history format written by this build. Bump with a docs/upgrading.md entry.
 * 2: a turn's state may be recorded as a {@link StateDelta} (tasks created with format ≥ 2 only).
 */
export const HISTORY_FORMAT_VERSION = 2;

/** `temporal.api.common.v1.Payload`: encoded bytes plus metadata (`encoding` names the converter). */
export interface Payload {
  metadata: Record<string, Uint8Array>;
  data: Uint8Array;
}

/** A recorded failure, stored as `temporal.api.failure.v1.Failure` (application failure info). */
export interface FailureInfo {
  message: string;
  /** The error's class or type name (`Error`, `TypeError`, an application type). */
  type: string;
  stack?: string;
  /** A non-retryable failure is never retried by step retry policies. */
  nonRetryable?: boolean;
  /** A stable error code, when the error carried one (for example a TURNLOG_* code). */
  code?: string;
  details?: Payload;
  cause?: FailureInfo;
  /**
   * Temporal's `encoded_attributes`: `{ message, stack_trace }` as a payload encoded by the
   * payload codecs. When set, `message` is the placeholder `Encoded failure` and `stack` is empty.
   */
  encodedAttributes?: Payload;
}

export type WorkflowKind = 'one-shot' | 'multi-turn';
export type EntryMode = 'fresh' | 'resumed' | 'recovered';
export type ExecutorKind = 'inline' | 'process';
export type TaskOutcome = 'succeeded' | 'failed' | 'cancelled' | 'timed_out';
export type TimeoutCause = 'cooperative' | 'hard_cap' | 'recovery_marker' | 'recovery_backstop';
export type CancelScope = 'task' | 'turn';

export interface RetryPolicy {
  /** Total attempts including the first; 1 means no retry. */
  maxAttempts: number;
  initialIntervalMs: number;
  backoffCoefficient: number;
  maxIntervalMs: number;
  /** Error `type`s (class names) that are never retried. */
  nonRetryableTypes: string[];
  /**
   * Each backoff delay is spread by ± this fraction at random (0.2: ±20%, the default when
   * absent; 0: none), so many tasks failing together do not retry in lockstep.
   */
  jitter?: number;
}

/** Per-turn policy. Recorded in `TaskCreated`; every turn's deadline is recorded in `TurnStarted`. */
export interface TurnPolicy {
  turnTimeoutMs: number;
  graceMs: number;
  /** Re-runs of one turn after crashes of the engine or exits for recovery. */
  maxRecoveries: number;
  /** Re-runs of one turn after its worker process died unexpectedly. */
  maxWorkerCrashes: number;
  steeringMaxQueued: number;
  executor: ExecutorKind;
  stepRetry: RetryPolicy;
}

interface EventBase {
  /** Dense from 1 within a task. */
  eventId: number;
  /** Milliseconds since the Unix epoch, from the engine's clock. */
  time: number;
  /** Lease generation the event was written under (fencing token). */
  generation: number;
}

export interface TaskCreated extends EventBase {
  type: 'TaskCreated';
  workflow: string;
  kind: WorkflowKind;
  policy: TurnPolicy;
  formatVersion: number;
  /** Set on a fork: the original task, the turn it was forked at and that turn's terminal event id. */
  forkedFrom?: TaskOrigin;
  /** Set on a child task (`ctx.startChild`): the parent's call that started it. */
  parent?: TaskParent;
}
/** The parent of a child task: its id, and the turn and call position that started the child. */
export interface TaskParent {
  taskId: string;
  turn: number;
  seq: number;
  /** Started with `{ cancelWithParent: false }`: cancelling the parent leaves this child running. */
  detached: boolean;
}
/** How a child's first turn ended, as its parent observed it (docs/children.md). */
export type ChildStatus = 'completed' | 'suspended' | 'failed' | 'cancelled' | 'timed_out';
/** Where a forked task's history was copied from (`Engine.fork`, `turnlog fork`). */
export interface TaskOrigin {
  taskId: string;
  turn: number;
  eventId: number;
}
export interface InputQueued extends EventBase {
  type: 'InputQueued';
  inputId: string;
  input: Payload;
  /** True when the input arrived while a turn was running. */
  steering: boolean;
  /** A scheduled input (`send(input, { deliverAt })`): no turn takes it before this time (ms since epoch). */
  deliverAt?: number;
  /** The sender's trace context (W3C), when an observer recorded it (turnlog/otel). */
  trace?: TraceContext;
}
/**
 * A W3C trace context (https://www.w3.org/TR/trace-context/): `traceparent` is
 * `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`; `tracestate` is vendor data, or absent.
 */
export interface TraceContext {
  traceparent: string;
  tracestate?: string;
}
export interface InputWithdrawn extends EventBase {
  type: 'InputWithdrawn';
  inputId: string;
  reason: string;
}
export interface TurnStarted extends EventBase {
  type: 'TurnStarted';
  turn: number;
  attempt: number;
  inputIds: string[];
  entryMode: EntryMode;
  /** The turn's input came from the steering queue. */
  steered: boolean;
  owner: string;
  instance: string;
  executor: ExecutorKind;
  pid: number;
  /** When attempt 1 started; every recovery attempt copies it unchanged (non-resurrection). */
  turnStartedAt: number;
  /** turnStartedAt + turnTimeoutMs. */
  deadline: number;
  /** `defineWorkflow({ version })` of the code that ran this attempt; absent when it set none (docs/versioning.md). */
  workflowVersion?: number;
}
export interface StepCompleted extends EventBase {
  type: 'StepCompleted';
  turn: number;
  attempt: number;
  /** 1-based position among the turn's recorded calls (steps, checkpoints, takeInputs). */
  seq: number;
  name: string;
  result?: Payload;
  failure?: FailureInfo;
  durationMs: number;
  /** The flow limit the step ran under (`ctx.step(name, fn, { limit })`); absent without one. */
  limit?: string;
  /** How long the step waited for its limit's slot and rate token (ms); set with `limit`. */
  waitedMs?: number;
}
export interface InputsTaken extends EventBase {
  type: 'InputsTaken';
  turn: number;
  seq: number;
  inputIds: string[];
}
/** `ctx.sleep(ms)`: a durable in-turn timer; a re-run of the turn sleeps only until `fireAt`. */
export interface TimerStarted extends EventBase {
  type: 'TimerStarted';
  turn: number;
  seq: number;
  durationMs: number;
  fireAt: number;
}
/** `ctx.startChild()`: the turn started (or, on a re-run, found) child task `childId`. */
export interface ChildStarted extends EventBase {
  type: 'ChildStarted';
  turn: number;
  seq: number;
  childId: string;
  workflow: string;
  /** Started with `{ cancelWithParent: false }`. */
  detached: boolean;
}
/** `child.result()` / `ctx.awaitChild()`: the child's outcome, recorded before the handler sees it (invariant 9). */
export interface ChildEnded extends EventBase {
  type: 'ChildEnded';
  turn: number;
  seq: number;
  childId: string;
  status: ChildStatus;
  output?: Payload;
  failure?: FailureInfo;
  reason?: string;
}
/** `task.signal(name, value)`: buffered until a `ctx.waitFor(name)` takes it (docs/time.md). */
export interface SignalReceived extends EventBase {
  type: 'SignalReceived';
  signalId: string;
  name: string;
  value: Payload;
}
/** `ctx.waitFor(name, { timeoutMs })` started: a recorded call; `deadline` = engine now + timeoutMs. */
export interface WaitStarted extends EventBase {
  type: 'WaitStarted';
  turn: number;
  seq: number;
  name: string;
  timeoutMs?: number;
  /** When the wait times out; absent: it waits until a signal (or the turn's end). */
  deadline?: number;
}
/** The wait at `seq` ended: it took signal `signalId` (with its `value`), or timed out. */
export interface WaitEnded extends EventBase {
  type: 'WaitEnded';
  turn: number;
  seq: number;
  /** The signal taken ('' when timed out); its value is the SignalReceived's, not copied here. */
  signalId: string;
  timedOut: boolean;
}
export interface Checkpointed extends EventBase {
  type: 'Checkpointed';
  turn: number;
  seq: number;
  data: Payload;
}
/** ctx.patched(id) / ctx.deprecatePatch(id) took the new branch at this position (docs/versioning.md). */
export interface PatchMarked extends EventBase {
  type: 'PatchMarked';
  turn: number;
  seq: number;
  patchId: string;
  /** Written by deprecatePatch. */
  deprecated: boolean;
}
/** The timeout marker: appended before the cooperative cancel is sent. */
export interface TimeoutCancelRequested extends EventBase {
  type: 'TimeoutCancelRequested';
  turn: number;
  at: number;
  graceUntil: number;
}
export interface CancelRequested extends EventBase {
  type: 'CancelRequested';
  scope: CancelScope;
  /** The open turn when requested, 0 if none. */
  turn: number;
  reason: string;
}
export interface WorkerKilled extends EventBase {
  type: 'WorkerKilled';
  turn: number;
  pid: number;
  signal: string;
  reason: string;
}
export interface WorkerCrashed extends EventBase {
  type: 'WorkerCrashed';
  turn: number;
  attempt: number;
  pid: number;
  exitCode: number | null;
  signal: string | null;
  message: string;
}
/**
 * A turn's new state as a change of the previous state (format 2): `prefix` bytes kept from its
 * start, `suffix` from its end, and the pieces in between; the metadata is the previous state's.
 */
export interface StateDelta {
  prefix: number;
  suffix: number;
  pieces: StateDeltaPiece[];
}
/**
 * Literal bytes, or a copy of `length` bytes at `offset` of a source: 0 is the previous state,
 * 1… the turn's payloads in the order of `turnSources` (`history/state-delta.ts`).
 */
export type StateDeltaPiece = { literal: Uint8Array } | { source: number; offset: number; length: number };

export interface TurnCompleted extends EventBase {
  type: 'TurnCompleted';
  turn: number;
  output?: Payload;
  /** The full new state (never together with `stateDelta`). */
  state?: Payload;
  /** The new state as a change of the previous one (format 2). */
  stateDelta?: StateDelta;
}
export interface TurnFailed extends EventBase {
  type: 'TurnFailed';
  turn: number;
  failure: FailureInfo;
}
export interface TurnSuspended extends EventBase {
  type: 'TurnSuspended';
  turn: number;
  reason: string;
  output?: Payload;
  /** The full new state (never together with `stateDelta`). */
  state?: Payload;
  /** The new state as a change of the previous one (format 2). */
  stateDelta?: StateDelta;
}
export interface TurnCancelled extends EventBase {
  type: 'TurnCancelled';
  turn: number;
  reason: string;
}
export interface TurnTimedOut extends EventBase {
  type: 'TurnTimedOut';
  turn: number;
  cause: TimeoutCause;
}
/** Ends an attempt, not a turn: the next engine re-runs the turn as `recovered`. */
export interface TurnExitedForRecovery extends EventBase {
  type: 'TurnExitedForRecovery';
  turn: number;
  attempt: number;
  reason: string;
}
export interface LeaseClaimed extends EventBase {
  type: 'LeaseClaimed';
  owner: string;
  instance: string;
  previousGeneration: number;
  reason: string;
  expiresAt: number;
}
/**
 * The state migration hook ran before a turn started on a state of an older workflow version
 * (docs/versioning.md#state-migrations); in the same batch as that TurnStarted, just before it.
 */
export interface StateMigrated extends EventBase {
  type: 'StateMigrated';
  /** The state's version before: 0 when code without a version last started a turn on it. */
  fromVersion: number;
  toVersion: number;
  /** The migrated state in full (never together with `stateDelta`). */
  state?: Payload;
  /** The migrated state as a change of the previous one (format 2; no other sources). */
  stateDelta?: StateDelta;
}
/** Operator actions recorded by the CLI (docs/cli.md#operator-actions). */
export type OperatorActionKind = 'cancel-task' | 'cancel-turn' | 'withdraw' | 'resend' | 'resume';
/** Who did what from the CLI; appended with the action's effect, changes no state by itself. */
export interface OperatorAction extends EventBase {
  type: 'OperatorAction';
  action: OperatorActionKind;
  by: string;
  reason: string;
  /** The turn it targets; 0 for none. */
  turn: number;
  /** The input it targets; '' for none. */
  inputId: string;
  /** resend/resume: the input it queued; '' for none. */
  newInputId: string;
}
export interface TaskCompleted extends EventBase {
  type: 'TaskCompleted';
  outcome: TaskOutcome;
}
/**
 * Compaction (opt-in per workflow): always event 2, standing for the deleted events
 * 2..`throughEventId`; `state` is the folded state there (`encodeState` bytes). The next event
 * is `throughEventId + 1`.
 */
export interface HistoryCompacted extends EventBase {
  type: 'HistoryCompacted';
  throughEventId: number;
  state: Uint8Array;
  /** Turns 1..turns ended before the cut. */
  turns: number;
  droppedEvents: number;
  /**
   * Ids of every input whose `InputQueued` was dropped (by this compaction or an earlier one),
   * so an idempotent send still knows them. Absent when none, and in histories compacted before
   * the field existed (proto field 5).
   */
  droppedInputIds?: string[];
}

export type HistoryEvent =
  | TaskCreated
  | InputQueued
  | InputWithdrawn
  | TurnStarted
  | StepCompleted
  | InputsTaken
  | Checkpointed
  | PatchMarked
  | TimeoutCancelRequested
  | CancelRequested
  | WorkerKilled
  | WorkerCrashed
  | TurnCompleted
  | TurnFailed
  | TurnSuspended
  | TurnCancelled
  | TurnTimedOut
  | TurnExitedForRecovery
  | LeaseClaimed
  | TaskCompleted
  | HistoryCompacted
  | OperatorAction
  | TimerStarted
  | StateMigrated
  | ChildStarted
  | ChildEnded
  | SignalReceived
  | WaitStarted
  | WaitEnded;

export type EventType = HistoryEvent['type'];

/**
 * The id of the event after `e`: ids are dense, except that a compaction (event 2) stands for
 * events 2..throughEventId, so the next event is throughEventId + 1.
 */
export function eventIdAfter(e: HistoryEvent): number {
  return e.type === 'HistoryCompacted' && e.eventId === 2 && e.throughEventId > 2 ? e.throughEventId + 1 : e.eventId + 1;
}

/** An event before the store numbers it: the engine supplies everything but the event id. */
export type NewEvent = DistributiveOmit<HistoryEvent, 'eventId'>;

/** `Omit` applied to each member of a union (plain `Omit` collapses the union). */
export type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

export const TURN_TERMINAL_TYPES = [
  'TurnCompleted',
  'TurnFailed',
  'TurnSuspended',
  'TurnCancelled',
  'TurnTimedOut',
] as const satisfies readonly EventType[];
export type TurnTerminalEvent = Extract<HistoryEvent, { type: (typeof TURN_TERMINAL_TYPES)[number] }>;

const terminalSet: ReadonlySet<string> = new Set(TURN_TERMINAL_TYPES);
/** Exactly one of these ends each turn (invariant 5). */
export function isTurnTerminal(e: { type: string }): e is TurnTerminalEvent {
  return terminalSet.has(e.type);
}

export const ALL_EVENT_TYPES = [
  'TaskCreated',
  'InputQueued',
  'InputWithdrawn',
  'TurnStarted',
  'StepCompleted',
  'InputsTaken',
  'Checkpointed',
  'PatchMarked',
  'TimeoutCancelRequested',
  'CancelRequested',
  'WorkerKilled',
  'WorkerCrashed',
  'TurnCompleted',
  'TurnFailed',
  'TurnSuspended',
  'TurnCancelled',
  'TurnTimedOut',
  'TurnExitedForRecovery',
  'LeaseClaimed',
  'TaskCompleted',
  'HistoryCompacted',
  'OperatorAction',
  'TimerStarted',
  'StateMigrated',
  'ChildStarted',
  'ChildEnded',
  'SignalReceived',
  'WaitStarted',
  'WaitEnded',
] as const satisfies readonly EventType[];

/** A lease record: who may write a task now. */
export interface Lease {
  owner: string;
  instance: string;
  generation: number;
  /** Milliseconds since the epoch; a lease at or past it is expired. */
  expiresAt: number;
}

export type TaskStatus = 'pending' | 'in_progress' | 'suspended' | 'completed';

/** A task's derived summary (an index; rebuildable from the history). */
export interface TaskSummary {
  taskId: string;
  workflow: string;
  kind: WorkflowKind;
  status: TaskStatus;
  outcome?: TaskOutcome;
  lastEventId: number;
  /** The last started turn, 0 before the first. */
  turn: number;
  /** Inputs queued and not yet taken, scheduled ones included. */
  queued: number;
  /** Scheduled inputs not yet taken, by input id: their deliverAt (what the claim of due work reads). */
  scheduled?: Record<string, number>;
  lastInputId?: string;
  /**
   * A task-scoped cancel was requested and the task has not completed (`TaskCompleted` clears it):
   * due work in any status, decision rule 2 completes or finalizes it (docs/recovery.md).
   */
  cancelRequested?: true;
  createdAt: number;
  updatedAt: number;
  /**
   * Set by `listTasks` when the engine found the task's stored records unreadable and isolated
   * it (the record that failed and why). Not part of the history's projection.
   */
  corrupt?: { key: string; code: string; message: string };
}
