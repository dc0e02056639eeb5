/**
 * The task cache: loads tasks (snapshot + tail), pins and evicts them, isolates corrupt ones,
 * and alone owns the per-task lock. Mutations take a {@link LockedTask}, which only
 * {@link TaskCache.withLock} hands out.
 */
import { HistoryCorruptError, isHistoryUnreadable as isUnreadable, isTurnlogError, type PayloadTooLargeError } from '../errors.js';
import type { HistoryEvent, Lease, TurnTerminalEvent } from '../history/events.js';
import type { TaskState } from '../history/state.js';
import { decodeState } from '../history/state-codec.js';
import { FOLD_PAGE, fold } from '../replay/index.js';
import type { CorruptMark, StoredSnapshot } from '../store/history-store.js';
import type { AttemptHandle } from '../executor/executor.js';
import type { CancelKind } from '../attempt/host.js';
import type { TurnResult } from '../client/task-client.js';
import type { Timer } from './clock.js';
import type { LimitGrant } from './limits.js';
import type { Runtime } from './runtime.js';

export interface Deferred<T> {
  resolve(v: T): void;
  reject(e: unknown): void;
}

/** An attempt this engine runs now: its worker handle, timers and how it must end. */
export interface ActiveAttempt {
  turn: number;
  attempt: number;
  handle?: AttemptHandle;
  /** Set once the engine ended the turn itself (hard cap, shutdown): the late outcome is discarded. */
  finalized: boolean;
  /** Why the engine killed the worker, when it did. */
  killReason?: 'timeout' | 'cancel';
  /** A cancel that arrived before the handle existed. */
  pendingCancel?: [CancelKind, string];
  /** An oversized checkpoint was refused: every later record fails, and so does the turn. */
  refused?: PayloadTooLargeError;
  timers: Timer[];
  /** Flow-limit slots held by this attempt's steps, by seq: released on the step's record or the attempt's end. */
  grants?: Map<number, LimitGrant>;
  /** The attempt ended: a grant that arrives later is released at once. */
  grantsReleased?: boolean;
  renewFailures: number;
  /** Shared stores: when the request that got the current lease was sent (the engine's clock). */
  leaseFrom?: number;
  /** Observers were told this attempt ended (once, by whoever ended it first). */
  endNoted?: boolean;
  /** Aborted when the attempt ends: stops its wait for a child (created by the first wait). */
  stop?: AbortController;
  done: Promise<void>;
}

/** What a paged load found where it expected the next event (TaskCache#foldStored). */
class Moved {
  constructor(
    readonly found: number,
    /** In the first page: the snapshot is behind the stored history. */
    readonly first: boolean,
  ) {}
}

const UNLOCKED: Promise<unknown> = Promise.resolve();
/** The chain while {@link TaskCache.withLockNow} runs its `fn`'s synchronous part. */
const SYNC_HOLD: Promise<unknown> = Promise.resolve();

/**
 * Makes `run` the lock's tail. The next holder waits on the release, which never rejects; it is
 * `run`'s first reaction, so the count drops before the caller resumes. Two promises a hold, where
 * `.finally` and a `.catch` made five (every promise costs the async hooks the step scope turns
 * on). The last hold's release frees the lock for {@link TaskCache.withLockNow}'s fast path.
 */
function release<T>(t: TaskEntry, run: Promise<T>): Promise<T> {
  const free = (): void => {
    t.busy--;
    if (t.chain === released) t.chain = UNLOCKED;
  };
  const released: Promise<unknown> = run.then(free, free);
  t.chain = released;
  return run;
}

/** One task as this engine holds it: folded state, lease, lock chain, running attempt, waiters. */
/** A map that stays empty: its `set` throws (an engine bug: entries get their own map first). */
class EmptyMap<K, V> extends Map<K, V> {
  override set(): this {
    throw new Error('turnlog engine bug: an entry wrote to the shared empty map (use its own map)');
  }
}
/** The shared empty `waiters` and `recent` of task entries. */
const NO_ENTRIES: Map<any, any> = new EmptyMap();

export class TaskEntry {
  state: TaskState | undefined;
  lease: Lease | undefined;
  /** The lock's tail; one settled promise shared by every entry until its first hold. */
  chain: Promise<unknown> = UNLOCKED;
  /** Operations queued on or holding the lock; a busy entry is never evicted. */
  busy = 0;
  active: ActiveAttempt | undefined;
  // The two maps below start as one shared empty map each (NO_ENTRIES: reads and deletes only)
  // and get their own at their first entry (results.ts): most entries never have a waiter, and a
  // recovered one-step task kept two empty maps (heap snapshot after recovering 10,000 tasks:
  // 20,053 Maps; docs/performance.md).
  /** Waiters for the turn that takes each input (by input id); its own map from the first (addWaiter). */
  waiters: Map<string, Deferred<TurnResult>[]> = NO_ENTRIES;
  /** Waiters for the end of the next turn, whatever input it takes (handles without an input id). */
  turnWaiters: Deferred<TurnResult>[] = [];
  snapshotAt = 0;
  /** The size of the snapshot at `snapshotAt` (read or written), when known: sets the cadence (snapshotDue). */
  snapshotBytes: number | undefined;
  /** The last turn terminal event appended by this engine (waiters' results are built from it). */
  lastTerminal: TurnTerminalEvent | undefined;
  /** Results of recently finished inputs, so `nextTurn()` after the fact needs no history scan. */
  recent: Map<string, TurnResult> = NO_ENTRIES;
  /** The result of the last turn this engine saw end. */
  lastResult: TurnResult | undefined;
  /** Set when the scanner claimed this orphan: the dead lease it replaced (for LeaseClaimed). */
  claim: { previous: Lease | undefined } | undefined;
  /** Named by this engine with a fresh random id and not appended yet: its first append tells the store (AppendOptions.fresh). */
  fresh = false;
  constructor(readonly id: string) {}
}


/** How many lost races in a row one mutation survives before its ConcurrencyError reaches the caller. */
export const MAX_RACES = 8;

declare const lockedBrand: unique symbol;
/** A task whose lock the holder has: the only kind that appends, drives or finishes attempts. */
export type LockedTask = TaskEntry & { readonly [lockedBrand]: true };

export class TaskCache {
  readonly #rt: Runtime;
  readonly #tasks = new Map<string, TaskEntry>();
  readonly #loading = new Map<string, Promise<TaskEntry>>();
  /** Tasks whose stored records cannot be read, isolated so every other task is served. */
  readonly #corrupt = new Map<string, CorruptMark>();

  constructor(rt: Runtime) {
    this.#rt = rt;
  }

  /** The cached entry, if any (no load, no pin). */
  get(taskId: string): TaskEntry | undefined {
    return this.#tasks.get(taskId);
  }

  /** The load of `taskId` in flight, if any. */
  loading(taskId: string): Promise<TaskEntry> | undefined {
    return this.#loading.get(taskId);
  }

  /** Every cached entry. */
  entries(): IterableIterator<TaskEntry> {
    return this.#tasks.values();
  }

  /** Drops `t` if it is still the cached entry for its task (a fresh load re-reads the history). */
  forget(t: TaskEntry): void {
    if (this.#tasks.get(t.id) === t) this.#tasks.delete(t.id);
  }

  /** Drops a task's entry unless someone waits on it (retention deleted its history). */
  forgetIdle(taskId: string): void {
    const t = this.#tasks.get(taskId);
    if (t && t.waiters.size === 0 && t.turnWaiters.length === 0) this.#tasks.delete(taskId);
  }

  corruptMark(taskId: string): CorruptMark | undefined {
    return this.#corrupt.get(taskId);
  }

  /** Records a task as isolated (at activation, from the store's marks). */
  markCorrupt(mark: CorruptMark): void {
    this.#corrupt.set(mark.taskId, mark);
  }

  /** The next activation may see another store or session: forget everything cached. */
  clear(): void {
    this.#tasks.clear();
    this.#corrupt.clear();
  }

  /**
   * The cached entry, pinned as {@link load} pins it, or undefined (then `load`): a caller that
   * takes it awaits nothing (two promises and a tick less a send or a result wait).
   */
  cached(taskId: string): TaskEntry | undefined {
    const cached = this.#tasks.get(taskId);
    return cached && this.#pin(this.#touch(cached));
  }

  /**
   * The task's entry, loaded from the store on first use. The entry is pinned until the next
   * macrotask: its caller's continuation (microtasks) takes the lock or registers a waiter
   * first, so another task's load cannot evict it in between (test: runtime/engine-races).
   */
  load(taskId: string): Promise<TaskEntry> {
    // Not async: an async function resolved with the load's promise adds two promises and two ticks.
    const cached = this.#tasks.get(taskId);
    if (cached) return Promise.resolve(this.#pin(this.#touch(cached)));
    const mark = this.#corrupt.get(taskId);
    if (mark) return Promise.reject(corruptError(mark));
    return this.#loadEntry(taskId);
  }

  /**
   * The entry of a task this engine has just named with a fresh random id (`engine.start`
   * without a taskId): nothing can be stored under it, so nothing is read, and its first append
   * tells the store so (AppendOptions.fresh), which then reads nothing either (docs/decisions.md).
   * Saves every read of a new task (profiles: store reads were a third of the CPU of new tasks).
   * Undefined when this engine already knows the id: load() it then.
   */
  createNew(taskId: string): TaskEntry | undefined {
    if (this.#tasks.has(taskId) || this.#loading.has(taskId) || this.#corrupt.has(taskId)) return undefined; // then load()
    const t = new TaskEntry(taskId);
    t.fresh = true;
    this.#evictIdle();
    this.#tasks.set(taskId, t);
    return this.#pin(t);
  }

  /** Moves `t` to the end of the Map, so eviction walks entries from the least recently used. */
  #touch(t: TaskEntry): TaskEntry {
    this.#tasks.delete(t.id);
    this.#tasks.set(t.id, t);
    return t;
  }

  #pin(t: TaskEntry): TaskEntry {
    t.busy++;
    // One immediate unpins every entry pinned since the last: Node runs microtasks between
    // immediates, so each pinning caller's continuation has run by then, as with one each
    // (recovering 10,000 tasks made 10,000 immediates).
    if (this.#pinned.push(t) === 1) setImmediate(this.#unpin);
    return t;
  }

  /** Entries pinned since the last unpin. */
  #pinned: TaskEntry[] = [];
  readonly #unpin = (): void => {
    const pinned = this.#pinned;
    this.#pinned = [];
    for (const t of pinned) t.busy--;
  };

  #loadEntry(taskId: string): Promise<TaskEntry> {
    let loading = this.#loading.get(taskId);
    if (!loading) {
      loading = this.#read(taskId).then(
        (t) => {
          this.#loading.delete(taskId);
          return t;
        },
        (err: unknown) => {
          this.#loading.delete(taskId);
          throw err;
        },
      );
      this.#loading.set(taskId, loading);
    }
    return loading;
  }

  /** Reads a task's entry from the store and caches it, pinned ({@link load}). */
  async #read(taskId: string): Promise<TaskEntry> {
    const t = new TaskEntry(taskId);
    const store = this.#rt.store;
    // Snapshot, first page and lease in one read where the store has it (PostgreSQL: one round
    // trip, not three). Any failure takes the three reads below, which decide as before what
    // is unreadable (a snapshot: skipped; events: isolated).
    const start = store.readTaskStart ? await store.readTaskStart(taskId, FOLD_PAGE).catch(() => undefined) : undefined;
    // A snapshot is only a shortcut: an unreadable one means folding the whole history.
    const snap = start
      ? start.snapshot
      : await store.getSnapshot(taskId).catch((err: unknown) => {
          this.#rt.log.warn('snapshot unreadable, folding the whole history', { taskId, error: err });
          return undefined;
        });
    let from: TaskState | undefined;
    if (snap) {
      try {
        from = this.#fromSnapshot(t, snap);
      } catch (err) {
        this.#rt.log.warn('snapshot unreadable, folding the whole history', { taskId, error: err });
      }
    }
    // The read's first page follows the stored snapshot: usable when the fold starts there.
    const first = start && (snap?.eventId ?? 0) === (from?.lastEventId ?? 0) ? start.events : undefined;
    try {
      let state = await this.#foldStored(taskId, from, first);
      // The read's lease stands when its page was the whole fold: never older than the events.
      const lease = first !== undefined && first.length < FOLD_PAGE && !(state instanceof Moved) ? start!.lease : null;
      if (state instanceof Moved) {
        // A snapshot behind a compaction cut (a late write: putSnapshot is not fenced) has no
        // tail that follows it; the shortcut is void, fold the whole history instead.
        if (state.first && from !== undefined) this.#rt.log.warn('snapshot is behind the stored history, folding the whole history', { taskId, snapshotAt: from.lastEventId, next: state.found });
        t.snapshotAt = 0;
        const events = await store.readEvents(taskId);
        state = events.length ? fold(taskId, events) : undefined;
      }
      t.state = state;
      t.lease = lease === null ? await store.getLease(taskId) : lease;
    } catch (err) {
      throw await this.isolate(taskId, err);
    }
    this.#evictIdle();
    this.#tasks.set(taskId, t);
    return this.#pin(t); // synchronously with the set: no other load can run in between
  }

  /** The state a stored snapshot holds (throws when unreadable), undefined when it cannot be used (a migration needs the whole history). */
  #fromSnapshot(t: TaskEntry, snap: StoredSnapshot): TaskState | undefined {
    const from = decodeState(snap.data);
    t.snapshotAt = snap.eventId;
    t.snapshotBytes = snap.data.length;
    // A snapshot from before state versions: a migration needs the version, fold it all.
    if (from.state !== undefined && from.stateVersion === undefined && this.#rt.workflows.get(from.workflow)?.migrateState) {
      t.snapshotAt = 0;
      return undefined;
    }
    return from;
  }

  /**
   * The task's entry without an await, pinned as {@link load} pins it: the cached one, or one
   * built from what the store read ahead (EventLog.takeTaskStart: the claim of a recovery page)
   * when that is the whole history after its snapshot. Undefined otherwise: then `load()`, which
   * reads and reports (logs, isolates) whatever this path could not use. Recovering a claimed
   * task this way saves ~9 promises and their ticks (docs/performance.md).
   */
  loadNow(taskId: string): TaskEntry | undefined {
    const cached = this.#tasks.get(taskId);
    if (cached) return this.#pin(this.#touch(cached));
    if (this.#corrupt.has(taskId) || this.#loading.has(taskId)) return undefined;
    const start = this.#rt.store.takeTaskStart?.(taskId, FOLD_PAGE);
    if (start === undefined) return undefined;
    const t = new TaskEntry(taskId);
    const page = start.events;
    let state: TaskState | undefined;
    try {
      const from = start.snapshot ? this.#fromSnapshot(t, start.snapshot) : undefined;
      // The page must follow a usable snapshot and end the history (a shorter page than asked).
      if ((start.snapshot?.eventId ?? 0) !== (from?.lastEventId ?? 0) || page.length >= FOLD_PAGE) return undefined;
      if (from !== undefined && page.length > 0 && page[0]!.eventId !== from.lastEventId + 1) return undefined;
      state = page.length > 0 ? fold(taskId, page, from) : from;
    } catch {
      return undefined;
    }
    t.state = state;
    t.lease = start.lease;
    this.#evictIdle();
    this.#tasks.set(taskId, t);
    return this.#pin(t);
  }

  /**
   * The stored history after `from` folded onto it, read and folded {@link FOLD_PAGE} events at a
   * time: a page's decoded events are garbage once folded, so a long history (no snapshot) is
   * collected young instead of promoted and compacted whole (bench/replay: decode + fold).
   * Returns {@link Moved} when another event than the next one came first (a compaction cut behind
   * `from`, or one between two pages): the caller folds the whole history in one read. `first`:
   * the first page, already read (EventLog.readTaskStart).
   */
  async #foldStored(taskId: string, from: TaskState | undefined, first?: HistoryEvent[]): Promise<TaskState | undefined | Moved> {
    let s = from;
    for (let page = first; ; page = undefined) {
      const next = (s?.lastEventId ?? 0) + 1;
      page ??= await this.#rt.store.readEvents(taskId, { fromEventId: next, limit: FOLD_PAGE });
      if (page.length === 0) return s;
      if (s !== undefined && page[0]!.eventId !== next) return new Moved(page[0]!.eventId, s === from);
      s = fold(taskId, page, s);
      if (page.length < FOLD_PAGE) return s;
    }
  }

  /**
   * Drops idle entries down to 90% of the bound: completed tasks first (they never run again),
   * then the least recently used. First in, first out dropped live conversations every ~9,000
   * new tasks, each reloaded whole on its next turn (docs/performance.md, "Spread between rounds").
   */
  #evictIdle(): void {
    if (this.#tasks.size < this.#rt.maxCached) return;
    const target = this.#rt.maxCached * 0.9;
    for (const completedOnly of [true, false]) {
      for (const [id, t] of this.#tasks) {
        if (this.#tasks.size < target) return;
        if (completedOnly && t.state?.status !== 'completed') continue;
        // A busy entry may be about to start a turn: evicting it would let a fresh entry
        // "recover" that turn while it runs (test: runtime/engine-races).
        if (!t.active && t.waiters.size === 0 && t.turnWaiters.length === 0 && t.busy === 0) this.#tasks.delete(id);
      }
    }
  }

  /**
   * A task whose stored records cannot be read is isolated: logged once (key and task), marked
   * in the store (its own records untouched) and refused from then on. Returns what to throw.
   */
  async isolate(taskId: string, err: unknown): Promise<unknown> {
    if (!isUnreadable(err)) return err;
    const key = err instanceof HistoryCorruptError ? err.key : `events/${taskId}/${(err as { eventId?: number }).eventId ?? '?'}`;
    const mark: CorruptMark = { taskId, key, code: err.code, message: err.message, time: this.#rt.clock.now() };
    if (!this.#corrupt.has(taskId)) {
      this.#corrupt.set(taskId, mark);
      this.#rt.log.error('task isolated: its stored history cannot be read', { taskId, key, error: err });
      await this.#rt.store.markCorrupt(mark).catch((e: unknown) => this.#rt.log.warn('could not record the corrupt mark', { taskId, error: e }));
    }
    return err instanceof HistoryCorruptError ? err : corruptError(mark, err);
  }

  /**
   * Runs `fn` holding the task's lock: every write to one task goes through here, in order.
   * Only the lock hands out a LockedTask, so a function that mutates says so in its type.
   */
  withLock<T>(t: TaskEntry, fn: (task: LockedTask) => Promise<T>): Promise<T> {
    if (t.chain === SYNC_HOLD) throw new Error(`internal: task ${t.id} was locked from inside its own lock's synchronous part`);
    t.busy++;
    return release(t, t.chain.then(() => fn(t as LockedTask)));
  }

  /**
   * {@link withLock}, but a free lock runs `fn` at once, in the caller's turn: no hop through the
   * chain (two promises less a hold, each one running the step scope's async hooks: a step's
   * record takes the lock this way). `fn`'s synchronous part must not lock the same task.
   */
  withLockNow<T>(t: TaskEntry, fn: (task: LockedTask) => Promise<T>): Promise<T> {
    if (t.chain !== UNLOCKED) return this.withLock(t, fn);
    t.busy++;
    t.chain = SYNC_HOLD;
    let run: Promise<T>;
    try {
      // A native promise passes through Promise.resolve as itself; a plain value is wrapped.
      run = Promise.resolve(fn(t as LockedTask));
    } catch (err) {
      run = Promise.reject(err);
    }
    return release(t, run);
  }

  /**
   * {@link withLock}, deciding again after a lost race: a ConcurrencyError means another writer
   * appended first (the appender has re-read the history), and a create refused as a stale
   * generation means another engine created the task first; either way `fn` runs again on the
   * task as it now is, up to {@link MAX_RACES} times. `fn` learns which try it is (`retry`, 0 first) to
   * find what an earlier try already wrote (test: runtime/engine-races "lost race").
   */
  // A chain, not an async function awaiting the lock: one promise a try instead of two (every
  // promise runs the step scope's hooks; each new task and each send passes here).
  mutate<T>(t: TaskEntry, fn: (task: LockedTask, retry: number) => Promise<T>, retry = 0): Promise<T> {
    let creating = false;
    const run = (task: LockedTask): Promise<T> => {
      creating = task.state === undefined;
      return fn(task, retry);
    };
    // A task just named by this engine (createNew) has a free lock nobody else can know of: its
    // create runs at once, up to its start's write (two promises and a hop less a new task).
    const locked = t.fresh && retry === 0 ? this.withLockNow(t, run) : this.withLock(t, run);
    return locked.catch((err: unknown) => {
      // A create refused as stale is a lost race too: another engine created the task and took
      // its lease between our reads of its events and of its lease (a torn read on a shared
      // store), so our create went without a lease at generation 0 (test: runtime/postgres-start-race).
      const lost = isTurnlogError(err, 'TURNLOG_CONCURRENCY') || (creating && isTurnlogError(err, 'TURNLOG_STALE_GENERATION'));
      if (retry >= MAX_RACES || !lost) throw err;
      // A failed re-read dropped the entry: load it afresh.
      return this.load(t.id).then((next) => this.mutate(next, fn, retry + 1));
    });
  }
}

/** What every API of an isolated task throws. */
export function corruptError(mark: CorruptMark, cause?: unknown): HistoryCorruptError {
  return new HistoryCorruptError(
    mark.key,
    `task ${mark.taskId} is isolated, ${mark.code} found at ${new Date(mark.time).toISOString()}; \`turnlog show ${mark.taskId}\` shows what is readable`,
    cause === undefined ? {} : { cause },
  );
}
