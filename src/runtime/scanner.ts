/**
 * The recovery scanner: one pass finds every task that needs the engine (in-progress with a
 * dead lease, queued inputs, pending) and drives it; corrupt tasks are skipped; retention
 * deletes old completed histories. Runs at open, every `scanIntervalMs`, and on `recover()`.
 */
import { isHistoryUnreadable as isUnreadable } from '../errors.js';
import type { Lease } from '../history/events.js';
import type { HistoryStore } from '../store/history-store.js';
import type { OrphanClaim, ClaimedOrphan } from '../store/postgres-store.js';
import type { Timer } from './clock.js';
import { logFailure } from './appender.js';
import type { Driver } from './driver.js';
import type { Runtime } from './runtime.js';
import type { TaskCache, TaskEntry } from './task-cache.js';

export class Scanner {
  readonly #rt: Runtime;
  readonly #cache: TaskCache;
  readonly #driver: Driver;
  #timer: Timer | undefined;
  #scanning: Promise<void> | undefined;
  /** The watcher's polling fallback (other engines' appends to tasks held here). */
  readonly #poll: () => Promise<void>;

  constructor(rt: Runtime, cache: TaskCache, driver: Driver, poll: () => Promise<void> = async () => undefined) {
    this.#rt = rt;
    this.#cache = cache;
    this.#driver = driver;
    this.#poll = poll;
  }

  /** Runs one recovery pass now (it also runs at open and every `scanIntervalMs`). */
  async recover(): Promise<void> {
    if (!this.#rt.open) return;
    if (this.#scanning) return this.#scanning;
    this.#scanning = this.#recoverPass().finally(() => (this.#scanning = undefined));
    return this.#scanning;
  }

  async #recoverPass(): Promise<void> {
    if (!this.#rt.store.exclusive) await this.#poll();
    const now = this.#rt.clock.now();
    const claimed = new Map<string, Lease | undefined>();
    const store = this.#rt.store;
    const ids = new Set(canClaimOrphans(store) ? await this.#claimOrphans(store, claimed) : await store.listRecoverable(now, this.#rt.instance));
    for (const status of ['suspended', 'pending'] as const) {
      let cursor: string | undefined;
      try {
        do {
          const page = await this.#rt.store.listTasks(cursor ? { status, cursor } : { status });
          for (const s of page.tasks) if (s.queued > 0 || status === 'pending') ids.add(s.taskId);
          cursor = page.next;
        } while (cursor);
      } catch (err) {
        // An unreadable summary: recover the tasks listed so far and every in-progress one.
        if (!isUnreadable(err)) throw err;
        this.#rt.log.error('recovery could not list every task', { status, error: err });
      }
    }
    for (const id of ids) {
      if (!this.#rt.open) return;
      if (this.#cache.corruptMark(id)) continue;
      // One task that cannot be loaded (an unreadable or corrupt history, an id an older version
      // accepted) must not stop the others' recovery, nor Engine.open (test: runtime/engine "cannot be loaded").
      let t: TaskEntry;
      try {
        t = await this.#cache.load(id);
      } catch (err) {
        // A corrupt task was logged and marked by the cache (isolate); every other task is still served.
        if (this.#cache.corruptMark(id)) continue;
        this.#rt.log.error('recovery failed: the task cannot be loaded', { taskId: id, error: err });
        continue;
      }
      if (t.active) continue;
      await this.#cache
        .withLock(t, async (t) => {
          if (!claimed.has(id)) return this.#driver.drive(t);
          const mine = (t.lease = (await this.#rt.store.getLease(id)) ?? t.lease);
          t.claim = { previous: claimed.get(id) };
          try {
            await this.#driver.drive(t);
          } finally {
            t.claim = undefined;
            // Claimed but not run here (nothing to do, not our workflow): free it for the others.
            if (!t.active && mine && t.lease === mine) await this.#rt.store.releaseLease(id, mine, this.#rt.clock.now());
          }
        })
        .catch((err) => logFailure(this.#rt.log, 'recovery failed', { taskId: id }, err));
    }
    if (this.#rt.retentionMs !== undefined && this.#rt.open) {
      const purged = await this.#rt.store.purgeCompleted(this.#rt.retentionMs, this.#rt.clock.now()).catch((err: unknown) => {
        if (!isUnreadable(err)) throw err;
        this.#rt.log.error('retention skipped: a summary cannot be read', { error: err });
        return [] as string[];
      });
      for (const id of purged) this.#cache.forgetIdle(id);
      if (purged.length) this.#rt.log.info('retention deleted completed tasks', { count: purged.length });
    }
  }

  /**
   * A shared store that claims: orphans are taken `FOR UPDATE SKIP LOCKED` with this engine's
   * lease, at most as many as it has free turn slots, so engines never fight over one and the
   * work spreads over engines with capacity (docs/scale-out.md#orphans).
   */
  async #claimOrphans(store: HistoryStore & OrphanClaimer, claimed: Map<string, Lease | undefined>): Promise<string[]> {
    const cap = this.#rt.maxRunningTurns;
    for (;;) {
      const free = Math.min(cap - this.#driver.running() - claimed.size, ORPHAN_BATCH);
      if (free <= 0 || !this.#rt.open) break;
      const batch = await store.claimOrphans({ owner: this.#rt.owner, instance: this.#rt.instance, durationMs: this.#rt.leaseMs, limit: free });
      for (const o of batch) claimed.set(o.taskId, o.previous);
      if (batch.length < free) break;
    }
    return [...claimed.keys()];
  }

  arm(): void {
    if (this.#rt.scanIntervalMs <= 0) return;
    this.#timer = this.#rt.clock.setTimer(() => {
      void this.recover()
        .catch((err) => this.#rt.log.error('recovery scan failed', { error: err }))
        .finally(() => {
          if (this.#rt.open) this.arm();
        });
    }, this.#rt.scanIntervalMs, { background: true });
  }

  /** Stops the periodic scan and waits for a pass in flight (its failure was logged). */
  async stop(): Promise<void> {
    this.#timer?.cancel();
    this.#timer = undefined;
    await this.#scanning?.catch(() => undefined);
  }
}

const ORPHAN_BATCH = 100;

interface OrphanClaimer {
  claimOrphans(request: OrphanClaim): Promise<ClaimedOrphan[]>;
}

/** A shared store that can claim orphans (the PostgreSQL store). */
function canClaimOrphans(store: HistoryStore): store is HistoryStore & OrphanClaimer {
  return !store.exclusive && typeof (store as Partial<OrphanClaimer>).claimOrphans === 'function';
}
