// turnlog public API. Named exports, grouped by area. Nothing here loads LevelDB's native module
// at import time (startup snapshots need that): the Level store is loaded on first activation.

// authoring
export { defineWorkflow, DEFAULT_RETRY } from './workflow/define-workflow.js';
export type { Workflow, WorkflowOptions, TurnHandler, PayloadTypesCheck } from './workflow/define-workflow.js';
export type { TurnContext, StepFn, StepOptions, Suspension, ExitForRecovery, CancelKind, StartChildOptions, ChildHandle, WaitOptions, WaitResult } from './workflow/context.js';
export type { Json, JsonValue, NotJson, PayloadMode, Payloadable } from './workflow/json.js';
export type { WorkflowSource } from './workflow/workflow-source.js';

// engine and client
export { Engine, isCaptureMode } from './runtime/engine.js';
export type { EngineOptions, StartOptions, SendOptions, ActivateOptions, TaskDescription } from './runtime/engine.js';
export type { FlowLimit } from './runtime/limits.js';
export type { ScheduleSpec, ScheduleInfo } from './runtime/schedules.js';
export { TaskHandle } from './client/task-handle.js';
export type { TurnResult, TaskClient } from './client/task-client.js';
export type { StreamItem, DurableStreamItem, LiveStreamItem, StreamOptions } from './stream/items.js';
export { systemClock, ManualClock } from './runtime/clock.js';
export type { Clock, Timer, TimerOptions } from './runtime/clock.js';
export { consoleLogger, jsonLogger, silentLogger, type LogFormat } from './logger.js';
export { SnapshotLifecycle, SESSION_ENV } from './runtime/lifecycle.js';
export type { SnapshotLifecycleOptions, AfterRestoreRequest, AfterRestoreResult, ActivationPhase } from './runtime/lifecycle.js';
export type { Logger } from './logger.js';
export type { EngineObserver, EventsAppendedEvent, AttemptStartedEvent, AttemptEndedEvent, OutputEvent, AttemptOutcome } from './runtime/observe.js';

// executors
export type { Executor, AttemptHandle } from './executor/executor.js';
export { InlineExecutor } from './executor/inline-executor.js';
export { ProcessExecutor } from './executor/process-executor.js';
export type { ProcessExecutorOptions } from './executor/process-executor.js';

// errors
export * from './errors.js';

// history model
export * from './history/events.js';
export type { PayloadCodec, PayloadConverter, PayloadLimits } from './history/payload.js';
export { DefaultPayloadConverter, defaultPayloadConverter, DEFAULT_PAYLOAD_LIMITS, MAX_PAYLOAD_BYTES, payloadSize } from './history/payload.js';
export { errorToFailure, failureToError, RecordedFailure } from './history/failure.js';
export { ENCODED_FAILURE_MESSAGE } from './history/payload-map.js';
export type { TaskState, OpenTurn, QueuedInput, RecordedCall, TurnRecord } from './history/state.js';
export { encodeEvent, decodeEvent, eventToJSON, eventFromJSON } from './history/codec.js';

// store
export type * from './store/history-store.js';
export { MemoryHistoryStore } from './store/memory-store.js';
export type { LevelHistoryStore, LevelHistoryStoreOptions } from './store/level-store.js';
// PostgreSQL: `pg` is an optional peer dependency, loaded on open(), never at import.
export { createPostgresStore, PostgresHistoryStore } from './store/postgres-store.js';
export type { PostgresStoreOptions, PgPoolLike, PgClientLike } from './store/postgres-store.js';
export { SCHEMA_VERSION as POSTGRES_SCHEMA_VERSION } from './store/postgres-migrations.js';
/** Creates (does not open) the default LevelDB store; loads the native module on first call. */
export async function createLevelStore(
  location: string,
  options?: import('./store/level-store.js').LevelHistoryStoreOptions,
): Promise<import('./store/level-store.js').LevelHistoryStore> {
  const { LevelHistoryStore } = await import('./store/level-store.js');
  return new LevelHistoryStore(location, options);
}

/**
 * Opens a store as the engine would: a `postgres://…[?schema=name]` URL is a PostgreSQL store,
 * a directory a LevelDB store (created only when missing or empty, docs/storage.md), and a
 * store object is opened as is. Loads LevelDB on the call, never at import.
 * @example const store = await openStore('.turnlog'); // read it while no engine holds it
 */
export async function openStore(
  pathOrStore: string | import('./store/history-store.js').HistoryStore,
  options?: import('./store/level-store.js').LevelHistoryStoreOptions,
): Promise<import('./store/history-store.js').HistoryStore> {
  const store = await import('./store/index.js');
  return store.openStore(pathOrStore, options);
}

// replay
export { fold, decide, explainDecision, withFullStates } from './replay/index.js';
export { applyStateDelta, diffState, turnSources, STATE_DELTA_FORMAT } from './history/state-delta.js';
export type { Decision, DecisionRule } from './replay/decision.js';
