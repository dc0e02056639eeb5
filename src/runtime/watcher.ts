/**
 * Other engines' appends, heard: on a shared store (PostgreSQL) every committed append is
 * notified, and a task this engine holds is re-read at once, so a steering input sent through
 * another engine reaches the running turn (`ctx.takeInputs`), another engine's cancel stops it,
 * and waiters here learn a turn's end. Polling (`poll`, every scan) is the fallback.
 */
import type { AppendNotice } from '../store/history-store.js';
import type { Appender } from './appender.js';
import type { TurnResults } from './results.js';
import type { Runtime } from './runtime.js';
import type { LockedTask, TaskCache, TaskEntry } from './task-cache.js';

export class Watcher {
  readonly #rt: Runtime;
  readonly #cache: TaskCache;
  readonly #appender: Appender;
  readonly #results: TurnResults;
  /** Decides and carries out (driver.ts), for a task an operator acted on. */
  readonly #drive: (t: LockedTask) => Promise<void>;
  #unsubscribe: (() => void) | undefined;
  /** Re-reads heard, for tests and the benchmark. */
  refreshes = 0;

  constructor(rt: Runtime, cache: TaskCache, appender: Appender, results: TurnResults, drive: (t: LockedTask) => Promise<void> = async () => undefined) {
    this.#drive = drive;
    this.#rt = rt;
    this.#cache = cache;
    this.#appender = appender;
    this.#results = results;
  }

  /** Subscribes to the store's notices, if it has any (a LevelDB store has one writer: none). */
  start(): void {
    this.#unsubscribe = this.#rt.store.watch?.((n) => this.#heard(n));
  }

  stop(): void {
    this.#unsubscribe?.();
    this.#unsubscribe = undefined;
  }

  #heard(n: AppendNotice): void {
    if (!this.#rt.open) return;
    if (n.resync) {
      for (const t of this.#cache.entries()) void this.#refresh(t, Infinity);
      return;
    }
    const t = this.#cache.get(n.taskId);
    // Our own appends are notified too: the cached state already has them.
    if (t) {
      if ((t.state?.lastEventId ?? 0) < n.lastEventId) void this.#refresh(t, n.lastEventId);
      return;
    }
    // A load in flight may have read the history before this append: check once it is cached.
    void this.#cache.loading(n.taskId)?.then(
      (t) => void this.#refresh(t, n.lastEventId),
      () => undefined,
    );
  }

  /**
   * The polling fallback (each recovery scan): tasks here that someone waits on or that run a
   * turn are compared with their stored summary and re-read when another engine appended.
   */
  async poll(): Promise<void> {
    for (const t of [...this.#cache.entries()]) {
      if (!this.#rt.open) return;
      if (!t.active && t.waiters.size === 0 && t.turnWaiters.length === 0) continue;
      const s = await this.#rt.store.getSummary(t.id).catch(() => undefined);
      if (s && s.lastEventId > (t.state?.lastEventId ?? 0)) await this.#refresh(t, s.lastEventId);
    }
  }

  async #refresh(t: TaskEntry, upTo: number): Promise<void> {
    await this.#cache
      .withLock(t, async (t) => {
        // Another notice (or this engine's own append) may have brought the entry up to date.
        if (upTo !== Infinity && (t.state?.lastEventId ?? 0) >= upTo) return;
        this.refreshes++;
        const events = await this.#appender.refresh(t);
        if (events.length || upTo === Infinity) await this.#results.settleEnded(t);
        // An operator (`turnlog resend --store postgres://…`, Engine.openForOperator) runs no
        // turn: an engine that has the workflow starts what its action made due (a re-sent input,
        // the next input after a cancelled turn) now rather than at its next scan.
        // Likewise an input another engine queued on an idle task whose lease is still ours (our
        // turn just ended): that engine left the turn to us (driver.ts, a live foreign lease).
        const ours = t.lease !== undefined && t.lease.instance === this.#rt.instance;
        const due = events.some((e) => e.type === 'OperatorAction') || (ours && events.some((e) => e.type === 'InputQueued'));
        if (!t.active && t.state && due && this.#rt.workflows.has(t.state.workflow)) await this.#drive(t);
      })
      .catch((err) => this.#rt.log.warn('re-reading a task another engine appended to failed', { taskId: t.id, error: err }));
  }
}
