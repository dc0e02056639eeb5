/**
 * The folded state of one task: what `replay/fold.ts` produces from a history and what a
 * snapshot stores. Plain data, serializable with `history/state-codec.ts`.
 */
import type {
  EntryMode,
  ExecutorKind,
  FailureInfo,
  Payload,
  CancelScope,
  ChildStatus,
  TaskOutcome,
  TaskParent,
  TaskStatus,
  TraceContext,
  TurnPolicy,
  WorkflowKind,
} from './events.js';

export interface QueuedInput {
  inputId: string;
  input: Payload;
  /** Arrived while a turn was running. */
  steering: boolean;
  eventId: number;
  time: number;
  /** A scheduled input: not taken by a turn (nor takeInputs) before this time. */
  deliverAt?: number;
  /** The sender's trace context, as `InputQueued` recorded it. */
  trace?: TraceContext;
}

/** One recorded call of a turn, in call order: `seq` is its 1-based position. */
export type RecordedCall =
  | {
      kind: 'step';
      seq: number;
      name: string;
      eventId: number;
      attempt: number;
      result?: Payload;
      failure?: FailureInfo;
      durationMs: number;
    }
  | { kind: 'checkpoint'; seq: number; eventId: number; data: Payload }
  | { kind: 'take-inputs'; seq: number; eventId: number; inputIds: string[] }
  | { kind: 'patch'; seq: number; eventId: number; patchId: string; deprecated: boolean }
  | { kind: 'sleep'; seq: number; eventId: number; durationMs: number; fireAt: number }
  | { kind: 'child'; seq: number; eventId: number; op: 'start'; childId: string; workflow: string; detached: boolean }
  | { kind: 'child'; seq: number; eventId: number; op: 'await'; childId: string; outcome: ChildOutcome }
  | {
      kind: 'wait';
      seq: number;
      eventId: number;
      name: string;
      timeoutMs?: number;
      deadline?: number;
      /** Set by WaitEnded: the signal taken or the timeout. */
      ended?: WaitOutcome;
    };

/** A child's outcome as recorded in its parent (ChildEnded). */
export interface ChildOutcome {
  status: ChildStatus;
  output?: Payload;
  failure?: FailureInfo;
  reason?: string;
}

/** A child task this task started (from its ChildStarted; `status` once a ChildEnded recorded it). */
export interface ChildRef {
  childId: string;
  workflow: string;
  turn: number;
  seq: number;
  detached: boolean;
  status?: ChildStatus;
}

/** How a wait ended (WaitEnded). */
export interface WaitOutcome {
  /** The signal taken; '' when timed out. */
  signalId: string;
  value?: Payload;
  timedOut: boolean;
  eventId: number;
}

/** A signal received and not yet taken by a wait. */
export interface BufferedSignal {
  signalId: string;
  name: string;
  value: Payload;
  eventId: number;
  time: number;
}

export interface OpenTurn {
  turn: number;
  /** The latest attempt started (1 for the first run). */
  attempt: number;
  /** False after the attempt ended without a terminal (exit for recovery, worker crash). */
  attemptRunning: boolean;
  inputIds: string[];
  /** The turn's inputs (persisted, so a recovered attempt gets the same input). */
  inputs: QueuedInput[];
  entryMode: EntryMode;
  steered: boolean;
  turnStartedAt: number;
  deadline: number;
  executor: ExecutorKind;
  owner: string;
  instance: string;
  startedEventId: number;
  calls: RecordedCall[];
  /** The latest checkpoint's data, if any. */
  checkpoint?: Payload;
  /** Steering inputs this turn consumed with takeInputs(), in order. */
  taken: QueuedInput[];
  /** The timeout marker, once appended. */
  marker?: { at: number; graceUntil: number; eventId: number };
  /** Worker processes of this turn that died without a terminal. */
  workerCrashes: number;
  /** A pending cancel of this turn (scope turn or task). */
  cancelRequested?: { scope: CancelScope; reason: string; eventId: number };
  /** The running (or last) attempt's TurnStarted `workflowVersion`: the state it writes is of that version. */
  workflowVersion?: number;
}

export interface TurnRecord {
  turn: number;
  /** The terminal event's type. */
  terminal: 'TurnCompleted' | 'TurnFailed' | 'TurnSuspended' | 'TurnCancelled' | 'TurnTimedOut';
  eventId: number;
  attempts: number;
}

export interface TaskState {
  taskId: string;
  workflow: string;
  kind: WorkflowKind;
  policy: TurnPolicy;
  formatVersion: number;
  createdAt: number;
  updatedAt: number;
  lastEventId: number;
  /** The highest generation any event was written under. */
  highestGeneration: number;
  status: TaskStatus;
  outcome?: TaskOutcome;
  /** The last started turn's number, 0 before the first. */
  turn: number;
  openTurn?: OpenTurn;
  /** Inputs waiting for a turn, in arrival order (minus withdrawn and taken ones). */
  queue: QueuedInput[];
  /** Output of the last turn that produced one. */
  lastOutput?: Payload;
  /** Durable per-task state carried across turns (from the last TurnCompleted/TurnSuspended). */
  state?: Payload;
  lastFailure?: FailureInfo;
  /** The last finished turn. */
  lastTurn?: TurnRecord;
  /** Recovered attempts over the task's life. */
  recoveryCount: number;
  workerCrashCount: number;
  /** A task-scoped cancel requested while no turn was open and not yet finalized. */
  cancelRequested?: { scope: CancelScope; reason: string; eventId: number };
  lastInputId?: string;
  /**
   * The workflow version the state is shaped for: the `workflowVersion` of the attempt whose
   * terminal wrote it (0 without one), or StateMigrated's `toVersion`. Undefined before the first
   * state, and when folded from a snapshot written before state versions existed.
   */
  stateVersion?: number;
  /** Set on a child task: its parent (TaskCreated.parent). */
  parent?: TaskParent;
  /** Children this task started, in start order (ChildStarted); empty for most tasks. */
  children?: ChildRef[];
  /** Signals received and not yet taken by a `ctx.waitFor`, in arrival order (absent: none). */
  signals?: BufferedSignal[];
}
