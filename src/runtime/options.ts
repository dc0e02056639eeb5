/**
 * Engine options: what `Engine.open` takes, its defaults and its validation. No I/O here.
 */
import type { ExecutorKind } from '../history/events.js';
import { DEFAULT_PAYLOAD_LIMITS, MAX_PAYLOAD_BYTES, type PayloadCodec, type PayloadConverter, type PayloadLimits } from '../history/payload.js';
import type { CodecChain } from '../history/payload-map.js';
import { payloadPipeline } from '../history/pipeline.js';
import { illFormedText } from '../history/well-formed.js';
import { invalidArgument } from '../errors.js';
import type { Executor } from '../executor/executor.js';
import type { HistoryStore } from '../store/history-store.js';
import type { Workflow } from '../workflow/define-workflow.js';
import { isWorkflow, workflowList, type WorkflowSource } from '../workflow/workflow-source.js';
import { defaultLogger, type LogFormat, type Logger } from '../logger.js';
import { systemClock, type Clock } from './clock.js';
import type { EngineObserver } from './observe.js';
import { resolveFlowLimits, type FlowLimit, type ResolvedLimit } from './limits.js';

export interface EngineOptions {
  /**
   * A directory for the default LevelDB store, a `postgres://…[?schema=name]` URL (a PostgreSQL
   * store the engine opens and closes), or any HistoryStore (e.g. `createPostgresStore(…)`,
   * which the engine opens but, being yours, does not close). Default `.turnlog`.
   */
  store?: string | HistoryStore;
  /**
   * The workflows this engine runs: a list, or a module namespace (`import * as workflows`)
   * whose exports include workflows (other exports are ignored).
   */
  workflows: WorkflowSource;
  /** Stable identity of this deployment (survives restarts). Default `<hostname>|turnlog`. */
  owner?: string;
  /** This process's identity. Default `engine-<pid>-<random>`. */
  instance?: string;
  /** Lease duration while a turn runs; renewed every half. Default 60 s. */
  leaseMs?: number;
  /** Periodic recovery scan. Default 30 s; 0 disables (recovery still runs at open). */
  scanIntervalMs?: number;
  /** How long shutdown waits for running turns before leaving them to recovery. Default 25 s. */
  shutdownGraceMs?: number;
  clock?: Clock;
  /**
   * Randomness for retry jitter (`RetryPolicy.jitter`) of inline turns: a function returning a
   * number in [0, 1). Default `Math.random`; tests pass `seededRandom(seed)` from turnlog/testing.
   */
  random?: () => number;
  /** Codecs (encryption, compression) applied to every payload at the store boundary. */
  payloadCodecs?: readonly PayloadCodec[];
  /**
   * Converts values to payloads and back. Default: the JSON converter, which refuses values JSON
   * would change. Workflows defined with `payloads: 'custom'` need one; process workers use the
   * `payloadConverter` export of the workflows module (docs/workflows.md#custom-payload-converters).
   */
  payloadConverter?: PayloadConverter;
  /**
   * Payload size limits in bytes, checked before anything is appended or sent to a worker.
   * Default 4 MiB each; at most 16 MiB each. See docs/workflows.md#payload-limits.
   */
  limits?: Partial<PayloadLimits>;
  /**
   * With payload codecs: store failure messages and stacks as an encoded payload (Temporal's
   * `encoded_attributes`), the message reading `Encoded failure`. Default true; false keeps
   * them readable without the codec (they then bypass it, encryption included).
   */
  encodeFailureAttributes?: boolean;
  /** Executor for workflows that do not name one. Default `inline`. */
  defaultExecutor?: ExecutorKind;
  /**
   * Live inspection (docs/cli.md#live-inspection): on a LevelDB store, answer the CLI's reading
   * commands and operator actions over `<store>/turnlog.sock` (mode 0600) while the engine holds
   * the store. Default true; false serves no socket (the CLI then exits 4 on the held store).
   */
  inspect?: boolean;
  /** Executors by kind; `inline` is built in. */
  executors?: Partial<Record<ExecutorKind, Executor>>;
  /**
   * Write a folded-state snapshot every N events so recovery reads only the tail; every N / 4
   * once the task's last snapshot is known to be at most 4 KiB (a shorter tail for a few bytes). Default 1000.
   */
  snapshotEvery?: number;
  /**
   * Where the engine logs. Default `consoleLogger` (warn and error to stderr). Every turn outcome
   * other than success is logged once with taskId, turn, attempt and code (docs/workflows.md#logging).
   */
  logger?: Logger;
  /**
   * The default logger's format when no `logger` is given: `'json'` writes one JSON object per
   * line to stderr, info and above (docs/observability.md#logs). Default `$TURNLOG_LOG`, else `'text'`.
   */
  logFormat?: LogFormat;
  /** Idle tasks kept in memory. Default 10,000. */
  maxCachedTasks?: number;
  /**
   * At most this many turns run in this engine at once (a positive integer). A turn due beyond
   * it waits, its input durably queued, until a running turn ends here, or another engine on a
   * shared store takes it (docs/scale-out.md#cap). Default: no cap.
   */
  maxRunningTurns?: number;
  /**
   * Retention: delete a completed task's history once its last update is this old (checked on
   * every recovery scan). Default: keep histories forever.
   */
  retentionMs?: number;
  /**
   * Tasks recovered at once: each is loaded and decided under its own lock while up to this many
   * others are, so their appends share group commits. Default 64 (docs/recovery.md).
   */
  recoveryConcurrency?: number;
  /**
   * Capture mode for memory snapshots: register workflows, open nothing. Default:
   * `TURNLOG_SNAPSHOT_CAPTURE=true` in the environment. See docs/snapshots.md.
   */
  capture?: boolean;
  /**
   * Listeners on appends, attempt starts and ends, and non-durable output; more can be added
   * with `engine.observe()`. A throwing listener is logged and ignored (docs/architecture.md).
   */
  observers?: readonly EngineObserver[];
  /**
   * Live stream items (chunks, steps starting) kept per task for readers that fall behind or
   * reconnect; older ones are dropped and such a reader gets a `gap` item. Default 1000.
   */
  streamBufferItems?: number;
  /**
   * Named flow limits for steps that call rate-limited services: `ctx.step(name, fn, { limit })`
   * takes a slot (`concurrency`) and a token (`perSecond`, `burst`) first, shared by every task of
   * this engine, or of every engine on a PostgreSQL store (docs/time.md#flow-limits).
   * @example Engine.open({ workflows, flowLimits: { openai: { concurrency: 8, perSecond: 5 } } })
   */
  flowLimits?: Readonly<Record<string, FlowLimit>>;
}

/**
 * `Engine.openForOperator` options: the store and how to read its payloads, no workflows. The
 * engine appends operator actions (cancel, withdraw, resend, resume) and runs nothing itself.
 */
export type OperatorOptions = Pick<
  EngineOptions,
  'store' | 'owner' | 'instance' | 'clock' | 'payloadCodecs' | 'payloadConverter' | 'encodeFailureAttributes' | 'logger' | 'logFormat' | 'observers'
>;

export interface ActivateOptions {
  /** Deployment identity for this activation (e.g. bound to a restored session). */
  owner?: string;
  /** Instance identity; default a new one per activation. */
  instance?: string;
  /** Called before each activation phase; a throw fails activation there (fault injection, tracing). */
  onPhase?: (phase: 'open' | 'recovery' | 'scanner') => void | Promise<void>;
}

/** Capture mode: an explicit option wins; else `TURNLOG_SNAPSHOT_CAPTURE=true`. */
export function isCaptureMode(options: { capture?: boolean }, env: NodeJS.ProcessEnv = process.env): boolean {
  if (options.capture !== undefined) return options.capture;
  return (env['TURNLOG_SNAPSHOT_CAPTURE'] ?? '').toLowerCase() === 'true';
}

export function resolveLimits(given: Partial<PayloadLimits> | undefined): Readonly<PayloadLimits> {
  const limits = { ...DEFAULT_PAYLOAD_LIMITS, ...given };
  for (const key of Object.keys(DEFAULT_PAYLOAD_LIMITS) as (keyof PayloadLimits)[]) {
    const v = limits[key];
    if (!Number.isInteger(v) || v < 1 || v > MAX_PAYLOAD_BYTES) {
      throw invalidArgument(`limits.${key} must be an integer from 1 to ${MAX_PAYLOAD_BYTES} (16 MiB), got ${String(v)}. Keep larger data outside the task and pass a reference.`);
    }
  }
  for (const key of Object.keys(given ?? {})) {
    if (!(key in DEFAULT_PAYLOAD_LIMITS)) throw invalidArgument(`limits.${key} is not a payload limit; use ${Object.keys(DEFAULT_PAYLOAD_LIMITS).join(', ')}.`);
  }
  return Object.freeze(limits);
}

function positiveInteger(name: string, v: number): number {
  if (!Number.isInteger(v) || v < 1) throw invalidArgument(`${name} must be a positive integer, got ${String(v)}.`);
  return v;
}

function nonNegative(name: string, v: number, zero: string): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw invalidArgument(`${name} must be a finite number of milliseconds >= 0 (${zero}), got ${String(v)}.`);
  return v;
}

export function positive(name: string, v: number): number {
  if (typeof v !== 'number' || !(v > 0)) throw invalidArgument(`${name} must be a positive number of milliseconds, got ${String(v)}.`);
  return v;
}

function runningCap(v: number | undefined): number {
  if (v === undefined) return Infinity;
  if (!Number.isInteger(v) || v < 1) throw invalidArgument(`maxRunningTurns must be a positive integer, got ${String(v)}. Leave it out for no cap.`);
  return v;
}

export function checkId(what: string, id: string): void {
  if (typeof id !== 'string' || id.length === 0 || id.length > 200 || /[\u0000-\u001f]/.test(id)) {
    throw invalidArgument(`${what} must be a non-empty string of at most 200 printable characters, got ${JSON.stringify(id)}.`);
  }
  // Before anything is written: a lone surrogate has no UTF-8 form, so the stored id would differ.
  if (!id.isWellFormed()) throw invalidArgument(`${illFormedText(what, id)}.`);
}

/** Engine options after validation and defaults (see {@link resolveOptions}). */
export interface EngineSettings {
  readonly workflows: Map<string, Workflow<any, any, any, any>>;
  readonly converter: PayloadConverter;
  readonly storeSpec: string | HistoryStore;
  readonly ownerOption: string | undefined;
  readonly instanceOption: string | undefined;
  readonly clock: Clock;
  readonly random: () => number;
  readonly codec: CodecChain | undefined;
  /** Payload codecs encode failure text (codecs present, encodeFailureAttributes not false). */
  readonly encodesFailureText: boolean;
  readonly leaseMs: number;
  readonly scanIntervalMs: number;
  readonly shutdownGraceMs: number;
  readonly snapshotEvery: number;
  readonly maxCached: number;
  readonly maxRunningTurns: number;
  readonly retentionMs: number | undefined;
  readonly recoveryConcurrency: number;
  readonly log: Logger;
  readonly defaultExecutor: ExecutorKind;
  readonly inspect: boolean;
  readonly limits: Readonly<PayloadLimits>;
  readonly observerOption: readonly EngineObserver[];
  readonly streamBufferItems: number;
  readonly flowLimits: ReadonlyMap<string, ResolvedLimit>;
  /** `Engine.openForOperator`: appends actions under the task's current generation, claims and runs nothing. */
  readonly operatorOnly: boolean;
}

/**
 * Validates `Engine.open` options and fills in every default, in one place. Throws
 * TURNLOG_INVALID_ARGUMENT (workflows, converter, durations, limits) before anything is opened.
 */
export function resolveOptions(options: EngineOptions, operatorOnly = false): EngineSettings {
  if (!options || typeof options.workflows !== 'object' || options.workflows === null) {
    throw invalidArgument('Engine.open needs { workflows }: a list of the workflows this engine runs, or their module (import * as workflows).');
  }
  const source = options.workflows;
  if (Array.isArray(source)) {
    source.forEach((wf: unknown, i) => {
      if (!isWorkflow(wf)) throw invalidArgument(`workflows[${i}] is not a workflow (got ${wf === null ? 'null' : typeof wf}). Pass values made by defineWorkflow().`);
    });
  }
  const list = workflowList(source);
  if (!Array.isArray(source) && list.length === 0) {
    throw invalidArgument(`The workflows module passed to Engine.open exports no workflows (exports: ${Object.keys(source).join(', ') || 'none'}). Export them by name or as a default array.`);
  }
  const workflows = new Map<string, Workflow<any, any, any, any>>();
  for (const wf of list) {
    if (workflows.has(wf.name)) throw invalidArgument(`Workflow ${wf.name} is registered twice; names must be unique.`);
    workflows.set(wf.name, wf);
  }
  // One pipeline (history/pipeline.ts): the converter and codecs every path of this engine uses.
  const pipeline = payloadPipeline({ converter: options.payloadConverter, codecs: options.payloadCodecs, encodeFailureAttributes: options.encodeFailureAttributes });
  const converter = pipeline.converter;
  for (const wf of list) {
    if (wf.payloads === 'custom' && !options.payloadConverter) {
      throw invalidArgument(`Workflow ${wf.name} is defined with payloads: 'custom', but the engine has no payloadConverter. Pass Engine.open({ payloadConverter }), or drop payloads: 'custom' to use JSON.`);
    }
  }
  return {
    workflows,
    converter,
    storeSpec: options.store ?? '.turnlog',
    ownerOption: options.owner,
    instanceOption: options.instance,
    clock: options.clock ?? systemClock,
    random: resolveRandom(options.random),
    codec: pipeline.chain,
    encodesFailureText: pipeline.chain !== undefined && options.encodeFailureAttributes !== false,
    leaseMs: positive('leaseMs', options.leaseMs ?? 60_000),
    scanIntervalMs: nonNegative('scanIntervalMs', options.scanIntervalMs ?? 30_000, '0 turns the periodic scan off'),
    shutdownGraceMs: nonNegative('shutdownGraceMs', options.shutdownGraceMs ?? 25_000, '0 leaves running turns to recovery at once'),
    snapshotEvery: positiveInteger('snapshotEvery', options.snapshotEvery ?? 1000),
    maxCached: positiveInteger('maxCachedTasks', options.maxCachedTasks ?? 10_000),
    maxRunningTurns: runningCap(options.maxRunningTurns),
    retentionMs: options.retentionMs === undefined ? undefined : positive('retentionMs', options.retentionMs),
    recoveryConcurrency: positiveInteger('recoveryConcurrency', options.recoveryConcurrency ?? 64),
    log: options.logger ?? defaultLogger(options.logFormat),
    defaultExecutor: options.defaultExecutor ?? 'inline',
    inspect: options.inspect ?? true,
    limits: resolveLimits(options.limits),
    observerOption: resolveObservers(options.observers),
    streamBufferItems: positiveInteger('streamBufferItems', options.streamBufferItems ?? 1000),
    flowLimits: resolveFlowLimits(options.flowLimits),
    operatorOnly,
  };
}


function resolveRandom(given: (() => number) | undefined): () => number {
  if (given === undefined) return Math.random;
  if (typeof given !== 'function') throw invalidArgument(`random must be a function returning a number in [0, 1), got ${typeof given}.`);
  return given;
}

function resolveObservers(given: readonly EngineObserver[] | undefined): readonly EngineObserver[] {
  if (given === undefined) return [];
  if (!Array.isArray(given) || given.some((o) => typeof o !== 'object' || o === null)) {
    throw invalidArgument('observers must be a list of objects with optional eventsAppended, attemptStarted, attemptEnded and output methods.');
  }
  return given;
}

