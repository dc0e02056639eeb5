/**
 * Every error turnlog throws is a {@link TurnlogError} with a stable `code`.
 * Codes are strings (Level-style), never reused, and each has an anchor in docs/errors.md.
 * Messages name the ids involved first, then the fix.
 */

export type ErrorCode =
  // history and codec
  | 'TURNLOG_HISTORY_CORRUPT'
  | 'TURNLOG_HISTORY_FORMAT'
  | 'TURNLOG_HISTORY_INVARIANT'
  | 'TURNLOG_PAYLOAD_ENCODING'
  | 'TURNLOG_PAYLOAD_TOO_LARGE'
  | 'TURNLOG_INVALID_ARGUMENT'
  // store
  | 'TURNLOG_STORE_LOCKED'
  | 'TURNLOG_STORE_CLOSED'
  | 'TURNLOG_STORE_OPEN'
  | 'TURNLOG_STORE_UNAVAILABLE'
  | 'TURNLOG_STORE_NOT_FOUND'
  | 'TURNLOG_DRIVER_MISSING'
  | 'TURNLOG_CONCURRENCY'
  | 'TURNLOG_STALE_GENERATION'
  | 'TURNLOG_LEASE_HELD'
  | 'TURNLOG_TASK_NOT_FOUND'
  // engine and tasks
  | 'TURNLOG_TASK_CONFLICT'
  | 'TURNLOG_LAST_INPUT_ID_PRECONDITION'
  | 'TURNLOG_STEERING_QUEUE_FULL'
  | 'TURNLOG_WORKFLOW_NOT_FOUND'
  | 'TURNLOG_WORKFLOW_INVALID'
  | 'TURNLOG_NON_DETERMINISM'
  | 'TURNLOG_REPLAY_STALLED'
  | 'TURNLOG_REPLAY_TIMEOUT'
  | 'TURNLOG_TURN_FAILED'
  | 'TURNLOG_TURN_CANCELLED'
  | 'TURNLOG_TURN_TIMED_OUT'
  | 'TURNLOG_STEP_TIMED_OUT'
  | 'TURNLOG_TURN_DEFERRED'
  | 'TURNLOG_FENCED'
  | 'TURNLOG_EXIT_FOR_RECOVERY_OUTSIDE_SHUTDOWN'
  | 'TURNLOG_ENGINE_CLOSED'
  | 'TURNLOG_INPUT_NOT_FOUND'
  | 'TURNLOG_WRONG_KIND'
  | 'TURNLOG_TURN_NOT_ENDED'
  | 'TURNLOG_STATE_VERSION_NEWER'
  | 'TURNLOG_STATE_MIGRATION_FAILED'
  // child tasks
  | 'TURNLOG_CHILD_FAILED'
  | 'TURNLOG_CHILD_CONFLICT'
  // time: flow limits and schedules
  | 'TURNLOG_LIMIT_UNKNOWN'
  | 'TURNLOG_SCHEDULE_INVALID'
  | 'TURNLOG_SCHEDULE_NOT_FOUND'
  // isolation
  | 'TURNLOG_ISOLATION_BOUNDARY'
  | 'TURNLOG_WORKER_CRASHED'
  | 'TURNLOG_WORKER_PROTOCOL'
  | 'TURNLOG_WORKER_START'
  | 'TURNLOG_WORKFLOWS_MODULE'
  // lifecycle
  | 'TURNLOG_ENGINE_NOT_ACTIVATED'
  | 'TURNLOG_SESSION_MISMATCH'
  | 'TURNLOG_ACTIVATION_FAILED'
  // cli and files
  | 'TURNLOG_HISTORY_FILE'
  // streaming
  | 'TURNLOG_STREAM_OFFSET'
  // live inspection and operator actions
  | 'TURNLOG_INSPECT_SOCKET';

export interface TurnlogErrorOptions {
  cause?: unknown;
}

const TURNLOG_ERROR = Symbol.for('turnlog.error');

/** Base class of every turnlog error. Test with {@link isTurnlogError}, which works across realms. */
export class TurnlogError extends Error {
  override readonly name: string = 'TurnlogError';
  readonly code: ErrorCode;
  readonly [TURNLOG_ERROR] = true;

  constructor(code: ErrorCode, message: string, options: TurnlogErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
  }
}

/** True for any turnlog error, optionally of one code. Unlike `instanceof`, works across realms. */
export function isTurnlogError(err: unknown, code?: ErrorCode): err is TurnlogError {
  return (
    typeof err === 'object' &&
    err !== null &&
    (err as Record<symbol, unknown>)[TURNLOG_ERROR] === true &&
    (code === undefined || (err as TurnlogError).code === code)
  );
}

/**
 * True when stored data cannot be read by this build: undecodable bytes
 * (TURNLOG_HISTORY_CORRUPT), a newer format (TURNLOG_HISTORY_FORMAT) or a history that breaks an
 * invariant (TURNLOG_HISTORY_INVARIANT). The engine isolates a task that gives one of these.
 */
export function isHistoryUnreadable(err: unknown): err is TurnlogError {
  return (
    isTurnlogError(err, 'TURNLOG_HISTORY_CORRUPT') ||
    isTurnlogError(err, 'TURNLOG_HISTORY_FORMAT') ||
    isTurnlogError(err, 'TURNLOG_HISTORY_INVARIANT')
  );
}

/** Stored bytes that cannot be decoded. Nothing is changed; the key names what to inspect. */
export class HistoryCorruptError extends TurnlogError {
  override readonly name = 'HistoryCorruptError';
  constructor(
    readonly key: string,
    detail: string,
    options: TurnlogErrorOptions = {},
  ) {
    super(
      'TURNLOG_HISTORY_CORRUPT',
      `Stored record ${key} cannot be decoded (${detail}). Nothing was changed; export the task with \`turnlog export\` and inspect, or restore the store from a backup.`,
      options,
    );
  }
}

/** A history event of a type or format version this build does not know. */
export class HistoryFormatError extends TurnlogError {
  override readonly name = 'HistoryFormatError';
  constructor(
    readonly taskId: string,
    readonly eventId: number,
    readonly version: number,
    detail: string,
  ) {
    super(
      'TURNLOG_HISTORY_FORMAT',
      `Task ${taskId}, event ${eventId}: ${detail} (history format version ${version}). It was written by a newer turnlog; upgrade turnlog to read it.`,
    );
  }
}

/** A history that breaks an invariant of docs/history.md; it is never silently folded. */
export class HistoryInvariantError extends TurnlogError {
  override readonly name = 'HistoryInvariantError';
  constructor(
    readonly taskId: string,
    readonly eventId: number,
    readonly rule: string,
    detail: string,
  ) {
    super('TURNLOG_HISTORY_INVARIANT', `Task ${taskId}, event ${eventId} breaks invariant "${rule}": ${detail}`);
  }
}

/** `append` was called with an expected last event id that is not the task's current one. */
export class ConcurrencyError extends TurnlogError {
  override readonly name = 'ConcurrencyError';
  constructor(
    readonly taskId: string,
    readonly expected: number,
    readonly actual: number,
  ) {
    super(
      'TURNLOG_CONCURRENCY',
      `Task ${taskId}: append expected last event ${expected} but the history ends at ${actual}; nothing was written. Re-read the history and decide again.`,
    );
  }
}

/** An append or lease write under a generation older than the task's current lease. */
export class StaleGenerationError extends TurnlogError {
  override readonly name = 'StaleGenerationError';
  constructor(
    readonly taskId: string,
    readonly generation: number,
    readonly current: number,
  ) {
    super(
      'TURNLOG_STALE_GENERATION',
      `Task ${taskId}: write under generation ${generation} rejected, the task is at generation ${current} (another instance reclaimed it); nothing was written.`,
    );
  }
}

/** A lease claim on a task whose lease another owner holds and has not expired. */
export class LeaseHeldError extends TurnlogError {
  override readonly name = 'LeaseHeldError';
  constructor(
    readonly taskId: string,
    readonly owner: string,
    readonly instance: string,
    readonly expiresAt: number,
  ) {
    super(
      'TURNLOG_LEASE_HELD',
      `Task ${taskId} is leased by ${owner} (${instance}) until ${new Date(expiresAt).toISOString()}; wait for it to expire or be released.`,
    );
  }
}

/** The store directory is held by another process (LevelDB allows one process per directory). */
export class StoreLockedError extends TurnlogError {
  override readonly name = 'StoreLockedError';
  constructor(
    readonly location: string,
    options: TurnlogErrorOptions = {},
  ) {
    super(
      'TURNLOG_STORE_LOCKED',
      `Store ${location} is locked by another process (LevelDB allows one process per directory). Stop the engine that holds it, or point this process at another directory.`,
      options,
    );
  }
}

/** A determinism violation: a re-executed turn asked for something other than what was recorded. */
export class NonDeterminismError extends TurnlogError {
  override readonly name = 'NonDeterminismError';
  constructor(
    readonly taskId: string,
    readonly turn: number,
    readonly eventId: number,
    readonly expected: string,
    readonly actual: string,
  ) {
    super(
      'TURNLOG_NON_DETERMINISM',
      `Task ${taskId}, turn ${turn}, event ${eventId}: the history recorded ${expected} but the handler did ${actual}. Check that your turn handler calls the same steps in the same order on every attempt (see docs/determinism.md).`,
    );
  }
}

/** Helper for argument validation: code TURNLOG_INVALID_ARGUMENT with the fix in the message. */
export function invalidArgument(message: string): TurnlogError {
  return new TurnlogError('TURNLOG_INVALID_ARGUMENT', message);
}

/** TURNLOG_TASK_NOT_FOUND for `taskId`, with the fix. */
export function taskNotFound(taskId: string): TurnlogError {
  return new TurnlogError('TURNLOG_TASK_NOT_FOUND', `Task ${taskId} does not exist in this store. Check the id, or start it with engine.start().`);
}

/** A task operation that its status forbids (start on a completed task, send to a busy non-steerable one). */
export class TaskConflictError extends TurnlogError {
  override readonly name = 'TaskConflictError';
  constructor(
    readonly taskId: string,
    readonly status: string,
    detail: string,
  ) {
    super('TURNLOG_TASK_CONFLICT', `Task ${taskId} is ${status}: ${detail}`);
  }
}

/** `ifLastInputId` did not match the task's last input id. */
export class LastInputIdPreconditionError extends TurnlogError {
  override readonly name = 'LastInputIdPreconditionError';
  constructor(
    readonly taskId: string,
    readonly expected: string,
    readonly actual: string | undefined,
  ) {
    super(
      'TURNLOG_LAST_INPUT_ID_PRECONDITION',
      `Task ${taskId}: ifLastInputId is ${expected} but the last input is ${actual ?? '(none)'}. Another caller sent an input first; read the task and decide again.`,
    );
  }
}

/**
 * The task's state was shaped by a newer version of the workflow than this code's
 * (docs/versioning.md#state-migrations): this engine neither runs a turn on it nor queues input.
 */
export class StateVersionNewerError extends TurnlogError {
  override readonly name = 'StateVersionNewerError';
  constructor(
    readonly taskId: string,
    readonly workflow: string,
    readonly stateVersion: number,
    readonly codeVersion: number,
  ) {
    super(
      'TURNLOG_STATE_VERSION_NEWER',
      `Task ${taskId}: its state is of workflow ${workflow} version ${stateVersion}, newer than this code's version ${codeVersion}; nothing was written. Deploy the newer code (version ${stateVersion} or later) to the engines that run this task.`,
    );
  }
}

/** A steering input past the workflow's queue cap. */
export class SteeringQueueFullError extends TurnlogError {
  override readonly name = 'SteeringQueueFullError';
  constructor(
    readonly taskId: string,
    readonly cap: number,
  ) {
    super(
      'TURNLOG_STEERING_QUEUE_FULL',
      `Task ${taskId} already has ${cap} queued inputs (steering.maxQueued). Wait for a turn to finish, withdraw an input, or raise the cap.`,
    );
  }
}

/** A turn ended with an outcome other than success; `result()` of a one-shot task throws it. */
export class TurnOutcomeError extends TurnlogError {
  override readonly name = 'TurnOutcomeError';
  constructor(
    code: 'TURNLOG_TURN_FAILED' | 'TURNLOG_TURN_CANCELLED' | 'TURNLOG_TURN_TIMED_OUT' | 'TURNLOG_TURN_DEFERRED',
    readonly taskId: string,
    readonly turn: number,
    message: string,
    options: TurnlogErrorOptions = {},
  ) {
    super(code, `Task ${taskId}, turn ${turn}: ${message}`, options);
  }
}

/**
 * A child task (ctx.startChild) ended failed, cancelled or timed out; `child.result()` and
 * `ctx.awaitChild()` throw it in the parent. `cause` is the child's failure, when it has one.
 */
export class ChildFailedError extends TurnlogError {
  override readonly name = 'ChildFailedError';
  constructor(
    readonly parentId: string,
    readonly childId: string,
    readonly status: 'failed' | 'cancelled' | 'timed_out',
    detail: string,
    options: TurnlogErrorOptions = {},
  ) {
    super(
      'TURNLOG_CHILD_FAILED',
      `Task ${parentId}: child task ${childId} ${status.replace('_', ' ')}${detail ? `: ${detail}` : ''}. Catch ChildFailedError around child.result() to carry on (err.status, err.cause), or let it fail this turn.`,
      options,
    );
  }
}

/** A child id (ctx.startChild's `childId`, or the derived one) already names a task of another parent or workflow. */
export class ChildConflictError extends TurnlogError {
  override readonly name = 'ChildConflictError';
  constructor(
    readonly parentId: string,
    readonly childId: string,
    detail: string,
  ) {
    super('TURNLOG_CHILD_CONFLICT', `Task ${parentId}: cannot start child ${childId}: task ${childId} already exists and ${detail}. Pass another childId to ctx.startChild().`);
  }
}

/** A write by a turn attempt that no longer owns its task (finalized, reclaimed, or engine shut down). */
export class FencedError extends TurnlogError {
  override readonly name = 'FencedError';
  constructor(
    readonly taskId: string,
    readonly turn: number,
    readonly attempt: number,
    detail: string,
    options: TurnlogErrorOptions = {},
  ) {
    super(
      'TURNLOG_FENCED',
      `Task ${taskId}, turn ${turn} attempt ${attempt} was fenced off (${detail}); nothing it does now is recorded. Stop work when ctx.signal aborts.`,
      options,
    );
  }
}

/** An engine or client API called from inside an isolated worker process. */
export class IsolationBoundaryError extends TurnlogError {
  override readonly name = 'IsolationBoundaryError';
  constructor(api: string) {
    super(
      'TURNLOG_ISOLATION_BOUNDARY',
      `${api} cannot be called inside an isolated worker: only the engine process writes the store. Use ctx (step, checkpoint, takeInputs, suspend) inside a turn, or return a value and act on it from the engine side.`,
    );
  }
}

/**
 * Throw from a step to fail it without retries (Restate's TerminalError).
 * @example throw new TerminalError('card declined', { type: 'CardDeclined' })
 */
export class TerminalError extends Error {
  override readonly name: string = 'TerminalError';
  readonly nonRetryable = true;
  readonly type: string;
  constructor(message: string, options: { type?: string; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.type = options.type ?? 'TerminalError';
  }
}

const RETRY_AFTER = Symbol.for('turnlog.retry-after');

/**
 * True for a {@link RetryAfterError} of any copy of turnlog: a worker's runtime and the workflows
 * module it imports may each hold their own (a bundled worker, two installs), so no `instanceof`.
 */
export function isRetryAfterError(err: unknown): err is RetryAfterError {
  return typeof err === 'object' && err !== null && (err as Record<symbol, unknown>)[RETRY_AFTER] === true && typeof (err as RetryAfterError).retryAfterMs === 'number';
}

/**
 * Throw from a step to retry it after the delay a server suggested (HTTP 429 `Retry-After`)
 * instead of the policy's backoff; it still counts against `maxAttempts`.
 * @example if (res.status === 429) throw new RetryAfterError(Number(res.headers.get('retry-after')) * 1000, 'rate limited');
 */
export class RetryAfterError extends Error {
  override readonly name: string = 'RetryAfterError';
  readonly retryAfterMs: number;
  readonly [RETRY_AFTER] = true;
  constructor(retryAfterMs: number, message = `retry after ${retryAfterMs} ms`, options: { cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.retryAfterMs = Number.isFinite(retryAfterMs) && retryAfterMs > 0 ? retryAfterMs : 0;
  }
}

/** `afterRestore` named a session other than the one this process was bound to (a failed restore binds it too). */
export class SessionMismatchError extends TurnlogError {
  override readonly name = 'SessionMismatchError';
  constructor(
    readonly sessionId: string,
    readonly requestedSessionId: string,
    readonly restoreId: string,
  ) {
    super(
      'TURNLOG_SESSION_MISMATCH',
      `Restore ${restoreId} asked for session ${requestedSessionId}, but this process is bound to session ${sessionId}; nothing was changed. A restored process serves one session: restore a fresh snapshot for another session.`,
    );
  }
}

/**
 * A value the default payload converter refuses (a Map, a Date, a cycle, …): `path` says where
 * inside the value (`$.prices[2].amount`). Never retried: the same value fails the same way.
 */
export class PayloadEncodingError extends TurnlogError {
  override readonly name = 'PayloadEncodingError';
  readonly nonRetryable = true;
  constructor(
    /** Where the offending value sits, from `$` (the whole value). */
    readonly path: string,
    /** What was found there (`a Map`, `a BigInt`). */
    readonly found: string,
    readonly fix: string,
    /** What was being converted (`Task t, turn 1, step "prices" result`); empty when unknown. */
    readonly subject = '',
  ) {
    super('TURNLOG_PAYLOAD_ENCODING', `${subject || 'Value'}: ${path} is ${found}, which has no faithful JSON form; nothing was recorded. ${fix}`);
  }

  /** The same error, naming what was being converted. */
  about(subject: string): PayloadEncodingError {
    return new PayloadEncodingError(this.path, this.found, this.fix, subject);
  }
}

/** Which payload a size limit applies to (`EngineOptions.limits`). */
export type PayloadField = 'input' | 'stepResult' | 'checkpoint' | 'state' | 'output' | 'workerRun' | 'chunk';

/**
 * A payload over its size limit. Thrown to the caller for an input (nothing is written);
 * recorded as a non-retryable step or turn failure when a handler produced it.
 */
export class PayloadTooLargeError extends TurnlogError {
  override readonly name = 'PayloadTooLargeError';
  readonly nonRetryable = true;
  constructor(
    readonly field: PayloadField,
    readonly bytes: number,
    readonly limit: number,
    subject: string,
    fix = `Keep large data outside the task (a file or object store) and pass a reference, or raise EngineOptions.limits.${field}Bytes.`,
  ) {
    super('TURNLOG_PAYLOAD_TOO_LARGE', `${subject}: ${field} is ${bytes} bytes, over the ${limit}-byte limit; nothing was recorded. ${fix}`);
  }
}

/**
 * A replay that cannot reach a verdict: the handler waits for something replay will never
 * deliver (`TURNLOG_REPLAY_STALLED`), or it did not settle within the replay's time limit
 * (`TURNLOG_REPLAY_TIMEOUT`). `eventId` and `lastCall` name the last recorded call the handler got.
 */
export class ReplayStalledError extends TurnlogError {
  override readonly name = 'ReplayStalledError';
  constructor(
    code: 'TURNLOG_REPLAY_STALLED' | 'TURNLOG_REPLAY_TIMEOUT',
    readonly taskId: string,
    readonly turn: number,
    /** The last recorded call handed back, or the turn's start when none was. */
    readonly eventId: number,
    readonly lastCall: string,
    detail: string,
  ) {
    super(code, `Task ${taskId}, turn ${turn}: the replay ${detail} after ${lastCall} (event ${eventId}). ${code === 'TURNLOG_REPLAY_STALLED' ? STALLED_FIX : TIMEOUT_FIX}`);
  }
}
const STALLED_FIX =
  'The handler awaits something that is neither a ctx call nor work it started itself (a promise nothing will resolve, or ctx.signal with no recorded abort). Make it finish or call ctx when the recorded attempt did, or see docs/testing.md#replays-that-cannot-finish.';
const TIMEOUT_FIX =
  "Make the handler finish when it gets its recorded calls, or raise timeoutMs; a handler that blocks the thread needs isolate: 'worker' (docs/testing.md#replays-that-cannot-finish).";
