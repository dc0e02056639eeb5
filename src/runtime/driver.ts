/**
 * The driver: asks the replayer what a task does next and carries it out — appends, starts an
 * attempt on its executor (lease, TurnStarted, timers), records what the handler records, and
 * finishes the attempt with its outcome. Drafts come from drafts.ts; writes from the appender;
 * timers from the supervisor. Every entry point holds the task's lock (a LockedTask).
 */
import { FencedError, TurnlogError, isTurnlogError } from '../errors.js';
import type { ExecutorKind, Lease, Payload } from '../history/events.js';
import { errorToFailure } from '../history/failure.js';
import { isLeaseLive, nextLease } from '../history/lease.js';
import type { TaskState } from '../history/state.js';
import { decide } from '../replay/index.js';
import type { Decision } from '../replay/decision.js';
import type { Executor, Reservation } from '../executor/executor.js';
import { hostFor, type AttemptOutcome, type TurnHost, type TurnSpec } from '../attempt/host.js';
import type { CallRecords } from '../attempt/calls.js';
import { turnSpecFor } from '../attempt/turn-spec.js';
import { logFailure, type Appender } from './appender.js';
import { endDrafts, finalizeDrafts, outcomeDrafts, turnStartDrafts, withinLimits, type Draft } from './drafts.js';
import { NONE, migrateState, needsMigration, newerStateError } from './migration.js';
import { noteAttemptEnded } from './observe.js';
import type { Children } from './children.js';
import type { Runtime } from './runtime.js';
import type { Supervisor } from './supervisor.js';
import { StoreClock } from './store-clock.js';
import { Waits } from './waits.js';
import { MAX_RACES, type ActiveAttempt, type LockedTask, type TaskCache, type TaskEntry } from './task-cache.js';
import { AttemptHost, stillOurs, type HostDeps } from './attempt-host.js';

/** Fewest entries `#running` holds before it is pruned without being counted. */
const PRUNE_MIN = 256;
/** An attempt's `done` until its run starts (a few lines later, in the same tick). */
const SETTLED: Promise<void> = Promise.resolve();

export class Driver {
  readonly #rt: Runtime;
  readonly #executors: ReadonlyMap<ExecutorKind, Executor>;
  readonly #cache: TaskCache;
  readonly #appender: Appender;
  readonly #supervisor: Supervisor;
  /** Entries that started an attempt here; pruned of ended ones when counted (maxRunningTurns). */
  readonly #running = new Set<TaskEntry>();
  /** Size of `#running` at which it is pruned even if nobody counts (twice the last count). */
  #pruneAt = PRUNE_MIN;
  /** Tasks due to run a turn that found every slot taken, first come first served. */
  readonly #waiting = new Set<string>();
  /** Attempts between the cap check and `t.active` being set. */
  #starting = 0;
  /** Arms a wake-up for a task waiting for a scheduled input (rule waiting-for-timer). */
  readonly #waitUntil: (taskId: string, at: number) => void;
  /** Child tasks: creates a child before its ChildStarted, waits for its end before ChildEnded. */
  readonly #children: Children | undefined;
  /** The shared store's clock against ours: other instances' leases are judged on it (store-clock.ts). */
  readonly storeClock: StoreClock;
  /** What every attempt's host uses of this driver (one object for all). */
  readonly #hostDeps: HostDeps;
  /** The input of a turn that has none (turnSpecFor calls it only then: most turns have one). */
  readonly #emptyInput = (): Payload => this.#rt.converter.toPayload(undefined);

  constructor(
    rt: Runtime,
    executors: ReadonlyMap<ExecutorKind, Executor>,
    cache: TaskCache,
    appender: Appender,
    supervisor: Supervisor,
    waitUntil: (taskId: string, at: number) => void = () => {},
    waits: Waits = new Waits(rt, cache, appender),
    children?: Children,
  ) {
    this.#waitUntil = waitUntil;
    this.storeClock = new StoreClock(rt);
    this.#children = children;
    this.#rt = rt;
    this.#executors = executors;
    this.#cache = cache;
    this.#appender = appender;
    this.#supervisor = supervisor;
    this.#hostDeps = { rt, cache, appender, supervisor, waits, prepareChild: (taskId, active, call, check) => this.#prepareChild(taskId, active, call, check) };
  }

  /**
   * Appends `pre` (if any) together with whatever the replayer decides next. Holds the lock.
   * A lost race (ConcurrencyError, the history re-read) once `pre` is written is decided again
   * on the history as it now is; while `pre` is unwritten it goes to the caller, whose drafts
   * were built on the old state (TaskCache.mutate decides those again).
   */
  // A chain, not an async function awaiting #driveOnce: one promise a drive instead of two.
  drive(t: LockedTask, pre: Draft[] = [], races = 0): Promise<void> {
    let pending = pre;
    return this.#driveOnce(t, pending, () => (pending = [])).catch((err: unknown) => {
      if (pending.length > 0 || races >= MAX_RACES || !isTurnlogError(err, 'TURNLOG_CONCURRENCY')) throw err;
      return this.drive(t, pending, races + 1);
    });
  }

  async #driveOnce(t: LockedTask, pre: Draft[], written: () => void): Promise<void> {
    let pending = pre;
    let leaseRead = false;
    for (;;) {
      if (t.active || !this.#rt.open) {
        // Closing, no attempt: a task cancel with no turn open completes the task in the same
        // append. A suspended task is not due work, so no recovery pass would complete it later
        // (test: runtime/cancel-at-shutdown).
        if (!t.active && pending.length) {
          const preview = this.#appender.preview(t, pending);
          const d = preview && decide(preview, undefined, this.#rt.clock.now());
          if (d?.kind === 'complete-task') pending = [...pending, { type: 'TaskCompleted', outcome: d.outcome }];
        }
        if (pending.length) await this.#appender.append(t, pending);
        return;
      }
      const preview = pending.length ? this.#appender.preview(t, pending) : t.state;
      if (!preview) return;
      let decision = decide(preview, this.#foreignLease(t), this.#rt.clock.now());
      if (decision.kind === 'rerun' && !this.#rt.store.exclusive && !leaseRead) {
        // On a shared store the cached lease may be old: another engine may run the turn now.
        leaseRead = true;
        t.lease = await this.#rt.store.getLease(t.id);
        decision = decide(preview, this.#foreignLease(t), this.#rt.clock.now());
      }
      switch (decision.kind) {
        case 'none':
          if (pending.length) await this.#appender.append(t, pending);
          if (decision.rule === 'waiting-for-timer') this.#waitUntil(t.id, decision.wakeAt);
          return;
        case 'complete-task':
          await this.#appender.append(t, [...pending, { type: 'TaskCompleted', outcome: decision.outcome }]);
          return;
        case 'finalize-turn': {
          await this.#appender.append(t, finalizeDrafts(decision, preview, pending));
          pending = [];
          written();
          continue;
        }
        case 'rerun':
        case 'start-turn':
          if (!this.#rt.workflows.has(preview.workflow)) {
            // Not ours to run (a deploy without this workflow): leave the task untouched for
            // an engine that has it, instead of failing its turn (test: "unregistered workflow").
            if (pending.length) await this.#appender.append(t, pending);
            // An operator engine has no workflows by design: an engine that runs the task starts it.
            if (!this.#rt.operatorOnly) this.#rt.log.warn('task left waiting: its workflow is not registered with this engine', { taskId: t.id, workflow: preview.workflow });
            return;
          }
          {
            // A state shaped by newer code (a rolling deploy, a rollback): left for an engine that has it.
            const newer = newerStateError(t.id, this.#rt.workflows.get(preview.workflow), preview);
            if (newer) {
              if (pending.length) await this.#appender.append(t, pending);
              this.#rt.log.warn('task left waiting: its state is of a newer workflow version', { taskId: t.id, workflow: preview.workflow, code: newer.code, error: newer });
              return;
            }
          }
          if (decision.kind === 'start-turn') {
            // On a shared store an idle task keeps the lease of the engine whose turn just ended
            // until it expires or a scan frees it. A new input is queued, not refused: that engine
            // hears it and runs the turn (watcher.ts), or this one does once the lease is free.
            let held = this.#liveForeignLease(t);
            if (held && !leaseRead) {
              leaseRead = true;
              t.lease = await this.#rt.store.getLease(t.id);
              held = this.#liveForeignLease(t);
            }
            if (held) {
              if (pending.length) await this.#appender.append(t, pending);
              this.#waitUntil(t.id, held.expiresAt);
              return;
            }
          }
          if (this.#atCap()) {
            // At the cap: the input is durably queued; a slot freed here (or another engine) runs it.
            if (pending.length) await this.#appender.append(t, pending);
            this.#waiting.add(t.id);
            return;
          }
          this.#waiting.delete(t.id);
          // The slot is taken before the first await, so concurrent drives never overshoot the cap.
          this.#starting++;
          try {
            await this.#startAttempt(t, decision, pending, preview);
          } catch (err) {
            // The store's clock said the other instance's lease is live though ours said expired
            // (lease time is the store's, DESIGN 12): queue the input as above and look again later.
            if (decision.kind !== 'start-turn' || !this.#foreignLease(t) || !isTurnlogError(err, 'TURNLOG_LEASE_HELD')) throw err;
            if (pending.length) await this.#appender.append(t, pending);
            this.#waitUntil(t.id, this.#rt.clock.now() + this.#rt.leaseMs);
          } finally {
            this.#starting--;
          }
          return;
      }
    }
  }

  async #startAttempt(
    t: LockedTask,
    d: Extract<Decision, { kind: 'rerun' | 'start-turn' }>,
    pending: Draft[],
    preview: TaskState,
  ): Promise<void> {
    // Before the worker is taken and the clock read: the hook is user code and may take a while.
    // Without a hook to run, no await (two promises and a tick a turn start).
    const wf = this.#rt.workflows.get(preview.workflow);
    const migration = needsMigration(wf, preview) ? await migrateState(this.#rt, t.id, wf, preview) : NONE;
    const now = this.#rt.clock.now();
    const policy = preview.policy;
    // An exclusive store proves other instances dead: their leases count as expired. On a shared
    // store another instance's lease is judged on the store's clock (rebased onto ours).
    const current = t.lease && t.lease.instance !== this.#rt.instance ? (this.#rt.store.supports.exclusive ? { ...t.lease, expiresAt: 0 } : this.storeClock.onEngineClock(t.lease)) : t.lease;
    const lease = nextLease(t.id, current, { owner: this.#rt.owner, instance: this.#rt.instance, durationMs: this.#rt.leaseMs, now }, preview.highestGeneration || 1, !this.#rt.store.supports.exclusive);
    // Throws before anything is written when the workflow's executor is not configured.
    const executor = this.#executorFor(policy.executor);
    // A worker taken now lets TurnStarted name its pid (0: it waits for a free worker).
    const reservation = migration.kind === 'failed' ? undefined : executor.reserve?.(t.id, preview.kind);
    const pid = policy.executor === 'inline' ? process.pid : (reservation?.pid ?? 0);
    const drafts = turnStartDrafts(d, preview, pending, {
      owner: this.#rt.owner,
      instance: this.#rt.instance,
      executor: policy.executor,
      pid,
      now,
      turnTimeoutMs: policy.turnTimeoutMs,
      lease,
      // A claimed orphan already holds this lease: the takeover is from the dead one it replaced.
      previous: t.claim ? t.claim.previous : t.lease,
      workflowVersion: wf?.version,
    });
    t.claim = undefined;
    // The migration goes in the same batch, just before TurnStarted: a crash never leaves one without the other.
    if (migration.kind === 'migrated') drafts.splice(drafts.length - 1, 0, migration.draft);
    if (migration.kind === 'failed') {
      // The turn fails before its handler runs; the stored state stays (the next turn tries again).
      drafts.push(...endDrafts(preview, { type: 'TurnFailed', turn: d.turn, failure: migration.failure }, 'failed'));
      await this.#appender.append(t, drafts, lease, now);
      return this.drive(t);
    }
    // While the start's write is made durable (the handler waits for it, DESIGN), the attempt is
    // built from the state the append leaves: its spec, host and deadline timer. Undone if the
    // append fails; a failure to build it leaves it to be built after the write, as before.
    let ahead: Ahead | undefined;
    const build = (s: TaskState): void => {
      const ot = s.openTurn!;
      // `done` is set below, before anything could read it: one settled promise for all until then.
      const active: ActiveAttempt = { turn: ot.turn, attempt: ot.attempt, finalized: false, timers: [], renewFailures: 0, done: SETTLED };
      const spec = turnSpecFor(s, this.#emptyInput, this.#rt.codec);
      // Its callback takes the lock first, which this start holds until the attempt is set.
      this.#supervisor.armDeadline(t, active, ot.deadline - now);
      ahead = { active, spec, host: this.#host(t, active) };
    };
    try {
      await this.#appender.append(t, drafts, lease, now, (s) => {
        try {
          build(s);
        } catch {
          for (const tm of ahead?.active.timers ?? []) tm.cancel();
          ahead = undefined;
        }
      });
    } catch (err) {
      reservation?.release();
      for (const tm of ahead?.active.timers ?? []) tm.cancel();
      throw err;
    }
    const s = t.state!;
    const ot = s.openTurn!;
    if (!ahead) build(s);
    const { active, spec, host } = ahead!;
    t.active = active;
    this.#running.add(t);
    if (this.#running.size >= this.#pruneAt) this.running();
    // Built only for a listener: with none (no observer, no tracing) it is garbage every attempt.
    if (this.#rt.observers.listens('attemptStarted')) {
      const trace = ot.inputs.find((i) => i.trace !== undefined)?.trace;
      this.#rt.observers.attemptStarted({ taskId: t.id, workflow: s.workflow, turn: ot.turn, attempt: ot.attempt, entryMode: ot.entryMode, executor: policy.executor, replayedCalls: spec.calls.length, time: now, ...(trace ? { trace } : {}) });
    }
    // After the write: its tick gives up on an attempt that is not the task's active one yet.
    this.#supervisor.armRenewal(t, active, now);
    active.done = this.#runAttempt(t, active, executor, spec, reservation, host);
  }

  async #runAttempt(t: TaskEntry, active: ActiveAttempt, executor: Executor, spec: TurnSpec, reservation: Reservation | undefined, host: TurnHost): Promise<void> {
    let outcome: AttemptOutcome;
    try {
      const handle = await executor.start(spec, hostFor(executor, host), reservation);
      active.handle = handle;
      // Fenced or shut down while the worker was starting: it must not run on unowned.
      if (active.finalized) {
        handle.fence('the turn was taken away while its worker started');
        handle.kill?.('the turn was taken away while its worker started');
      }
      if (active.pendingCancel) handle.cancel(...active.pendingCancel);
      outcome = await handle.outcome;
    } catch (err) {
      reservation?.release();
      const failure = errorToFailure(err);
      outcome = { kind: 'failed', failure: { ...failure, code: failure.code ?? 'TURNLOG_WORKER_START' } };
    }
    // A try around the await, not a `.catch` on it: one promise less between a handler's return
    // and its outcome's write.
    try {
      await this.#cache.withLock(t, (t) => this.#finishAttempt(t, active, outcome));
    } catch (err) {
      logFailure(this.#rt.log, 'finishing a turn failed', { taskId: t.id, turn: active.turn }, err);
    }
    this.#startWaiting();
  }

  /** Turns running in this engine now (an entry whose attempt ended, however, no longer counts). O(running). */
  running(): number {
    for (const t of this.#running) if (!t.active) this.#running.delete(t);
    this.#pruneAt = Math.max(PRUNE_MIN, 2 * this.#running.size);
    return this.#running.size + this.#starting;
  }

  /**
   * Every slot taken? Counts only when the entries held could reach the cap: counting at every
   * turn start was quadratic (recovering 10,000 long turns: 14% of the pass's samples).
   */
  #atCap(): boolean {
    const cap = this.#rt.maxRunningTurns;
    return this.#running.size + this.#starting >= cap && this.running() >= cap;
  }

  /** Tasks waiting for a slot. */
  get waiting(): number {
    return this.#waiting.size;
  }

  /** A slot may be free: drive waiting tasks, oldest first, while slots last. */
  #startWaiting(): void {
    if (!this.#rt.open || this.#waiting.size === 0) return;
    let free = this.#rt.maxRunningTurns - this.running();
    for (const id of this.#waiting) {
      if (free-- <= 0) return;
      this.#waiting.delete(id);
      void this.#cache
        .load(id)
        .then((t) => this.#cache.withLock(t, (t) => this.drive(t)))
        .catch((err) => logFailure(this.#rt.log, 'starting a queued turn failed', { taskId: id }, err))
        // It may not have needed the slot (another engine ran it): offer the slot on.
        .finally(() => this.#startWaiting());
    }
  }

  /** The attempt's host: one object (attempt-host below), not a dozen closures and a record env a call. */
  #host(t: TaskEntry, active: ActiveAttempt): TurnHost {
    return new AttemptHost(this.#hostDeps, t, active);
  }

  /** A child record, made ready to append: the child created (start) or its outcome filled in (await). */
  async #prepareChild(taskId: string, active: ActiveAttempt, call: CallRecords['child'], check: () => void): Promise<CallRecords['child']> {
    check();
    if (!this.#children) throw new TurnlogError('TURNLOG_INVALID_ARGUMENT', `Task ${taskId}: this host runs no child tasks.`);
    if (call.op === 'start') {
      await this.#children.start({ taskId, turn: active.turn, seq: call.seq, detached: call.detached }, call.childId, call.workflow, call.input);
      return call;
    }
    const outcome = await this.#children.outcome(call.childId, (active.stop ??= new AbortController()).signal);
    return { ...call, outcome };
  }

  async #finishAttempt(t: LockedTask, active: ActiveAttempt, outcome: AttemptOutcome): Promise<void> {
    // The attempt's timers are cancelled once the outcome's write is handed to the store (the
    // append's `ahead`), so the write goes out first; nothing runs a timer in between (one
    // synchronous run). Every other way out cancels them too.
    const stopTimers = (): void => {
      for (const tm of active.timers) tm.cancel();
      active.timers.length = 0;
    };
    // A child wait of this attempt stops with it (its record would be fenced anyway).
    active.stop?.abort(new FencedError(t.id, active.turn, active.attempt, 'the attempt ended'));
    releaseGrants(active); // a crashed or killed worker's steps never sent their records
    noteAttemptEnded(this.#rt, t.id, active, outcome);
    if (t.active !== active || active.finalized) {
      stopTimers();
      this.#rt.log.debug?.('late outcome discarded', { taskId: t.id, turn: active.turn, outcome: outcome.kind });
      return;
    }
    t.active = undefined;
    const ended = withinLimits(this.#rt.limits, t.id, active, outcome);
    const build = (s: TaskState) => outcomeDrafts(s, active, ended, t.lease, this.#rt.clock.now(), this.#rt.encodesFailureText);
    let s = t.state!;
    let drafts: Draft[];
    try {
      for (let races = 0; ; races++) {
        const built = build(s);
        drafts = built.drafts;
        try {
          await this.#appender.append(t, drafts, built.lease, undefined, stopTimers);
          break;
        } catch (err) {
          // Another writer appended under our generation (a withdraw or a send on a shared store) and
          // the re-read history still has this attempt's turn open: its outcome goes on top instead of
          // being lost. When the history shows the turn ended elsewhere, decide again from there.
          if (!isTurnlogError(err, 'TURNLOG_CONCURRENCY') || races >= MAX_RACES) throw err;
          if (!stillOurs(t, active, err)) return this.drive(t);
          s = t.state!;
        }
      }
    } finally {
      stopTimers();
    }
    // A completed task decides nothing (decision rule 1): no drive, and a one-shot's result
    // reaches its caller without the drive's promises before it.
    if (t.state?.status !== 'completed') await this.drive(t);
  }

  /**
   * The lease that can block a re-run (decision rule 3): another instance's, on a shared store.
   * An exclusive store proved every other instance dead, so none blocks there.
   */
  #foreignLease(t: TaskEntry): Lease | undefined {
    if (this.#rt.store.exclusive || !t.lease || t.lease.instance === this.#rt.instance) return undefined;
    return this.storeClock.onEngineClock(t.lease);
  }

  /** Another instance's lease that is still live: a turn start here would be LeaseHeldError. */
  #liveForeignLease(t: TaskEntry): Lease | undefined {
    const l = this.#foreignLease(t);
    return isLeaseLive(l, this.#rt.clock.now()) ? l : undefined;
  }

  #executorFor(kind: ExecutorKind): Executor {
    const ex = this.#executors.get(kind);
    if (!ex) {
      throw new TurnlogError('TURNLOG_INVALID_ARGUMENT', `No ${kind} executor is configured. Pass Engine.open({ executors: { ${kind}: ... } }) or set the workflow's executor to 'inline'.`);
    }
    return ex;
  }
}

/** An attempt built while its turn start is written (Driver#startAttempt). */
interface Ahead {
  active: ActiveAttempt;
  spec: TurnSpec;
  host: TurnHost;
}

function releaseGrants(active: ActiveAttempt): void {
  active.grantsReleased = true;
  for (const g of active.grants?.values() ?? []) g.release();
  active.grants?.clear();
}
