/**
 * The authoring API: a workflow is a name, a kind, a turn handler and a policy.
 * See docs/workflows.md.
 */
import { TurnlogError } from '../errors.js';
import type { ExecutorKind, RetryPolicy, TurnPolicy, WorkflowKind } from '../history/events.js';
import type { ExitForRecovery, Suspension, TurnContext } from './context.js';
import type { Json, NotJson, PayloadMode } from './json.js';

/** What a turn may return: its output, `ctx.suspend(reason, output)`, or `ctx.exitForRecovery()`. */
export type TurnReturn<O> = O | Suspension<O> | ExitForRecovery;
export type TurnHandler<I, O, S, P extends PayloadMode = 'json'> = (ctx: TurnContext<I, S, P>, input: I) => Promise<TurnReturn<O>> | TurnReturn<O>;

/**
 * The compile-time payload check of `defineWorkflow`: with payload mode `json`, the input,
 * output and state types must be JSON data (`Json<T>`). A failing check names what is wrong
 * as a missing property, e.g. "Property 'output type is not JSON …' is missing".
 */
export type PayloadTypesCheck<I, O, S, P extends PayloadMode> = P extends 'custom'
  ? unknown
  : [I] extends [Json<I>]
    ? [O] extends [Json<O>]
      ? [S] extends [Json<S>]
        ? unknown
        : { 'state type is not JSON (docs/workflows.md#payloads-are-json)': NotJson }
      : { 'output type is not JSON (docs/workflows.md#payloads-are-json)': NotJson }
    : { 'input type is not JSON (docs/workflows.md#payloads-are-json)': NotJson };

export interface WorkflowOptions<I, O, S, P extends PayloadMode = 'json'> {
  /** Unique per engine; stored in every task's history, so renaming orphans existing tasks. */
  name: string;
  /** `one-shot` (default): the task completes when its turn ends. `multi-turn`: a conversation. */
  kind?: WorkflowKind;
  turn: TurnHandler<I, O, S, P>;
  /**
   * `json` (default): inputs, outputs, state, step results and checkpoints are JSON data, checked
   * at compile time and refused at run time otherwise. `custom`: no compile-time check; the
   * engine must have a `payloadConverter` (docs/workflows.md#custom-payload-converters).
   */
  payloads?: P;
  /** Initial durable state of a new task (multi-turn); default `undefined`. */
  initialState?: () => S;
  /** Per-turn timeout; the cooperative cancel fires here. Default 1 hour. */
  turnTimeoutMs?: number;
  /** After the timeout, how long the handler may take to wind down before the hard cap. Default 30 s. */
  graceMs?: number;
  /** Re-runs of one turn after engine crashes or exits for recovery. Default 5. */
  maxRecoveries?: number;
  /** Re-runs of one turn after its worker process died. Default 2. */
  maxWorkerCrashes?: number;
  /** Default retry policy of `ctx.step`. Default: 3 attempts, 100 ms doubling to 10 s. */
  retry?: Partial<RetryPolicy>;
  /**
   * Inputs sent while a turn runs are queued (steering). `false` rejects them with
   * TaskConflictError. Default: `{ maxQueued: 9 }` for multi-turn, `false` for one-shot.
   */
  steering?: { maxQueued?: number } | false;
  /** Where turns run. Default: the engine's `defaultExecutor` (itself `inline` by default). */
  executor?: ExecutorKind;
  /**
   * Opt-in compaction (multi-turn): keep the events of the last `keepTurns` ended turns and
   * replace older ones by their folded state, every `keepTurns` turns. Default: off. What is
   * lost: docs/history.md#compaction.
   */
  compaction?: { keepTurns: number };
  /**
   * The code's version, a positive integer you raise on a deploy: recorded on every TurnStarted
   * (`workflowVersion`), so a history says which code ran each attempt (docs/versioning.md).
   */
  version?: number;
  /**
   * State migration (needs `version`): when a turn starts on a state shaped by an older version
   * (`fromVersion`; 0 for code without a version), the engine calls this once, in its own
   * process, records the result (`StateMigrated`) and runs the turn on it; replay never calls it
   * again. A throw fails the turn (TURNLOG_STATE_MIGRATION_FAILED) and keeps the stored state.
   * docs/versioning.md#state-migrations.
   */
  migrateState?: (state: unknown, fromVersion: number) => S | Promise<S>;
}

/** A defined workflow. Pass it to `Engine.open({ workflows })` and `engine.start()`. */
export interface Workflow<I = unknown, O = unknown, S = unknown, P extends PayloadMode = 'json'> {
  readonly name: string;
  readonly kind: WorkflowKind;
  readonly turn: TurnHandler<I, O, S, P>;
  readonly payloads: P;
  readonly initialState: (() => S) | undefined;
  readonly steerable: boolean;
  /** Compaction, when the workflow opts in (undefined: off). */
  readonly compaction: { readonly keepTurns: number } | undefined;
  /** `executor` is undefined when the workflow leaves it to the engine default. */
  readonly policy: Omit<TurnPolicy, 'executor'> & { executor: ExecutorKind | undefined };
  /** `WorkflowOptions.version`, when set. */
  readonly version?: number;
  /** `WorkflowOptions.migrateState`, when set. */
  readonly migrateState?: (state: unknown, fromVersion: number) => S | Promise<S>;
  /** Phantom fields for type inference only. */
  readonly __types?: { input: I; output: O; state: S };
}

export const DEFAULT_RETRY: RetryPolicy = {
  maxAttempts: 3,
  initialIntervalMs: 100,
  backoffCoefficient: 2,
  maxIntervalMs: 10_000,
  nonRetryableTypes: [],
};

const MAX_TIMEOUT_MS = 7 * 24 * 3600_000;

/**
 * Defines a workflow.
 * @example
 * const echo = defineWorkflow({
 *   name: 'echo',
 *   kind: 'multi-turn',
 *   turn: async (ctx, text: string) => ctx.step('shout', () => text.toUpperCase()),
 * });
 */
export function defineWorkflow<I = unknown, O = unknown, S = unknown, P extends PayloadMode = 'json'>(
  options: WorkflowOptions<I, O, S, P> & PayloadTypesCheck<NoInfer<I>, NoInfer<O>, NoInfer<S>, NoInfer<P>>,
): Workflow<I, O, S, P> {
  const name = options.name;
  if (typeof name !== 'string' || !/^[A-Za-z0-9_.:/-]{1,200}$/.test(name)) {
    throw invalid(String(name), 'name must be 1–200 characters of letters, digits and _ . : / -');
  }
  if (typeof options.turn !== 'function') throw invalid(name, '`turn` must be a function (ctx, input) => output');
  if (options.initialState !== undefined && typeof options.initialState !== 'function') {
    throw invalid(name, '`initialState` must be a function () => state (a fresh state for each new task)');
  }
  const kind = options.kind ?? 'one-shot';
  if (kind !== 'one-shot' && kind !== 'multi-turn') throw invalid(name, `kind must be 'one-shot' or 'multi-turn', got ${String(kind)}`);
  const turnTimeoutMs = options.turnTimeoutMs ?? 3600_000;
  const graceMs = options.graceMs ?? 30_000;
  checkRange(name, 'turnTimeoutMs', turnTimeoutMs, 1, MAX_TIMEOUT_MS);
  checkRange(name, 'graceMs', graceMs, 0, MAX_TIMEOUT_MS);
  const maxRecoveries = options.maxRecoveries ?? 5;
  const maxWorkerCrashes = options.maxWorkerCrashes ?? 2;
  checkRange(name, 'maxRecoveries', maxRecoveries, 0, 1000, true);
  checkRange(name, 'maxWorkerCrashes', maxWorkerCrashes, 0, 1000, true);
  const steering = options.steering ?? (kind === 'multi-turn' ? {} : false);
  const steeringMaxQueued = steering === false ? 0 : (steering.maxQueued ?? 9);
  checkRange(name, 'steering.maxQueued', steeringMaxQueued, 0, 10_000, true);
  const stepRetry = { ...DEFAULT_RETRY, ...options.retry };
  checkRange(name, 'retry.maxAttempts', stepRetry.maxAttempts, 1, 1000, true);
  if (stepRetry.jitter !== undefined) checkRange(name, 'retry.jitter', stepRetry.jitter, 0, 1);
  if (!isStringList(stepRetry.nonRetryableTypes)) {
    throw invalid(name, `retry.nonRetryableTypes must be an array of error type names (e.g. ['RateLimitError']), got ${String(stepRetry.nonRetryableTypes)}`);
  }
  const payloads = (options.payloads ?? 'json') as P;
  if (payloads !== 'json' && payloads !== 'custom') throw invalid(name, `payloads must be 'json' or 'custom', got ${String(payloads)}`);
  if (options.executor !== undefined && options.executor !== 'inline' && options.executor !== 'process') {
    throw invalid(name, `executor must be 'inline' or 'process', got ${String(options.executor)}`);
  }
  if (options.version !== undefined && (!Number.isInteger(options.version) || options.version < 1 || options.version > 0xffffffff)) {
    throw invalid(name, `version must be a positive integer, got ${String(options.version)}`);
  }
  if (options.migrateState !== undefined) {
    if (typeof options.migrateState !== 'function') throw invalid(name, '`migrateState` must be a function (state, fromVersion) => state');
    if (options.version === undefined) throw invalid(name, '`migrateState` needs `version`: the hook runs when a state of an older version meets this one');
  }
  const compaction = options.compaction;
  if (compaction !== undefined) {
    if (kind !== 'multi-turn') throw invalid(name, 'compaction is for multi-turn workflows');
    checkRange(name, 'compaction.keepTurns', compaction.keepTurns, 1, 1_000_000);
    if (!Number.isInteger(compaction.keepTurns)) throw invalid(name, `compaction.keepTurns must be an integer, got ${compaction.keepTurns}`);
  }
  return Object.freeze({
    ...(options.version !== undefined ? { version: options.version } : {}),
    ...(options.migrateState !== undefined ? { migrateState: options.migrateState } : {}),
    name,
    kind,
    turn: options.turn,
    payloads,
    initialState: options.initialState,
    steerable: steering !== false,
    compaction: compaction === undefined ? undefined : Object.freeze({ keepTurns: compaction.keepTurns }),
    policy: Object.freeze({
      turnTimeoutMs,
      graceMs,
      maxRecoveries,
      maxWorkerCrashes,
      steeringMaxQueued,
      executor: options.executor,
      stepRetry,
    }),
  });
}

/** The policy recorded for a task: the workflow's, with the executor resolved. */
export function resolvePolicy(wf: Workflow<any, any, any, any>, defaultExecutor: ExecutorKind): TurnPolicy {
  return { ...wf.policy, executor: wf.policy.executor ?? defaultExecutor, stepRetry: { ...wf.policy.stepRetry } };
}

function checkRange(wf: string, field: string, v: number, min: number, max: number, integer = false): void {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max || (integer && !Number.isInteger(v))) {
    throw invalid(wf, `${field} must be ${integer ? 'an integer' : 'a number'} from ${min} to ${max}, got ${String(v)}`);
  }
}

/** An array of strings: `nonRetryableTypes` is matched by type name, never by substring. */
export function isStringList(v: unknown): v is string[] {
  return Array.isArray(v) && v.every((t) => typeof t === 'string');
}

function invalid(wf: string, detail: string): TurnlogError {
  return new TurnlogError('TURNLOG_WORKFLOW_INVALID', `Workflow ${wf}: ${detail}.`);
}
