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
