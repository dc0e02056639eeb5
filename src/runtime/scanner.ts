/**
 * The recovery scanner: claims due work from the store a bounded batch at a time (in progress
 * under a dead lease, pending, queued inputs, completed past the retention) and drives each task
 * under its lock, up to `recoveryConcurrency` at once so their appends share group commits.
 * Corrupt tasks are skipped; retention deletes old completed histories. Runs at open (in the
 * background), every `scanIntervalMs`, and on `recover()`.
 */
import { isHistoryUnreadable as isUnreadable } from '../errors.js';
import type { Lease } from '../history/events.js';
import type { DueBatch, DueTask, HistoryStore } from '../store/history-store.js';
import type { OrphanClaim, ClaimedOrphan } from '../store/postgres-store.js';
import { isDue, nextWakeAt } from '../replay/index.js';
import type { Timer } from './clock.js';
import { logFailure } from './appender.js';
import type { Driver } from './driver.js';
import type { Runtime } from './runtime.js';
import type { LockedTask, TaskCache, TaskEntry } from './task-cache.js';

/** Tasks asked of the store per claim. */
export const CLAIM_BATCH = 256;

export class Scanner {
  readonly #rt: Runtime;
  readonly #cache: TaskCache;
  readonly #driver: Driver;
  #timer: Timer | undefined;
  #scanning: Promise<void> | undefined;
  /** The pass that follows the one in flight, for `recover()` calls made during it. */
  #again: Promise<void> | undefined;
  /** The watcher's polling fallback (other engines' appends to tasks held here). */
  readonly #poll: () => Promise<void>;

  constructor(rt: Runtime, cache: TaskCache, driver: Driver, poll: () => Promise<void> = async () => undefined) {
    this.#rt = rt;
    this.#cache = cache;
    this.#driver = driver;
    this.#poll = poll;
  }

  /**
   * A recovery pass that starts no earlier than this call: `engine.recover()` after a send must
   * see that send. With a pass in flight (it may have read the store before the call), one more
   * pass runs after it, shared by every caller meanwhile (test: engine-recovery-background,
   * "recover() during the open's pass").
   */
  async recover(): Promise<void> {
    if (!this.#rt.open) return;
    if (!this.#scanning) return this.#pass();
    return (this.#again ??= this.#scanning
      .catch(() => undefined)
      .then(() => {
        this.#again = undefined;
        // Shut down meanwhile: stop() waited for the pass in flight and no pass may start after it
        // (a LevelDB store is closed next; test: runtime/scanner "shutdown while recover() waits").
        if (!this.#rt.open) return;
        return this.#scanning ?? this.#pass();
      }));
  }

  /** Runs one recovery pass now, or joins the one in flight (at open and every `scanIntervalMs`). */
  pass(): Promise<void> {
    if (!this.#rt.open) return Promise.resolve();
    return this.#scanning ?? this.#pass();
  }

  #pass(): Promise<void> {
    this.#scanning = this.#recoverPass().finally(() => (this.#scanning = undefined));
    return this.#scanning;
  }

  async #recoverPass(): Promise<void> {
    if (!this.#rt.store.exclusive) {
      // The store's clock judges other instances' leases (store-clock.ts): measured each pass.
      await this.#driver.storeClock.sync();
      await this.#poll();
    }
    const now = this.#rt.clock.now();
    const retentionMs = this.#rt.retentionMs;
    const running = new Slots(this.#rt.recoveryConcurrency);
    // #recoverTask logs its failures and returns: a throw there is a bug, its slot freed all the same.
    const failed = (err: unknown): void => {
      running.release();
      this.#rt.log.error('recovery failed', { error: err });
    };
    // A shared store that claims orphans with SKIP LOCKED: take them up to our free slots first;
    // the in-progress tasks claimDueWork lists are then other engines' (or beyond our cap).
    const store = this.#rt.store;
    const claiming = canClaimOrphans(store);
    if (claiming) {
      const claimed = new Map<string, Lease | undefined>();
      for (const id of await this.#claimOrphans(store, claimed)) {
        while (running.full) await running.free();
        running.take();
        void this.#recoverTask(id, { previous: claimed.get(id) }).then(running.release, failed);
      }
    }
    const purged: string[] = [];
    // A store that claims (supports.claim): what we were handed is ours until released here, or
    // until the claim expires if we die. A task left waiting with its wake-up armed keeps its
    // claim until expiry, so other engines' scans do not load it and arm it too.
    const claims = store.supports.claim && typeof store.releaseDueWork === 'function';
    const handed = new Set<string>();
    const waiting = new Set<string>();
    let cursor: string | undefined;
    try {
      do {
        const batch = await this.#rt.store
          .claimDueWork({
            now,
            instance: this.#rt.instance,
            limit: CLAIM_BATCH,
            ...(cursor === undefined ? {} : { cursor }),
            ...(retentionMs === undefined ? {} : { retentionMs }),
            // Scheduled inputs due before the next scan get their wake-up armed now; without a
            // periodic scan, every one of them (this pass is the only one).
            horizonMs: this.#rt.scanIntervalMs > 0 ? 2 * this.#rt.scanIntervalMs : Infinity,
            // Orphans were claimed above with leases; a due claim of one here would only hide it.
            ...(claiming ? { reasons: ['pending', 'queued', 'retention'] as const } : {}),
            ...(claims ? { claimMs: this.#rt.leaseMs } : {}),
          })
          .catch((err: unknown) => {
            // An unreadable record the store could not route around: what was claimed so far is recovered.
            if (!isUnreadable(err)) throw err;
            this.#rt.log.error('recovery could not claim every due task', { error: err });
            return { tasks: [] as DueTask[] } as DueBatch;
          });
        for (const due of batch.tasks) handed.add(due.taskId);
        for (const due of batch.tasks) {
          if (!this.#rt.open) break;
          if (claiming && due.reason === 'in-progress') continue;
          if (due.reason === 'retention') {
            if (await this.#purge(due.taskId)) purged.push(due.taskId);
            continue;
          }
          // Bounded: wait for a slot, then start this task's recovery and claim on meanwhile.
          while (running.full) await running.free();
          running.take();
          const id = due.taskId;
          // One reaction a task frees its slot: a race over every running task's promise cost
          // ~11 promises a task, each paying the async hooks (docs/performance.md).
          void this.#recoverTask(id).then((armed) => {
            if (armed) waiting.add(id);
            running.release();
          }, failed);
        }
        cursor = batch.next;
      } while (cursor !== undefined && this.#rt.open);
    } finally {
      await running.drained();
      if (claims && handed.size > 0) await this.#release(store, [...handed].filter((id) => !waiting.has(id)));
    }
    if (purged.length) this.#rt.log.info('retention deleted completed tasks', { count: purged.length });
  }

  /** Ends this engine's due claims; a failure is logged, the claims then expire on their own. */
  async #release(store: HistoryStore, ids: string[]): Promise<void> {
    if (ids.length === 0) return;
    await store.releaseDueWork!(ids, this.#rt.instance).catch((err: unknown) =>
      this.#rt.log.warn('could not release claims of due work; they expire on their own', { count: ids.length, error: err }),
    );
  }

  /** A due wake-up (runtime/wakeups.ts): loads and drives the task like recovery does. */
  async wake(id: string): Promise<void> {
    await this.#recoverTask(id);
  }

  /**
   * Loads and drives one task; never rejects (one task must not stop the others, nor Engine.open).
   * True when it is left waiting for a scheduled input with its wake-up armed. Promise chains, not
   * an async function: a claimed task loads without an await (TaskCache.loadNow), and each await
   * and async function is a promise more, each paying the step scope's async hooks.
   */
  #recoverTask(id: string, claim?: { previous: Lease | undefined }): Promise<boolean> {
    if (!this.#rt.open || this.#cache.corruptMark(id)) return NOT_ARMED;
    const now = this.#cache.loadNow(id);
    if (now !== undefined) return this.#driveLoaded(now, claim);
    // One task that cannot be loaded (an unreadable or corrupt history, an id an older version
    // accepted) must not stop the others' recovery (test: runtime/engine "cannot be loaded").
    return this.#cache.load(id).then(
      (t) => this.#driveLoaded(t, claim),
      (err: unknown) => {
        // A corrupt task was logged and marked by the cache (isolate); every other task is still served.
        if (!this.#cache.corruptMark(id)) this.#rt.log.error('recovery failed: the task cannot be loaded', { taskId: id, error: err });
        return false;
      },
    );
  }

  #driveLoaded(t: TaskEntry, claim: { previous: Lease | undefined } | undefined): Promise<boolean> {
    if (t.active) return NOT_ARMED;
    return this.#cache
      // A free lock drives at once (withLockNow: two promises less); drive's synchronous part locks
      // nothing (its appends, the attempt's records and timers take the lock later). Not an async
      // function: one resolved with drive's promise adds two promises and two ticks.
      .withLockNow(t, (t) => (claim ? this.#driveClaimed(t, claim) : this.#driver.drive(t)))
      .then(
        () => this.#parked(t),
        (err: unknown) => {
          logFailure(this.#rt.log, 'recovery failed', { taskId: t.id }, err);
          return this.#parked(t);
        },
      );
  }

  /**
   * Waiting for a scheduled input, its wake-up armed (true: its due claim stays): nothing of it
   * needs to stay in memory. Its load's pin lasts until the next immediate (TaskCache.load), so it
   * leaves the cache then, unless it is in use; checked here, `busy` counted that pin and no task
   * was ever dropped or kept its claim (test: runtime/scanner-parked).
   */
  #parked(t: TaskEntry): boolean {
    if (!this.#waiting(t)) return false;
    if (this.#parking.push(t) === 1) setImmediate(this.#park);
    return true;
  }

  #waiting(t: TaskEntry): boolean {
    const s = t.state;
    return s !== undefined && !t.active && s.openTurn === undefined && nextWakeAt(s) !== undefined && !s.queue.some((q) => isDue(q, this.#rt.clock.now()));
  }

  /** Tasks left waiting since the last {@link #park}: one immediate for all, after their pins'. */
  #parking: TaskEntry[] = [];
  readonly #park = (): void => {
    const parking = this.#parking;
    this.#parking = [];
    for (const t of parking) if (t.busy === 0 && this.#cache.get(t.id) === t && this.#waiting(t)) this.#cache.forgetIdle(t.id);
  };

  /** Drives an orphan this engine claimed (a shared store), releasing its lease if no turn started. */
  async #driveClaimed(t: LockedTask, claim: { previous: Lease | undefined }): Promise<void> {
    const id = t.id;
    const mine = (t.lease = (await this.#rt.store.getLease(id)) ?? t.lease);
    t.claim = claim;
    try {
      await this.#driver.drive(t);
    } finally {
      t.claim = undefined;
      // Claimed but not run here (nothing to do, not our workflow): free it for the others.
      if (!t.active && mine && t.lease === mine) await this.#rt.store.releaseLease(id, mine, this.#rt.clock.now());
    }
  }

  /** Retention: deletes a completed task's records unless this engine still serves it. */
  async #purge(id: string): Promise<boolean> {
    const t = this.#cache.get(id);
    if (t && (t.active || t.busy > 0 || t.state?.status !== 'completed')) return false;
    try {
      await this.#rt.store.deleteTask(id);
    } catch (err) {
      this.#rt.log.error('retention could not delete a task', { taskId: id, error: err });
      return false;
    }
    this.#cache.forgetIdle(id);
    return true;
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
      void this.pass()
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
/** #recoverTask's answer for a task it did not drive (shared: nothing to allocate). */
const NOT_ARMED: Promise<boolean> = Promise.resolve(false);

/** A recovery pass's concurrency: slots taken and released, and one waiter for a free slot or for none taken. */
class Slots {
  #taken = 0;
  #wake: (() => void) | undefined;
  constructor(readonly size: number) {}

  get full(): boolean {
    return this.#taken >= this.size;
  }

  take(): void {
    this.#taken++;
  }

  readonly release = (): void => {
    this.#taken--;
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  };

  /** Resolves once a slot is free (one waiter at a time: the pass's loop). */
  free(): Promise<void> {
    return new Promise((resolve) => (this.#wake = resolve));
  }

  /** Resolves once every slot is released. */
  async drained(): Promise<void> {
    while (this.#taken > 0) await this.free();
  }
}

interface OrphanClaimer {
  claimOrphans(request: OrphanClaim): Promise<ClaimedOrphan[]>;
}

/** A shared store that can claim orphans (the PostgreSQL store). */
function canClaimOrphans(store: HistoryStore): store is HistoryStore & OrphanClaimer {
  return !store.exclusive && typeof (store as Partial<OrphanClaimer>).claimOrphans === 'function';
}
