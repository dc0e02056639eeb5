/**
 * The recovery decision table (DESIGN.md "Recovery decisions", docs/recovery.md): a pure,
 * total function of (state, lease, now, policy). Rules are evaluated in order; the first
 * that matches names itself in `rule` and explains itself, with numbers, in `reason`.
 */
import type { Lease, TaskOutcome, TurnPolicy } from '../history/events.js';
import type { OpenTurn, TaskState } from '../history/state.js';
import type { Decision } from './decision.js';

/** Formats an epoch-millisecond time for reasons: ISO when representable, else the number. */
export function formatTime(ms: number): string {
  // Date's range is ±8.64e15 ms; Infinity (no deadline) and NaN must not throw.
  if (!Number.isFinite(ms) || Math.abs(ms) > 8.64e15) return String(ms);
  return `${new Date(ms).toISOString()} (${ms})`;
}

/**
 * What the engine must do next with a task.
 *
 * `lease` is the lease that could block recovery: pass `undefined` when no live foreign owner
 * can exist (for example right after opening the store, which voids every earlier lease).
 * `policy` defaults to the one recorded in `TaskCreated`. Same inputs, same decision, always.
 *
 * @example
 * const d = decide(fold(id, events), await store.lease(id), clock.now());
 * if (d.kind === 'rerun') engine.runAttempt(id, d.turn, d.attempt);
 */
export function decide(state: TaskState, lease: Lease | undefined, now: number, policy: TurnPolicy = state.policy): Decision {
  // 1. completed
  if (state.status === 'completed') {
    return { kind: 'none', rule: 'completed', reason: `task completed with outcome ${state.outcome ?? 'unknown'}; nothing to do` };
  }

  const t = state.openTurn;
  const oneShot = state.kind === 'one-shot';

  // 2. cancel requested
  if (t === undefined && state.cancelRequested?.scope === 'task') {
    const c = state.cancelRequested;
    return {
      kind: 'complete-task',
      rule: 'cancel-requested',
      outcome: 'cancelled',
      reason: `task cancel requested at event ${c.eventId} (${c.reason || 'no reason given'}) and no turn is open`,
    };
  }
  if (t?.cancelRequested !== undefined) {
    const c = t.cancelRequested;
    return finalize(t, {
      rule: 'cancel-requested',
      terminal: 'TurnCancelled',
      outcome: oneShot || c.scope === 'task' ? 'cancelled' : undefined,
      reason: `${c.scope} cancel requested at event ${c.eventId} (${c.reason || 'no reason given'}) for open turn ${t.turn}`,
    });
  }

  if (t !== undefined) {
    // 3. owned by a live lease
    if (t.attemptRunning && lease !== undefined && lease.expiresAt > now) {
      return {
        kind: 'none',
        rule: 'owned',
        reason: `turn ${t.turn} attempt ${t.attempt} is running under ${lease.owner} (${lease.instance}) generation ${lease.generation}, lease live until ${formatTime(lease.expiresAt)} > now ${formatTime(now)}`,
      };
    }
    // Facts copied now, formatted when read: a re-run's reason is read by explain and timelines,
    // never by the engine's recovery (its four Date formats were ~2% of a 10,000-task pass).
    const dead = deadFacts(t, lease);
    const why = (): string => deadWhy(dead, now);
    // 4. open turn, nobody running it
    if (t.marker !== undefined) {
      return finalize(t, {
        rule: 'marker',
        terminal: 'TurnTimedOut',
        cause: 'recovery_marker',
        outcome: oneShot ? 'timed_out' : undefined,
        reason: `${why()}; timeout marker at event ${t.marker.eventId} (cancel sent ${formatTime(t.marker.at)}), so turn ${t.turn} is finalized, never re-run`,
      });
    }
    if (now >= t.deadline) {
      return finalize(t, {
        rule: 'backstop',
        terminal: 'TurnTimedOut',
        cause: 'recovery_backstop',
        outcome: oneShot ? 'timed_out' : undefined,
        reason: `${why()}; deadline ${formatTime(t.deadline)} passed at now ${formatTime(now)} (turn started ${formatTime(t.turnStartedAt)})`,
      });
    }
    if (t.workerCrashes > policy.maxWorkerCrashes) {
      return finalize(t, {
        rule: 'worker-crashes-exhausted',
        terminal: 'TurnFailed',
        outcome: oneShot ? 'failed' : undefined,
        reason: `${why()}; ${t.workerCrashes} worker crashes exceed maxWorkerCrashes ${policy.maxWorkerCrashes}`,
      });
    }
    if (t.attempt > policy.maxRecoveries) {
      return finalize(t, {
        rule: 'recoveries-exhausted',
        terminal: 'TurnFailed',
        outcome: oneShot ? 'failed' : undefined,
        reason: `${why()}; attempt ${t.attempt} used ${t.attempt - 1} of maxRecoveries ${policy.maxRecoveries}, none left`,
      });
    }
    return new Rerun(t.turn, dead, t.deadline, now, t.calls.length);
  }

  // 5. no open turn, queued input (a one-shot runs exactly one turn); a scheduled input counts
  // once its deliverAt has passed (rule timer-due), else the task waits for it (waiting-for-timer)
  const head = state.queue.find((q) => isDue(q, now));
  if (head !== undefined && !(oneShot && state.turn > 0)) {
    const entryMode = state.turn === 0 ? 'fresh' : 'resumed';
    const start = `start turn ${state.turn + 1} (${entryMode}) with ${head.inputId}${head.steering ? ' (steering)' : ''}`;
    return {
      kind: 'start-turn',
      rule: head.deliverAt === undefined ? 'queued-input' : 'timer-due',
      turn: state.turn + 1,
      inputIds: [head.inputId],
      entryMode,
      steered: head.steering,
      reason:
        head.deliverAt === undefined
          ? `no open turn and ${state.queue.length} queued input(s); ${start}`
          : `no open turn; scheduled input ${head.inputId} was due at ${formatTime(head.deliverAt)} <= now ${formatTime(now)}; ${start}`,
    };
  }
  const wakeAt = nextWakeAt(state);
  if (wakeAt !== undefined && !(oneShot && state.turn > 0)) {
    const next = state.queue.find((q) => q.deliverAt === wakeAt)!;
    return {
      kind: 'none',
      rule: 'waiting-for-timer',
      wakeAt,
      reason: `no open turn; scheduled input ${next.inputId} is due at ${formatTime(wakeAt)} > now ${formatTime(now)} (in ${Math.ceil((wakeAt - now) / 1000)} s); the engine wakes the task then`,
    };
  }

  // 6. nothing to do
  if (state.turn === 0) {
    return { kind: 'none', rule: 'pending', reason: 'no turn has started and no input is queued' };
  }
  const last = state.lastTurn;
  const ended = last ? `turn ${last.turn} ended with ${last.terminal} at event ${last.eventId}` : `turn ${state.turn} ended`;
  return {
    kind: 'none',
    rule: 'suspended',
    reason: oneShot
      ? `one-shot ${ended}; waiting for its TaskCompleted, no further turn will run`
      : `${ended}; no input is queued, waiting for one`,
  };
}

/** An input a turn (or takeInputs) may take at `now`: not scheduled, or its deliverAt has passed. */
export function isDue(q: { deliverAt?: number | undefined }, now: number): boolean {
  return q.deliverAt === undefined || q.deliverAt <= now;
}

/** The earliest deliverAt among the task's scheduled inputs, if it has any. */
export function nextWakeAt(state: TaskState): number | undefined {
  let at: number | undefined;
  for (const q of state.queue) if (q.deliverAt !== undefined && (at === undefined || q.deliverAt < at)) at = q.deliverAt;
  return at;
}

/**
 * The re-run decision (rule `recover`), its reason formatted when read. As an object literal with
 * a getter (a closure of its own each time) every decision was a dictionary-mode object with a
 * normalized map of its own, ~850 bytes a recovered task (heap profile of recovering 10,000
 * tasks, docs/performance.md). Here every one has the same hidden class: `reason` is still an
 * own enumerable accessor (spread, JSON, structuredClone and equality see it as before), defined
 * with one getter shared by all, which reads the facts from private fields.
 */
class Rerun {
  readonly kind = 'rerun';
  readonly rule = 'recover';
  readonly turn: number;
  readonly attempt: number;
  declare readonly reason: string;
  readonly #dead: DeadFacts;
  readonly #deadline: number;
  readonly #now: number;
  readonly #calls: number;

  constructor(turn: number, dead: DeadFacts, deadline: number, now: number, calls: number) {
    this.turn = turn;
    this.attempt = dead.attempt + 1;
    this.#dead = dead;
    this.#deadline = deadline;
    this.#now = now;
    this.#calls = calls;
    Object.defineProperty(this, 'reason', REASON);
  }

  static reason(r: Rerun): string {
    const now = r.#now;
    return `${deadWhy(r.#dead, now)}; deadline ${formatTime(r.#deadline)} not reached at now ${formatTime(now)}; re-run as attempt ${r.attempt} replaying ${r.#calls} recorded call(s)`;
  }
}

/** The accessor every {@link Rerun} gets (one getter: one hidden class). */
const REASON: PropertyDescriptor = {
  get(this: Rerun): string {
    return Rerun.reason(this);
  },
  enumerable: true,
  configurable: true,
};

/** What deadWhy says about an open turn nobody runs, copied when decided (the state and lease may change after). */
interface DeadFacts {
  turn: number;
  attempt: number;
  attemptRunning: boolean;
  workerCrashes: number;
  lease: Pick<Lease, 'owner' | 'instance' | 'expiresAt'> | undefined;
}

function deadFacts(t: OpenTurn, lease: Lease | undefined): DeadFacts {
  return {
    turn: t.turn,
    attempt: t.attempt,
    attemptRunning: t.attemptRunning,
    workerCrashes: t.workerCrashes,
    lease: lease && { owner: lease.owner, instance: lease.instance, expiresAt: lease.expiresAt },
  };
}

function deadWhy(t: DeadFacts, now: number): string {
  const attempt = `turn ${t.turn} attempt ${t.attempt}`;
  const lease = t.lease;
  if (!t.attemptRunning) return `${attempt} ended without a terminal${t.workerCrashes > 0 ? ` (${t.workerCrashes} worker crash(es))` : ''}`;
  if (lease === undefined) return `${attempt} has no live owner`;
  return `${attempt}: lease of ${lease.owner} (${lease.instance}) expired at ${formatTime(lease.expiresAt)} <= now ${formatTime(now)}`;
}

function finalize(
  t: OpenTurn,
  d: {
    rule: Extract<Decision, { kind: 'finalize-turn' }>['rule'];
    terminal: 'TurnCancelled' | 'TurnTimedOut' | 'TurnFailed';
    cause?: 'recovery_marker' | 'recovery_backstop';
    outcome: TaskOutcome | undefined;
    reason: string;
  },
): Decision {
  const out: Extract<Decision, { kind: 'finalize-turn' }> = {
    kind: 'finalize-turn',
    rule: d.rule,
    turn: t.turn,
    terminal: d.terminal,
    reason: d.reason,
  };
  if (d.cause !== undefined) out.cause = d.cause;
  if (d.outcome !== undefined) out.completeTask = d.outcome;
  return out;
}
