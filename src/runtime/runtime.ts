/**
 * What every part of the engine reads about the engine it belongs to: the settings, the store
 * (TURNLOG_ENGINE_NOT_ACTIVATED before activation), this activation's identity and whether it is
 * open. The facade (engine.ts) builds it; the parts never see the Engine class.
 */
import type { HistoryStore } from '../store/history-store.js';
import type { Workflow } from '../workflow/define-workflow.js';
import type { Limiter } from './limits.js';
import type { Observers } from './observe.js';
import type { EngineSettings } from './options.js';

export interface Runtime extends EngineSettings {
  readonly store: HistoryStore;
  readonly owner: string;
  readonly instance: string;
  /** True while the engine is open (not activating, quiescing or closed). */
  readonly open: boolean;
  /** The observation seam (observe.ts): the appender and the driver call it. */
  readonly observers: Observers;
  /** Flow limits of steps (limits.ts): in memory, or the shared store's. */
  readonly limiter: Limiter;
  /** Throws TURNLOG_ENGINE_NOT_ACTIVATED (capture mode) or TURNLOG_ENGINE_CLOSED unless open; `api` names the call. */
  assertOpen(api: string): void;
  /** The registered workflow `name` (the built-in schedule workflow too), or TURNLOG_WORKFLOW_NOT_FOUND. */
  workflow(name: string): Workflow<any, any, any, any>;
}

/** What the engine facade answers for its {@link Runtime}, read on every access (engine.ts). */
export interface RuntimeHost {
  store(): HistoryStore;
  owner(): string;
  instance(): string;
  open(): boolean;
  limiter(): Limiter;
  assertOpen(api: string): void;
  workflow(name: string): Workflow<any, any, any, any>;
}

// The settings' fields, copied onto the instance by the constructor.
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging
export interface EngineRuntime extends EngineSettings {}

/**
 * The {@link Runtime} of an engine: a class, so every engine's has the same hidden class. It was
 * an object literal with getters, whose accessors (per-engine closures) gave each engine's a map
 * of its own: code the first engine in a process had optimized deoptimized ("wrong map") at its
 * first read of the next one's (`rt.open`, `rt.codec`, `rt.observers` in the driver, appender and
 * store paths) and was compiled again (the recovery bench's pass after its warm-up engine:
 * docs/performance.md).
 */
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging
export class EngineRuntime implements Runtime {
  readonly observers: Observers;
  readonly #host: RuntimeHost;

  constructor(settings: EngineSettings, observers: Observers, host: RuntimeHost) {
    // resolveOptions returns one literal shape: the same fields in the same order every engine.
    Object.assign(this, settings);
    this.observers = observers;
    this.#host = host;
  }

  get store(): HistoryStore {
    return this.#host.store();
  }
  get owner(): string {
    return this.#host.owner();
  }
  get instance(): string {
    return this.#host.instance();
  }
  get open(): boolean {
    return this.#host.open();
  }
  get limiter(): Limiter {
    return this.#host.limiter();
  }
  assertOpen(api: string): void {
    this.#host.assertOpen(api);
  }
  workflow(name: string): Workflow<any, any, any, any> {
    return this.#host.workflow(name);
  }
}
