/**
 * The snapshot-aware lifecycle: an engine that lives in a process captured once (a Node startup
 * snapshot, a Firecracker or CRIU image) and restored many times. Capture opens nothing;
 * `afterRestore()` binds the session and activates; every failure rolls back. See docs/snapshots.md.
 */
import { nanoid } from 'nanoid';
import { SessionMismatchError, TurnlogError, invalidArgument, isTurnlogError } from '../errors.js';
import { isCaptureMode, type ActivateOptions, type Engine } from './engine.js';

export type ActivationPhase = Parameters<NonNullable<ActivateOptions['onPhase']>>[0];

export interface SnapshotLifecycleOptions {
  /** The engine to manage. Omit it when resilience is disabled: the hooks still bind the session and env, nothing opens. */
  engine?: Engine;
  /** Deployment name; the lease owner after a restore is `<name>|session:<sessionId>`. Default `turnlog`. */
  name?: string;
  /** Capture mode at lifespan start; default `TURNLOG_SNAPSHOT_CAPTURE=true` in `env`. */
  capture?: boolean;
  /** The environment that overrides are applied to. Default `process.env`. */
  env?: NodeJS.ProcessEnv;
  /** How long `beforeSnapshot()`, `stop()` and a rebind wait for running turns. Default the engine's shutdown grace. */
  graceMs?: number;
  /** Called before each activation phase (tracing, fault injection); a throw fails the activation there. */
  onPhase?: (phase: ActivationPhase) => void | Promise<void>;
}

export interface AfterRestoreRequest {
  /** The session this restored process serves; fixed once assigned. */
  sessionId: string;
  /** Identifies one restore; a retry or a late duplicate of a completed one is a no-op. */
  restoreId: string;
  /** Environment overrides for this session; keys a previous restore set and this one omits revert to the baseline. */
  env?: Readonly<Record<string, string>>;
  /** Cancels the restore: it is rolled back (env and engine) and may be retried. */
  signal?: AbortSignal;
}

export interface AfterRestoreResult {
  /** `activated`: the engine was (re)activated; `duplicate`: this restore id already completed and the engine is active; `no-engine`: resilience is disabled. */
  outcome: 'activated' | 'duplicate' | 'no-engine';
  sessionId: string;
  restoreId: string;
  owner?: string;
  instance?: string;
}

/** Environment variable set to the session id on every restore (a handler may read it). */
export const SESSION_ENV = 'TURNLOG_SESSION_ID';

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Drives an {@link Engine} through capture, restore and snapshot. Hooks are serialized: one runs at a time.
 * @example
 * const engine = Engine.create({ store: '.turnlog', workflows: [agent] });
 * const lifecycle = new SnapshotLifecycle({ engine, name: 'support' });
 * await lifecycle.start(); // cold start, or nothing in capture mode
 * // ... in the restored process:
 * await lifecycle.afterRestore({ sessionId: 's-1', restoreId: 'r-1' });
 */
export class SnapshotLifecycle {
  readonly #engine: Engine | undefined;
  readonly #name: string;
  readonly #captureOption: boolean | undefined;
  readonly #env: NodeJS.ProcessEnv;
  readonly #graceMs: number | undefined;
  readonly #onPhase: SnapshotLifecycleOptions['onPhase'];
  #chain: Promise<unknown> = Promise.resolve();
  #sessionId: string | undefined;
  /** Restore ids that completed; a duplicate is a no-op only while the engine is active (a later lifespan re-activates). */
  readonly #completed = new Set<string>();
  /** The restore whose activation is live now, if any: tracked apart from `#completed`. */
  #activeRestoreId: string | undefined;
  /** Values of the environment before any override, refreshed by `beforeSnapshot()`. */
  #baseline: Record<string, string | undefined>;
  /** Keys the last successful restore set. */
  #applied = new Set<string>();
  #snapshotted = false;

  constructor(options: SnapshotLifecycleOptions = {}) {
    this.#engine = options.engine;
    this.#name = options.name ?? 'turnlog';
    if (this.#name.length === 0 || this.#name.includes('|')) throw invalidArgument(`SnapshotLifecycle name must be non-empty and without '|', got ${JSON.stringify(this.#name)}.`);
    this.#captureOption = options.capture;
    this.#env = options.env ?? process.env;
    this.#graceMs = options.graceMs;
    this.#onPhase = options.onPhase;
    this.#baseline = { ...this.#env };
  }

  /** True when the lifespan starts in capture mode (the option, else `TURNLOG_SNAPSHOT_CAPTURE=true`). */
  get capture(): boolean {
    return this.#captureOption !== undefined ? this.#captureOption : isCaptureMode({}, this.#env);
  }

  /** The session pinned by the first restore (successful or not). */
  get sessionId(): string | undefined {
    return this.#sessionId;
  }

  /** The restore id whose activation is live, if any. */
  get activeRestoreId(): string | undefined {
    return this.#activeRestoreId;
  }

  /** The engine is active (always false without one). */
  get active(): boolean {
    return this.#engine?.active ?? false;
  }

  /**
   * Lifespan start. Capture mode: nothing (activation waits for `afterRestore()`). Otherwise a cold
   * start: open the store, recover at once, arm the scanner. Without an engine: nothing.
   */
  start(): Promise<'deferred' | 'active' | 'no-engine'> {
    return this.#serial(async () => {
      if (!this.#engine) return 'no-engine';
      if (this.capture) return 'deferred';
      await this.#activate('cold start', undefined, undefined, undefined);
      return 'active';
    });
  }

  /**
   * Quiesces to no open handles (scanner stopped, turns left to recovery, workers and store closed)
   * and refreshes the env baseline. Idempotent until the next restore or activation.
   */
  beforeSnapshot(): Promise<void> {
    return this.#serial(async () => {
      // Idempotent only while nothing is active: after a new lifespan start (or an activation
      // outside the lifecycle) there are open handles again, and they must be quiesced.
      if (this.#snapshotted && !this.active) return;
      await this.#deactivate();
      this.#baseline = { ...this.#env };
      this.#snapshotted = true;
    });
  }

  /**
   * Binds the restored process to its session and activates the engine: env overrides, then open,
   * immediate recovery, one scanner. Rolled back on failure or cancellation; retry with any restore id.
   */
  async afterRestore(request: AfterRestoreRequest): Promise<AfterRestoreResult> {
    const { sessionId, restoreId, signal } = request;
    const overrides = validate(request);
    signal?.throwIfAborted();
    return this.#serial(async () => {
      signal?.throwIfAborted();
      if (this.#sessionId !== undefined && this.#sessionId !== sessionId) throw new SessionMismatchError(this.#sessionId, sessionId, restoreId);
      const result: AfterRestoreResult = { outcome: 'duplicate', sessionId, restoreId };
      if (this.#completed.has(restoreId) && (!this.#engine || this.#engine.active)) return this.#describe(result);
      // Pinned before anything is applied: a failed restore binds the session too.
      this.#sessionId = sessionId;
      const rollbackEnv = this.#applyEnv(overrides, sessionId);
      try {
        if (this.#engine) {
          await this.#activate(`afterRestore(${restoreId})`, `${this.#name}|session:${sessionId}`, `${this.#name}-${process.pid}-${nanoid(8)}`, signal);
          result.outcome = 'activated';
        } else {
          result.outcome = 'no-engine';
        }
      } catch (err) {
        // The engine rolled its own activation back; undo what this hook did, then report.
        await this.#deactivate(0).catch(() => undefined);
        rollbackEnv();
        if (signal?.aborted && err === signal.reason) throw err;
        throw isTurnlogError(err, 'TURNLOG_ACTIVATION_FAILED') ? err : activationFailed(restoreId, err);
      }
      this.#completed.add(restoreId);
      this.#activeRestoreId = this.#engine ? restoreId : undefined;
      this.#snapshotted = false;
      return this.#describe(result);
    });
  }

  /** Lifespan end: quiesce the engine (re-activatable). Completed restore ids are kept; the session stays pinned. */
  stop(options: { graceMs?: number } = {}): Promise<void> {
    return this.#serial(() => this.#deactivate(options.graceMs));
  }

  #describe(result: AfterRestoreResult): AfterRestoreResult {
    if (this.#engine?.active) {
      result.owner = this.#engine.owner;
      result.instance = this.#engine.instance;
    }
    return result;
  }

  /** Activates under a new binding; an engine active under another binding is quiesced first. */
  async #activate(label: string, owner: string | undefined, instance: string | undefined, signal: AbortSignal | undefined): Promise<void> {
    const engine = this.#engine!;
    if (engine.active) await this.#deactivate();
    let phaseNow: ActivationPhase = 'open';
    // The engine runs every phase that can fail before recovery starts a turn. The check before
    // 'recovery' is the commit point: a cancel after it is too late, the restore completes.
    const options: ActivateOptions = {
      onPhase: async (phase) => {
        phaseNow = phase;
        signal?.throwIfAborted();
        await this.#onPhase?.(phase);
        signal?.throwIfAborted();
      },
    };
    if (owner !== undefined) options.owner = owner;
    if (instance !== undefined) options.instance = instance;
    try {
      await engine.activate(options);
    } catch (err) {
      if (signal?.aborted && err === signal.reason) throw err;
      throw new TurnlogError('TURNLOG_ACTIVATION_FAILED', `${label}: activation failed in phase ${phaseNow} and was rolled back: ${(err as Error)?.message ?? String(err)}. Fix the cause, then retry (afterRestore accepts the same or a new restore id).`, { cause: err });
    }
  }

  async #deactivate(graceMs = this.#graceMs): Promise<void> {
    this.#activeRestoreId = undefined;
    if (!this.#engine?.active) return;
    await this.#engine.deactivate(graceMs === undefined ? {} : { graceMs });
  }

  /** Applies overrides (and reverts keys the last restore set that these omit); returns the undo. */
  #applyEnv(overrides: Record<string, string>, sessionId: string): () => void {
    const env = this.#env;
    const target: Record<string, string | undefined> = {};
    for (const key of this.#applied) target[key] = this.#baseline[key];
    Object.assign(target, overrides, { [SESSION_ENV]: sessionId });
    const before: Record<string, string | undefined> = {};
    for (const key of Object.keys(target)) before[key] = env[key];
    const appliedBefore = this.#applied;
    const write = (values: Record<string, string | undefined>) => {
      for (const [key, value] of Object.entries(values)) {
        if (value === undefined) delete env[key];
        else env[key] = value;
      }
    };
    write(target);
    this.#applied = new Set([...Object.keys(overrides), SESSION_ENV]);
    return () => {
      write(before);
      this.#applied = appliedBefore;
    };
  }

  #serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#chain.then(fn);
    this.#chain = run.catch(() => undefined);
    return run;
  }
}

/** Validation happens before anything is applied: a bad request changes nothing and pins nothing. */
function validate(request: AfterRestoreRequest): Record<string, string> {
  if (typeof request !== 'object' || request === null) throw invalidArgument('afterRestore needs { sessionId, restoreId }.');
  checkId('sessionId', request.sessionId);
  checkId('restoreId', request.restoreId);
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(request.env ?? {})) {
    if (!ENV_NAME.test(key)) throw invalidArgument(`afterRestore env name ${JSON.stringify(key)} is not a valid environment variable name (letters, digits, _; not starting with a digit).`);
    if (typeof value !== 'string' || value.includes('\u0000')) throw invalidArgument(`afterRestore env ${key} must be a string without NUL characters.`);
    out[key] = value;
  }
  const pinned = out[SESSION_ENV];
  if (pinned !== undefined && pinned !== request.sessionId) {
    throw invalidArgument(`afterRestore env ${SESSION_ENV}=${pinned} disagrees with sessionId ${request.sessionId}; omit it (it is set from sessionId).`);
  }
  return out;
}

/**
 * Printable: no C0 or C1 control character, no DEL, and no lone surrogate. The session id goes
 * into the owner written with every claim, so one without a UTF-8 form would be pinned and then
 * fail activation; it is refused here, before anything is pinned.
 */
function checkId(what: string, id: unknown): void {
  if (typeof id !== 'string' || id.length === 0 || id.length > 200 || /[\u0000-\u001f\u007f-\u009f]/.test(id) || !id.isWellFormed()) {
    throw invalidArgument(`afterRestore ${what} must be a non-empty string of at most 200 printable characters, got ${JSON.stringify(id)}.`);
  }
}

function activationFailed(restoreId: string, cause: unknown): TurnlogError {
  return new TurnlogError('TURNLOG_ACTIVATION_FAILED', `afterRestore(${restoreId}) failed and was rolled back: ${(cause as Error)?.message ?? String(cause)}. Fix the cause, then retry.`, { cause });
}
