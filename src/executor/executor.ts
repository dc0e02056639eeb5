/**
 * Where a turn attempt runs. The engine starts an attempt, may cancel it cooperatively,
 * and (process executors only) kill it; the attempt reports exactly one outcome.
 */
import type { ExecutorKind, WorkflowKind } from '../history/events.js';
import type { AttemptOutcome, CancelKind, TurnHost, TurnSpec } from '../attempt/host.js';
import type { Workflow } from '../workflow/define-workflow.js';

export interface AttemptHandle {
  /** Settles exactly once with how the attempt ended; never rejects. */
  readonly outcome: Promise<AttemptOutcome>;
  /** Worker pid, or 0 for inline. */
  readonly pid: number;
  /** Cooperative cancel: sets ctx flags, then aborts ctx.signal. */
  cancel(kind: CancelKind, reason: string): void;
  /** Hard stop. Process executors SIGKILL; the outcome becomes `killed`. Undefined for inline. */
  readonly kill: ((reason: string) => void) | undefined;
  /** Stops the attempt from recording anything more (inline zombies after the hard cap). */
  fence(detail: string): void;
}

/** A worker set aside for one attempt (see {@link Executor.reserve}). */
export interface Reservation {
  /** The worker's pid, or 0 when the attempt must wait for a free worker. */
  readonly pid: number;
  /** Gives the worker back (the attempt will not start); a no-op once used or released. */
  release(): void;
}

export interface Executor {
  readonly kind: ExecutorKind;
  /**
   * Optional: takes a worker for the next attempt of `taskId` before the engine writes its
   * `TurnStarted`, so the event can name the worker's pid. The engine passes the reservation to
   * `start()`, or releases it when the turn start could not be written.
   */
  reserve?(taskId: string, kind: WorkflowKind): Reservation;
  start(spec: TurnSpec, host: TurnHost, reservation?: Reservation): Promise<AttemptHandle>;
  /**
   * Optional set-up check, run by engine activation before the store opens: throws a
   * TurnlogError when this executor cannot run `workflows` (those of the engine it will run).
   */
  check?(workflows: readonly Workflow<any, any, any>[]): Promise<void>;
  /**
   * Stops idle workers and releases resources. Running attempts are the engine's to end first.
   * Restartable: a later `start()` starts again (engines deactivate and re-activate around
   * memory snapshots and keep their executors).
   */
  close(): Promise<void>;
  /** Optional, for metrics: the live worker processes (`turnlog.worker.pool.size`). */
  readonly workerCount?: number;
}
