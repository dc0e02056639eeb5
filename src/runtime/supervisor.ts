/**
 * Attempt supervision: the deadline (tier 1 marker and cooperative cancel), the hard cap
 * (tier 3: kill a worker or abandon an inline turn), lease renewal, fencing of a zombie
 * attempt, and stopping every attempt at shutdown. Timers schedule; drafts.ts decides what
 * is written; the appender writes. See docs/workflows.md and docs/recovery.md.
 */
import type { StaleGenerationError } from '../errors.js';
import type { CancelKind } from '../attempt/host.js';
import { systemClock, type Timer } from './clock.js';
import { isStale, logFailure, type Appender } from './appender.js';
import { hardCapDrafts, type HardCapReason } from './drafts.js';
import { noteAttemptEnded } from './observe.js';
import type { TurnResults } from './results.js';
import type { Runtime } from './runtime.js';
import type { ActiveAttempt, LockedTask, TaskCache, TaskEntry } from './task-cache.js';

export class Supervisor {
  readonly #rt: Runtime;
  readonly #cache: TaskCache;
  readonly #appender: Appender;
  readonly #results: TurnResults;
  readonly #drive: (t: LockedTask) => Promise<void>;

  /** `drive` is late-bound: the driver arms this supervisor, and a hard cap drives the task on. */
  constructor(rt: Runtime, cache: TaskCache, results: TurnResults, appender: Appender, drive: (t: LockedTask) => Promise<void>) {
    this.#rt = rt;
    this.#cache = cache;
    this.#results = results;
    this.#appender = appender;
    this.#drive = drive;
  }

  /** Arms tier 1 at the turn's deadline. */
  armDeadline(t: TaskEntry, active: ActiveAttempt, delayMs: number): void {
    active.timers.push(this.#rt.clock.setTimer(() => void this.onDeadline(t, active), delayMs));
  }

  /** Arms the hard cap `graceMs` after a cancel was requested. */
  armCancelGrace(t: TaskEntry, active: ActiveAttempt, graceMs: number): void {
    active.timers.push(this.#rt.clock.setTimer(() => void this.hardCap(t, active, 'cancel'), graceMs));
  }

  cancelAttempt(active: ActiveAttempt, kind: CancelKind, reason: string): void {
    if (active.handle) active.handle.cancel(kind, reason);
    else active.pendingCancel = [kind, reason];
  }

  /** Tier 1: the marker first, then the cooperative cancel; tier 3 armed at the grace. */
  async onDeadline(t: TaskEntry, active: ActiveAttempt): Promise<void> {
    await this.#cache.withLock(t, async (t) => {
      if (t.active !== active || active.finalized || !this.#rt.open) return;
      if (t.state!.openTurn?.marker) return;
      const now = this.#rt.clock.now();
      const deadline = t.state!.openTurn!.deadline;
      // Tier 3 is at deadline + grace (docs/isolation.md), not grace after this marker: a deadline
      // timer that fired late or a slow marker append would push the kill later by as much.
      const graceUntil = Math.max(now, deadline + t.state!.policy.graceMs);
      await this.#appender.append(t, [{ type: 'TimeoutCancelRequested', turn: active.turn, at: now, graceUntil }]);
      this.cancelAttempt(active, 'timeout', `deadline ${new Date(deadline).toISOString()} reached`);
      active.timers.push(this.#rt.clock.setTimer(() => void this.hardCap(t, active, 'timeout'), Math.max(0, graceUntil - this.#rt.clock.now())));
    }).catch((err) => logFailure(this.#rt.log, 'timeout marker failed', { taskId: t.id }, err));
  }

  /** Tier 3: kill a worker (its `killed` outcome finalizes), or abandon an inline turn now. */
  async hardCap(t: TaskEntry, active: ActiveAttempt, why: HardCapReason): Promise<void> {
    await this.#cache.withLock(t, async (t) => {
      if (t.active !== active || active.finalized || !this.#rt.open) return;
      if (active.handle?.kill) {
        active.killReason = why;
        active.handle.kill(why === 'timeout' ? 'turn timeout hard cap' : 'cancel grace expired');
        return;
      }
      active.finalized = true;
      active.handle?.fence(why === 'timeout' ? 'turn timed out (hard cap)' : 'turn cancelled after the grace');
      noteAttemptEnded(this.#rt, t.id, active, why === 'timeout' ? { kind: 'timed-out' } : { kind: 'cancelled', reason: 'cancel grace expired' });
      for (const tm of active.timers) tm.cancel();
      t.active = undefined;
      const before = t.state!;
      await this.#appender.append(t, hardCapDrafts(before, active.turn, why));
      await this.#drive(t);
    }).catch((err) => logFailure(this.#rt.log, 'hard cap failed', { taskId: t.id }, err));
  }

  /**
   * Renews every `leaseMs / 2`. On a shared store the attempt also has a watch on its lease:
   * `leaseFrom` is when the request that got the current lease was sent, so the lease cannot
   * expire (database clock) before `leaseFrom + leaseMs` here; at that time, unrenewed, the
   * attempt stops (test: runtime/postgres-partition).
   */
  armRenewal(t: TaskEntry, active: ActiveAttempt, leaseFrom: number): void {
    const every = Math.max(1, Math.floor(this.#rt.leaseMs / 2));
    if (!this.#rt.store.supports.exclusive) this.#watchLease(t, active, leaseFrom);
    const tick = () => {
      if (t.active !== active || active.finalized) return;
      void this.#cache.withLock(t, async (t) => {
        if (t.active !== active || !t.lease) return;
        try {
          const sent = this.#rt.clock.now();
          t.lease = await this.#rt.store.renewLease(t.id, t.lease, this.#rt.leaseMs, this.#rt.clock.now());
          active.leaseFrom = sent;
          active.renewFailures = 0;
        } catch (err) {
          if (isStale(err)) return this.fence(t, err);
          active.renewFailures++;
          this.#rt.log.warn('lease renewal failed', { taskId: t.id, failures: active.renewFailures, error: err });
          // A shared store: the lease watch stops the attempt when the lease may have expired, writing
          // nothing; a cancel here would end the turn as cancelled, never to run again (DESIGN 7).
          if (active.renewFailures >= 3 && this.#rt.store.supports.exclusive) this.cancelAttempt(active, 'cancel', 'lease lost: three renewals failed');
        }
      }).finally(() => {
        // Shared store: a failed renewal is retried sooner, before the watch would lapse the lease.
        const next = active.renewFailures > 0 && !this.#rt.store.supports.exclusive ? Math.max(1, Math.floor(every / 5)) : every;
        if (t.active === active) active.timers.push(this.#rt.clock.setTimer(tick, next));
      });
    };
    active.timers.push(this.#rt.clock.setTimer(tick, every));
  }

  /**
   * Without the lock: a renewal hung on a cut connection holds it. Checks at the lease's local
   * end; renewed meanwhile, it watches the new end.
   */
  #watchLease(t: TaskEntry, active: ActiveAttempt, leaseFrom: number): void {
    active.leaseFrom = leaseFrom;
    const check = (): void => {
      if (t.active !== active || active.finalized || !this.#rt.open) return;
      const left = active.leaseFrom! + this.#rt.leaseMs - this.#rt.clock.now();
      if (left > 0) {
        active.timers.push(this.#rt.clock.setTimer(check, left));
        return;
      }
      this.lapse(t, active);
    };
    active.timers.push(this.#rt.clock.setTimer(check, Math.max(0, leaseFrom + this.#rt.leaseMs - this.#rt.clock.now())));
  }

  /**
   * The attempt's lease may have expired in the store (a partition, a store that stopped
   * answering): it stops as a crash would, writing nothing (its records and outcome are refused),
   * so the turn stays open for whichever engine claims it next, this one included. `what` names
   * another lease that lapsed (a flow-limit slot, driver.ts); default the task's.
   */
  lapse(t: TaskEntry, active: ActiveAttempt, what?: string): void {
    const detail = `${what ?? `the lease of task ${t.id} was not renewed within leaseMs (${this.#rt.leaseMs} ms)`}: the store could not be reached`;
    this.stopAttempt(t, active, detail);
    this.#cache.forget(t);
    this.#results.rejectAll(t, this.#results.deferred(t.id, active.turn, `${detail}; another engine (or this one, once it reaches the store) re-runs the turn`));
    this.#rt.log.warn(`${what ? 'flow-limit slot' : 'lease'} lapsed: the attempt is stopped; the turn is left for recovery`, { taskId: t.id, turn: active.turn, attempt: active.attempt, leaseMs: this.#rt.leaseMs });
  }

  /**
   * Another instance claimed the task at a higher generation: this engine is a zombie for it.
   * Stop the attempt (kill a worker, else cancel cooperatively), forget the cached entry so the
   * next call re-reads the history, and never retry (test: runtime/engine-fencing).
   */
  fence(t: TaskEntry, err: StaleGenerationError): void {
    const a = t.active;
    const detail = `another instance took task ${t.id} over at generation ${err.current}`;
    if (a) this.stopAttempt(t, a, detail);
    this.#cache.forget(t);
    const turn = a?.turn ?? t.state?.openTurn?.turn ?? t.state?.turn ?? 0;
    this.#results.rejectAll(t, this.#results.deferred(t.id, turn, `${detail}; this engine no longer runs it`));
    this.#rt.log.warn('task fenced: another instance took it over; the attempt is stopped and not retried', {
      taskId: t.id,
      turn,
      attempt: a?.attempt ?? t.state?.openTurn?.attempt ?? 0,
      code: err.code,
      generation: err.generation,
      current: err.current,
    });
  }

  /** Stops an attempt that no longer owns its turn (kill a worker, else cancel cooperatively); its records and outcome are refused. */
  stopAttempt(t: TaskEntry, a: ActiveAttempt, detail: string): void {
    a.finalized = true;
    for (const tm of a.timers) tm.cancel();
    a.handle?.fence(detail);
    if (a.handle?.kill) a.handle.kill(detail);
    else this.cancelAttempt(a, 'cancel', detail);
    if (t.active === a) t.active = undefined;
  }

  /**
   * After a ConcurrencyError's re-read (the appender's `onRefreshed`): the other writer may have
   * ended the turn running here (another engine's cancel finalizes it under the same generation):
   * stop it, so no step of a finalized turn runs (invariant 7); resolve the waiters it settled.
   */
  afterRefresh(t: TaskEntry): void {
    const a = t.active;
    const ot = t.state?.openTurn;
    if (a && (ot?.turn !== a.turn || ot.attempt !== a.attempt)) this.stopAttempt(t, a, `another writer ended turn ${a.turn} of task ${t.id}`);
    // The waiters those events settle are told by the seam (results.ts afterAppend), next.
  }

  /**
   * Shutdown: cancel every running attempt, wait up to `graceMs` for them, then fence and kill
   * the rest, leaving their turns in progress for the next engine's recovery.
   */
  async stopAll(graceMs: number): Promise<void> {
    const running = [...this.#cache.entries()].filter((t) => t.active);
    for (const t of running) this.cancelAttempt(t.active!, 'shutdown', 'engine shutdown');
    let timer: Timer | undefined;
    await Promise.race([
      Promise.all(running.map((t) => t.active?.done)),
      // Real time, not the engine clock: shutdown must end even when a test's manual clock stands still.
      new Promise<void>((r) => (timer = systemClock.setTimer(r, graceMs, { background: true }))),
    ]);
    timer?.cancel();
    for (const t of running) {
      const a = t.active;
      if (!a) continue;
      a.finalized = true;
      for (const tm of a.timers) tm.cancel();
      a.handle?.fence('engine shut down before the turn ended');
      a.handle?.kill?.('engine shutdown');
      t.active = undefined;
    }
  }
}
