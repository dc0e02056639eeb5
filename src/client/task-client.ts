/**
 * The client API of tasks: what a TaskHandle calls. The engine implements it in-process; a
 * remote client (over HTTP, a queue) can implement it too, and handles work unchanged.
 * Only types live here, so `client/` never imports the runtime (no import cycle).
 */
import type { FailureInfo, HistoryEvent, TaskOutcome, TaskParent } from '../history/events.js';
import type { ChildRef, TaskState } from '../history/state.js';
import type { Decision } from '../replay/decision.js';
import type { StreamItem, StreamOptions } from '../stream/items.js';

export interface StartOptions {
  /** Caller-chosen task id; default `task-` + the start time + 96 random bits (ids sort by start). Starting an existing task sends it the input. */
  taskId?: string;
  /** Caller-chosen input id; an id the task already has is not sent twice. */
  inputId?: string;
  /** Precondition: the task's last input id must be this (vacuous for a new task). */
  ifLastInputId?: string;
  /**
   * A scheduled input: no turn takes it before this time (ms since epoch, or a Date). Until then
   * the task holds no turn, worker or timer of its own; a time already past sends it at once.
   * docs/time.md#scheduled-inputs
   */
  deliverAt?: number | Date;
}

export interface SendOptions {
  inputId?: string;
  ifLastInputId?: string;
  /** A scheduled input: no turn takes it before this time (see {@link StartOptions.deliverAt}). */
  deliverAt?: number | Date;
}

/** A task as the engine sees it now. */
export interface TaskDescription {
  taskId: string;
  workflow: string;
  kind: 'one-shot' | 'multi-turn';
  status: TaskState['status'];
  outcome?: TaskOutcome;
  turn: number;
  lastEventId: number;
  queuedInputIds: string[];
  openTurn?: {
    turn: number;
    attempt: number;
    entryMode: string;
    running: boolean;
    deadline: number;
    timeoutMarked: boolean;
    cancelRequested: boolean;
  };
  lastInputId?: string;
  /** The durable per-task state as of the last completed or suspended turn (decoded). */
  state?: unknown;
  /** The last turn's output, decoded, if it produced one. */
  lastOutput?: unknown;
  decision: Decision;
  /** A child task's parent: the task, and the turn and call that started it (docs/children.md). */
  parent?: TaskParent;
  /** Children this task started, in start order; `status` once the task recorded their outcome. */
  children?: ChildRef[];
  /**
   * Set when the task's stored records cannot be read: the engine isolated it (decision rule
   * `corrupt`), runs nothing for it and refuses its APIs with HistoryCorruptError. The other
   * fields come from the task's summary.
   */
  corrupt?: { key: string; code: string; message: string };
}

/** How the turn that took an input ended. */
export interface TurnResult<O = unknown> {
  taskId: string;
  /** The turn number; 0 when the input never ran (withdrawn, or the task ended first). */
  turn: number;
  inputIds: string[];
  status: 'completed' | 'suspended' | 'failed' | 'cancelled' | 'timed_out' | 'withdrawn';
  output?: O;
  /** Suspension reason, cancel reason, timeout cause. */
  reason?: string;
  failure?: FailureInfo;
}

/** The per-task operations behind a {@link TaskHandle}; `Engine` implements them. */
export interface TaskClient {
  /** Sends an input to an existing task; returns its input id. */
  sendInput(taskId: string, input: unknown, options?: SendOptions): Promise<string>;
  /** The outcome of the turn that took `inputId` (waits if it is queued or running). */
  turnResult<O = unknown>(taskId: string, inputId: string): Promise<TurnResult<O>>;
  /** The result of the task's latest turn (waits for an open or first turn). */
  latestTurnResult<O = unknown>(taskId: string): Promise<TurnResult<O>>;
  cancel(taskId: string, reason?: string, scope?: 'task' | 'turn'): Promise<void>;
  withdraw(taskId: string, inputId: string, reason?: string): Promise<void>;
  /** Sends a named signal (ends a `ctx.waitFor(name)`, or is buffered until one waits); returns its id. */
  signal(taskId: string, name: string, value?: unknown): Promise<string>;
  describe(taskId: string): Promise<TaskDescription>;
  history(taskId: string): Promise<HistoryEvent[]>;
  /** The task's stream: lifecycle items and live output, in offset order (docs/streaming.md). */
  stream(taskId: string, options?: StreamOptions): AsyncIterable<StreamItem>;
}
