/**
 * The appender: numbers, stamps, encodes (codecs) and checks drafts, validates them by folding,
 * appends them with the lease's fencing, keeps the cached state, logs outcomes and writes
 * snapshots at their cadence. A stale generation is handed to `onStale` (the supervisor fences).
 * Every event written passes here, so here the observation seam (observe.ts) is told.
 */
import { isTurnlogError, type StaleGenerationError } from '../errors.js';
import { isTurnTerminal, type HistoryEvent, type Lease } from '../history/events.js';
import type { TaskState } from '../history/state.js';
import { encodeState } from '../history/state-codec.js';
import { withStateDelta } from '../history/state-delta.js';
import { wellFormedEvent } from '../history/well-formed.js';
import { compaction, fold } from '../replay/index.js';
import type { Logger } from '../logger.js';
import type { AppendOptions } from '../store/history-store.js';
import type { Draft } from './drafts.js';
import type { FaultInjector } from './fault.js';
import { outcomeLogLines } from './outcome-log.js';
import type { Runtime } from './runtime.js';
import type { LockedTask, TaskCache, TaskEntry } from './task-cache.js';

/** A snapshot at most this large is "small": written 4× as often (see {@link snapshotDue}). */
export const SMALL_SNAPSHOT_BYTES = 4_096;

/**
 * Whether a task `since` events past its last snapshot writes one now: every `every` events, and
 * every `floor(every / 4)` (at least 1) once its last snapshot (`lastBytes`) is known to be small. A recovered tail
 * costs ~5 us an event to read, decode and fold, against ~0.1-0.2 ms to encode a 1 KB state:
 * small states buy a 4× shorter tail for ≤ 16 bytes an event (docs/decisions.md#snapshot-cadence).
 * The first snapshot comes at `every`, where the old cadence put it; a large state keeps every old
 * position, a small one only while each append is one event (test: runtime/snapshot-cadence-positions).
 */
export function snapshotDue(since: number, lastBytes: number | undefined, every: number): boolean {
  if (since >= every) return true;
  return lastBytes !== undefined && lastBytes <= SMALL_SNAPSHOT_BYTES && since >= Math.max(1, Math.floor(every / 4));
}

export class Appender {
  readonly #rt: Runtime;
  readonly #cache: TaskCache;
  readonly #fault: FaultInjector | undefined;
  readonly #onStale: (t: LockedTask, err: StaleGenerationError) => void;
  readonly #onRefreshed: OnRefreshed;
  /** Tasks being compacted now. */
  readonly #compacting = new Set<string>();

  /** `onRefreshed` sees what another writer appended, after a ConcurrencyError's re-read (the supervisor reacts). */
  constructor(rt: Runtime, cache: TaskCache, fault: FaultInjector | undefined, onStale: (t: LockedTask, err: StaleGenerationError) => void, onRefreshed: OnRefreshed) {
    this.#rt = rt;
    this.#cache = cache;
    this.#fault = fault;
    this.#onStale = onStale;
    this.#onRefreshed = onRefreshed;
  }

  /**
   * Numbers drafts into events. Drafts are fresh object literals, so they are stamped in place
   * (~0.1 µs): a spread costs ~7 µs over 19 event shapes, and stamping a spread's copy ~10 µs
   * (each added property a new map, Recording.events in attempt/calls.ts).
   */
  #materialize(t: TaskEntry, drafts: Draft[], generation: number, time = this.#rt.clock.now()): HistoryEvent[] {
    let id = t.state?.lastEventId ?? 0;
    const enc = this.#rt.codec?.encodeEvent;
    const out: HistoryEvent[] = new Array(drafts.length);
    for (let i = 0; i < drafts.length; i++) {
      const e = drafts[i] as HistoryEvent;
      e.eventId = ++id;
      e.generation = generation;
      e.time = time;
      // Well-formed before folding: the state kept in memory is what a reload reads back.
      out[i] = wellFormedEvent(enc ? enc(e) : e, t.id);
      // A state delta is bytes of the stored previous state: without codecs only, so every
      // reader that decodes payloads one event at a time still sees full states.
      if (!enc && (e.type === 'TurnCompleted' || e.type === 'TurnSuspended' || e.type === 'StateMigrated') && e.state !== undefined) {
        out[i] = withStateDelta(i === 0 ? t.state : fold(t.id, out.slice(0, i), t.state), out[i]!);
      }
    }
    return out;
  }

  /** The generation this engine writes under: its own lease's, never below the history's highest. */
  generation(t: TaskEntry): number {
    // An operator engine (openForOperator) writes under whoever holds the task: it never claims.
    const own = t.lease && (this.#rt.operatorOnly || t.lease.instance === this.#rt.instance) ? t.lease.generation : 0;
    return Math.max(own, t.state?.highestGeneration ?? 0);
  }

  /** The state `drafts` would fold to, without writing (the driver decides on it). */
  preview(t: TaskEntry, drafts: Draft[]): TaskState {
    return fold(t.id, this.#materialize(t, drafts, this.generation(t)), t.state);
  }

  /**
   * Validates by folding first (an invalid batch throws before anything is written), then writes.
   * `ahead` is called with the state the append leaves once the write is handed to the store and
   * before it is durable: work that needs only that state overlaps the write (a turn start's
   * attempt, driver.ts). It must not throw, and what it does must be undone if the append fails.
   * A promise chain, not an async function: one promise an append where the async function and
   * its await made two (each runs the step scope's async hooks; a step's record comes here).
   */
  append(t: LockedTask, drafts: Draft[], lease?: Lease, time?: number, ahead?: (next: TaskState) => void): Promise<void> {
    if (drafts.length === 0) return Promise.resolve();
    let events: HistoryEvent[];
    let next: TaskState;
    let expectedLastEventId: number;
    let written: Promise<unknown>;
    let started: number;
    try {
      const generation = lease ? lease.generation : this.generation(t);
      events = this.#materialize(t, drafts, generation, time);
      next = fold(t.id, events, t.state);
      expectedLastEventId = t.state?.lastEventId ?? 0;
      const options: AppendOptions = lease ? { expectedLastEventId, generation, lease } : { expectedLastEventId, generation };
      if (t.fresh && expectedLastEventId === 0) options.fresh = true;
      started = performance.now();
      written = this.#rt.store.append(t.id, events, options);
      ahead?.(next);
    } catch (err) {
      return Promise.reject(err);
    }
    return written.then(
      () => this.#appended(t, events, next, lease, started),
      (err: unknown) => {
        // A create refused as stale is a lost race, not a fence (TaskCache.mutate reloads and decides
        // again): drop the entry without the supervisor's "task fenced" warning.
        if (isStale(err) && expectedLastEventId === 0 && t.state === undefined) this.#cache.forget(t);
        else if (isStale(err)) this.#onStale(t, err);
        else if (isTurnlogError(err, 'TURNLOG_CONCURRENCY')) {
          return this.#refresh(t, err).then(() => {
            throw err;
          });
        }
        throw err;
      },
    );
  }

  /** After a durable append: the cached state, outcome logs, observers, compaction and snapshot. */
  #appended(t: LockedTask, events: HistoryEvent[], next: TaskState, lease: Lease | undefined, started: number): void {
    const before = t.state;
    t.state = next;
    t.fresh = false;
    if (lease) t.lease = lease;
    for (const e of events) if (isTurnTerminal(e)) t.lastTerminal = e;
    for (const l of outcomeLogLines(t.id, before, events)) this.#rt.log[l.level](l.message, l.fields);
    this.#rt.observers.appended(t, before, events, 'engine', performance.now() - started);
    this.#fault?.afterAppend();
    const keep = this.#rt.workflows.get(next.workflow)?.compaction?.keepTurns;
    if (keep !== undefined && next.openTurn === undefined && events.some(isTurnTerminal)) void this.#compact(t, keep);
    if (snapshotDue(next.lastEventId - t.snapshotAt, t.snapshotBytes, this.#rt.snapshotEvery)) {
      t.snapshotAt = next.lastEventId;
      const data = encodeState(next);
      t.snapshotBytes = data.length;
      this.#rt.store
        .putSnapshot(t.id, { eventId: next.lastEventId, data })
        .catch((err) => this.#rt.log.warn('snapshot write failed', { taskId: t.id, error: err }));
    }
  }

  /**
   * Opt-in compaction, in the background after a turn ends (one at a time per task). The
   * snapshot goes first: a reload must never read a snapshot older than the cut, whose tail
   * would start after a gap (test: runtime/engine-compaction).
   */
  async #compact(t: TaskEntry, keepTurns: number): Promise<void> {
    const store = this.#rt.store;
    if (!store.compactHistory || this.#compacting.has(t.id)) return;
    this.#compacting.add(t.id);
    try {
      const s = t.state!;
      const c = compaction(t.id, await store.readEvents(t.id, { toEventId: s.lastEventId }), keepTurns);
      if (c === undefined) return;
      const data = encodeState(s);
      await store.putSnapshot(t.id, { eventId: s.lastEventId, data });
      if (s.lastEventId > t.snapshotAt) [t.snapshotAt, t.snapshotBytes] = [s.lastEventId, data.length];
      await store.compactHistory(t.id, c);
      this.#rt.log.info('history compacted', { taskId: t.id, turns: c.turns, throughEventId: c.throughEventId });
    } catch (err) {
      this.#rt.log.warn('compaction failed; the history is unchanged', { taskId: t.id, error: err });
    } finally {
      this.#compacting.delete(t.id);
    }
  }

  /**
   * A ConcurrencyError: someone else appended under our generation, so the cached state is
   * behind. Re-read the tail so the next call decides on the real history instead of failing
   * again forever. An API call is not retried (decided on stale state); a running attempt's
   * record or end is, by its caller (driver.ts `stillOurs`), while the turn is still that attempt's.
   */
  async #refresh(t: TaskEntry, err: unknown): Promise<void> {
    this.#rt.log.warn('append lost a race with another writer; re-reading the history', { taskId: t.id, code: 'TURNLOG_CONCURRENCY', error: err });
    await this.refresh(t);
  }

  /**
   * Re-reads what other writers appended since the cached state (and the lease), folds it and
   * hands it to `onRefreshed`. Also called when a shared store notifies an append (watcher.ts).
   * Returns the events read; on a read failure the entry is dropped (unless running) and [] returned.
   */
  async refresh(t: TaskEntry): Promise<readonly HistoryEvent[]> {
    try {
      const before = t.state;
      const events = await this.#rt.store.readEvents(t.id, { fromEventId: (t.state?.lastEventId ?? 0) + 1 });
      if (events.length) t.state = fold(t.id, events, t.state);
      t.lease = await this.#rt.store.getLease(t.id);
      for (const e of events) if (isTurnTerminal(e)) t.lastTerminal = e;
      this.#onRefreshed(t, before, events);
      if (events.length) this.#rt.observers.appended(t, before, events, 'other-writer');
      return events;
    } catch (e) {
      this.#rt.log.error('re-reading the history failed; dropping the cached task', { taskId: t.id, error: e });
      if (!t.active) this.#cache.forget(t);
      return [];
    }
  }
}

/** Called with the state before a re-read and the events another writer appended meanwhile. */
export type OnRefreshed = (t: TaskEntry, before: TaskState | undefined, events: readonly HistoryEvent[]) => void;

/** Any store's fencing rejection (by code, so a third-party store's error counts too). */
export function isStale(err: unknown): err is StaleGenerationError {
  return isTurnlogError(err, 'TURNLOG_STALE_GENERATION');
}

/** Logs a background failure; a fenced task was logged once already by the supervisor's fence. */
export function logFailure(log: Logger, message: string, fields: Record<string, unknown>, err: unknown): void {
  if (!isStale(err)) log.error(message, { ...fields, error: err });
}
