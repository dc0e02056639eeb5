/**
 * Cancelling a task or its open turn (docs/workflows.md "Cancelling"): the cancel drafts
 * (drafts.ts, pure) appended under the task's lock, a running attempt told cooperatively and
 * stopped after its grace (supervisor.ts), then the cascade to attached children (children.ts).
 */
import { taskNotFound } from '../errors.js';
import type { TaskState } from '../history/state.js';
import type { Appender } from './appender.js';
import type { Children } from './children.js';
import { cancelDraft, type Draft } from './drafts.js';
import type { Driver } from './driver.js';
import type { Runtime } from './runtime.js';
import type { Supervisor } from './supervisor.js';
import type { TaskCache } from './task-cache.js';

export class Cancels {
  readonly #rt: Runtime;
  readonly #cache: TaskCache;
  readonly #appender: Appender;
  readonly #supervisor: Supervisor;
  readonly #driver: Driver;
  readonly #children: Children;

  constructor(rt: Runtime, cache: TaskCache, appender: Appender, supervisor: Supervisor, driver: Driver, children: Children) {
    this.#rt = rt;
    this.#cache = cache;
    this.#appender = appender;
    this.#supervisor = supervisor;
    this.#driver = driver;
    this.#children = children;
  }

  /** Cancels; `record` (an operator action) goes into the same append. False when there was nothing to cancel. */
  async cancel(taskId: string, reason: string, scope: 'task' | 'turn', record?: (s: TaskState) => Draft): Promise<boolean> {
    this.#rt.assertOpen('cancel');
    const t = await this.#cache.load(taskId);
    const done = await this.#cache.mutate(t, async (t) => {
      const s = t.state;
      if (!s) throw taskNotFound(taskId);
      const cancel = cancelDraft(s, scope, reason);
      if (!cancel) return false;
      const drafts = record ? [record(s), cancel] : [cancel];
      const active = t.active;
      if (active) {
        await this.#appender.append(t, drafts);
        this.#supervisor.cancelAttempt(active, 'cancel', reason);
        const grace = s.policy.graceMs;
        this.#supervisor.armCancelGrace(t, active, grace);
      } else {
        await this.#driver.drive(t, drafts);
      }
      return true;
    });
    // Once the parent's cancel is durable; again on a repeated cancel (a cascade cut short by a crash).
    if (scope === 'task' && (done || t.state?.outcome === 'cancelled')) await this.#children.cascade(t.state, reason);
    return done;
  }
}
