/**
 * The LevelDB store's head cache (level-store.ts): a task's head (last event id, lease, summary)
 * loaded on first touch, dropped when completed and idle past the bound, primed a claimed page at
 * a time with the snapshot and short tail the task cache reads next, handed out once (takeTaskStart).
 * The store's append path keeps its own references to the maps here and locks the head itself.
 */
import type { Level } from 'level';
import type { HistoryEvent, Lease } from '../history/events.js';
import { summarize } from '../history/summary.js';
import type { IndexEntry } from './due-work.js';
import type { ReadOptions, StoredSnapshot, TaskStart } from './history-store.js';
import { eventKey, eventRange, snapshotKeyOf, TaskKeys } from './keys.js';
import { decodeEventRecord, decodeSummaryRecord, parseJson } from './level-records.js';
import { holdsRef } from './payload-refs.js';
import type { TaskHead } from './task-head.js';

/** A task's cached head: `durable` is on disk, `pending` includes queued writes. */
export interface HeadEntry {
  durable: TaskHead;
  pending: TaskHead;
  /** Set while the head is loading; callers queue on it in arrival order. */
  ready: Promise<void> | null;
  waiters: number;
  /** The task's keys, encoded once. */
  keys: TaskKeys;
}

/**
 * A short history's tail read with its head (prime): events `from`… as stored, then the
 * last event, decoded already (the head was read from it: not read nor decoded twice).
 */
export interface TailHint {
  from: number;
  keys: Buffer[];
  values: Buffer[];
  last: HistoryEvent;
}

/** Longest tail prime reads ahead; a longer one is read by the task cache's own iterator. */
const TAIL_HINT_EVENTS = 64;

/** The store's public calls its parts make through it, so a caller that replaces one (a test) sees them all. */
export interface LevelStoreCalls {
  readEvents(taskId: string, options?: ReadOptions): Promise<HistoryEvent[]>;
  getSnapshot(taskId: string): Promise<StoredSnapshot | undefined>;
  getLease(taskId: string): Promise<Lease | undefined>;
  takeTaskStart(taskId: string, limit: number): TaskStart | undefined;
}

/** The head cache and its hints; the store reads and writes its fields, the parts call its methods. */
export class LevelHeads {
  /** The store's database, set by its open() (a Level is built only after the directory check). */
  db!: Level<Buffer, Buffer>;
  readonly heads = new Map<string, HeadEntry>();
  /**
   * Snapshot records read with a claimed page's heads (prime), each handed to the next
   * `getSnapshot` of its task once; replaced by the next page, dropped by any write of the task.
   */
  readonly snapshotHints = new Map<string, Buffer | undefined>();
  /**
   * Likewise the events after the snapshot (or all of them) of a short history: the next
   * `readEvents` of the task from that event on takes them instead of opening an iterator.
   * Dropped by any write of the task's events.
   */
  readonly tailHints = new Map<string, TailHint>();
  /** Bumped by every compaction and delete: tails read across one are not hinted. */
  cuts = 0;
  /**
   * Bumped whenever a head leaves the cache (eviction, a failed write, a failed load, a delete by
   * keys): a page read across one is not primed, as a task may have been written and dropped meanwhile.
   */
  drops = 0;
  readonly #maxHeads: number;
  readonly #store: LevelStoreCalls;

  constructor(maxHeads: number, store: LevelStoreCalls) {
    this.#maxHeads = maxHeads;
    this.#store = store;
  }

  /** Drops a task's cached head; a claim's page read across it is not primed (drops). */
  drop(taskId: string): void {
    this.drops++;
    this.heads.delete(taskId);
  }

  /**
   * Drops the oldest idle heads of completed tasks until the cache is back to 90% of its bound.
   * Without it every task ever touched kept its head (keys as Buffers, summary, lease) for the
   * life of the process: 1,000 new one-step tasks grew the heap by ~8 MB, and the GC's work with
   * it (profile: rounds of new tasks, heap and mark-compact time rising round after round).
   * A completed task never runs again, so a reload (its lease read back void) changes nothing.
   */
  evict(): number {
    const target = Math.floor(this.#maxHeads * 0.9);
    for (const [id, h] of this.heads) {
      if (this.heads.size <= target) break;
      if (h.ready === null && h.waiters === 0 && h.pending === h.durable && h.durable.summary?.status === 'completed') this.drop(id);
    }
    // Mostly live tasks: the store walks again only after another tenth of the bound has been added.
    return Math.max(this.#maxHeads, this.heads.size + Math.ceil(this.#maxHeads / 10));
  }

  async load(taskId: string, entry: HeadEntry): Promise<void> {
    // One getMany for both records, not two gets: each native read costs a thread-pool round trip
    // and a promise (profiles of recovering 10,000 tasks and of new tasks at 100 in flight: reads
    // were the top self time).
    const [[rawSummary, rawLease], last] = await Promise.all([
      this.db.getMany([entry.keys.summary, entry.keys.lease]),
      this.db.iterator({ ...eventRange(taskId), reverse: true, limit: 1 }).all(),
    ]);
    let lastEventId = 0;
    let maxGeneration = 0;
    const tail = last[0];
    if (tail) {
      const e = decodeEventRecord(taskId, tail[0], tail[1]);
      lastEventId = e.eventId;
      maxGeneration = e.generation;
    }
    let summary = rawSummary === undefined ? undefined : decodeSummaryRecord(taskId, entry.keys.summary, rawSummary);
    // The summary is derived (invariant 1): if it disagrees with the history, rebuild it.
    if (lastEventId > 0 && summary?.lastEventId !== lastEventId) {
      summary = summarize(taskId, undefined, await this.#store.readEvents(taskId));
    }
    const stored = rawLease === undefined ? undefined : (parseJson(rawLease, entry.keys.lease) as Lease);
    // A lease on disk was written by an earlier process, which LevelDB's lock proves dead:
    // it is void at once (expired), keeping its generation as the fencing floor.
    const lease = stored && { ...stored, expiresAt: 0 };
    const head: TaskHead = { lastEventId, maxGeneration, lease, summary: lastEventId > 0 ? summary : undefined };
    entry.durable = head;
    entry.pending = head;
  }

  /**
   * Loads the heads of a page of tasks with one `getMany` (lease, the event at the summary's last
   * id and the one after it, and the snapshot the engine reads next), instead of four reads per
   * task when each is loaded and first appended to. A
   * head is set only when the history proves the summary right (that event exists, the next does
   * not: ids are dense) and the task has no head yet; any other task loads its head as usual.
   * Recovering 10,000 tasks, the per-task reads were the largest share of the event loop's time.
   * `tasks`: each entry's id as UTF-8, from its index key.
   */
  async prime(entries: readonly IndexEntry[], tasks: readonly Uint8Array[]): Promise<void> {
    const todo: IndexEntry[] = [];
    const taskKeys: TaskKeys[] = [];
    const readKeys: Buffer[] = [];
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i]!;
      if (e.summary === undefined || this.heads.has(e.taskId)) continue;
      const last = e.summary.lastEventId;
      const k = new TaskKeys(e.taskId, tasks[i]);
      todo.push(e);
      taskKeys.push(k);
      readKeys.push(k.lease, eventKey(k.taskId, last, k.eventPrefix), eventKey(k.taskId, last + 1, k.eventPrefix), snapshotKeyOf(tasks[i]!));
    }
    if (todo.length === 0) return;
    const drops = this.drops;
    const raws = await this.db.getMany(readKeys);
    this.snapshotHints.clear();
    this.tailHints.clear();
    // A head dropped meanwhile may have been written first (a task that completed and was evicted):
    // this read may be older than the history, so the page's heads load as usual (test: level-store).
    if (drops !== this.drops) return;
    // The tails the task cache reads next, for the second getMany: [task, from, key offset, last event].
    const tails: [string, number, number, HistoryEvent][] = [];
    const tailKeys: Buffer[] = [];
    for (let i = 0; i < todo.length; i++) {
      const [rawLease, rawLast, rawNext, rawSnapshot] = [raws[4 * i], raws[4 * i + 1], raws[4 * i + 2], raws[4 * i + 3]];
      const { taskId, summary } = todo[i]!;
      if (rawLast === undefined || rawNext !== undefined || this.heads.has(taskId)) continue;
      try {
        const e = decodeEventRecord(taskId, readKeys[4 * i + 1]!, rawLast);
        const stored = rawLease === undefined ? undefined : (parseJson(rawLease, readKeys[4 * i]!) as Lease);
        // As in load: a lease on disk was written by an earlier process, void at once.
        const head: TaskHead = { lastEventId: e.eventId, maxGeneration: e.generation, lease: stored && { ...stored, expiresAt: 0 }, summary: summary! };
        this.heads.set(taskId, { durable: head, pending: head, ready: null, waiters: 0, keys: taskKeys[i]! });
        // No write of the task can come between: every write goes through its head, which did not exist.
        this.snapshotHints.set(taskId, rawSnapshot);
        const from = (rawSnapshot !== undefined && rawSnapshot.length >= 4 ? rawSnapshot.readUInt32BE(0) : 0) + 1;
        if (from <= e.eventId && e.eventId - from < TAIL_HINT_EVENTS) {
          tails.push([taskId, from, tailKeys.length, e]);
          for (let id = from; id < e.eventId; id++) tailKeys.push(eventKey(taskId, id, taskKeys[i]!.eventPrefix));
        }
      } catch {
        // Unreadable: left for load, which reports it where it is needed.
      }
    }
    if (tails.length === 0) return;
    const cuts = this.cuts;
    const tailRaws = tailKeys.length === 0 ? [] : await this.db.getMany(tailKeys);
    // Appends move the head past the tail read (checked below); a cut or delete leaves no trace there.
    if (cuts !== this.cuts) return;
    for (let i = 0; i < tails.length; i++) {
      const [taskId, from, at, last] = tails[i]!;
      const end = i + 1 < tails.length ? tails[i + 1]![2] : tailKeys.length;
      const values = tailRaws.slice(at, end);
      // A hole (a compaction cut behind the snapshot): the task cache's own read sorts it out.
      // Unmoved head: nothing was appended after `last` (read by the first getMany) meanwhile.
      if (values.every((v) => v !== undefined) && this.heads.get(taskId)?.pending.lastEventId === last.eventId) {
        this.tailHints.set(taskId, { from, keys: tailKeys.slice(at, end), values: values as Buffer[], last });
      }
    }
  }

  /**
   * The store's takeTaskStart (open stores only): a claimed task's snapshot, tail and lease from its
   * claim's read, decoded, synchronously and once; undefined when any of it would need a read.
   */
  take(taskId: string, limit: number): TaskStart | undefined {
    const tail = this.tailHints.get(taskId);
    if (tail === undefined) return undefined;
    const h = this.heads.get(taskId);
    if (h === undefined || h.ready !== null || !this.snapshotHints.has(taskId) || limit <= tail.values.length) return undefined;
    try {
      const raw = this.snapshotHints.get(taskId);
      if (raw !== undefined && raw.length < 4) return undefined;
      const snapshot = raw === undefined ? undefined : { eventId: raw.readUInt32BE(0), data: new Uint8Array(raw.subarray(4)) };
      if (tail.from !== (snapshot?.eventId ?? 0) + 1) return undefined;
      const events = new Array<HistoryEvent>(tail.values.length + 1);
      for (let i = 0; i < tail.values.length; i++) events[i] = decodeEventRecord(taskId, tail.keys[i]!, tail.values[i]!);
      events[tail.values.length] = tail.last;
      if (events.some(holdsRef)) return undefined;
      this.snapshotHints.delete(taskId);
      this.tailHints.delete(taskId);
      const lease = h.durable.lease;
      return { snapshot, events, lease: lease && { ...lease } };
    } catch {
      // Unreadable: the reads of readTaskStart report it where they find it.
      return undefined;
    }
  }

  /** The task's durable head when it is loaded, else undefined (nothing is read). */
  cached(taskId: string): TaskHead | undefined {
    const h = this.heads.get(taskId);
    return h && h.ready === null ? h.durable : undefined;
  }
}
