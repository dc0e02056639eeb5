/**
 * The default {@link HistoryStore}: one LevelDB directory through `level`, owned by one
 * process (LevelDB's lock). docs/storage.md describes the key layout, group commit and
 * why the append path does no read I/O.
 */
import { Level } from 'level';
import {
  HistoryCorruptError,
  StoreLockedError,
  TurnlogError,
  invalidArgument,
  isHistoryUnreadable,
  isTurnlogError,
} from '../errors.js';
import { inspectStoreDir } from './store-dir.js';
import { decodeEvent, encodeEvent } from '../history/codec.js';
import { checkRefBytes, externalize, holdsRef, resolveAll } from './payload-refs.js';
import { isLaterCut } from './task-head.js';
import { HISTORY_FORMAT_VERSION, type HistoryEvent, type Lease, type TaskSummary } from '../history/events.js';
import type { LeaseRequest } from '../history/lease.js';
import { summarize } from '../history/summary.js';
import { GroupCommitter, type BatchOp } from './group-commit.js';
import { claimFromIndex, type IndexEntry } from './due-work.js';
import type {
  CorruptMark,
  AppendOptions,
  AppendResult,
  ClaimRequest,
  DueBatch,
  HistoryStore,
  ListOptions,
  ReadOptions,
  StoredSnapshot,
  TaskPage,
  TaskStart,
} from './history-store.js';
import {
  Prefix,
  STORE_FORMAT_VERSION,
  checkTaskId,
  corruptKey,
  describeKey,
  eventIdOfKey,
  eventKey,
  payloadKey,
  payloadRange,
  eventRange,
  leaseKey,
  metaKey,
  prefixEnd,
  prefixOnly,
  snapshotKey,
  snapshotKeyOf,
  statusIndexPrefix,
  summaryKey,
  summaryKeyOf,
  taskBytesOfKey,
  taskIdOfKey,
  TaskKeys,
  workflowIndexPrefix,
} from './keys.js';
import { decodeSummary, encodeLease, encodeSummary } from './records.js';
import { MAX_EVENT_ID, decodeCursorBytes, encodeCursor, pageLimit, iterateInPages, readBounds } from './paging.js';
import {
  EMPTY_HEAD,
  applyAppend,
  applyClaim,
  applyRelease,
  applyRenew,
  isPurgeable,
  isRecoverable,
  withMark,
  type TaskHead,
} from './task-head.js';

/** Options of {@link LevelHistoryStore}. */
export interface LevelHistoryStoreOptions {
  /** fsync every write before it resolves (default true). `append` can override per call. */
  sync?: boolean;
  /**
   * Create the store when the directory is missing or empty (default true). False: only open an
   * existing store (TURNLOG_STORE_NOT_FOUND otherwise), as the CLI's reading commands do.
   */
  create?: boolean;
  /**
   * Payloads above this many bytes are stored once per task, content-addressed, beside the
   * history; the event keeps a reference (docs/history.md#large-payloads-by-reference). Default: off.
   */
  payloadRefBytes?: number;
  /**
   * Heads (last event id, lease, summary) of completed tasks kept in memory beyond this many
   * cached heads are dropped, oldest first, and read again if the task is touched (default
   * 10,000). Heads of tasks that are not completed, or with a write in flight, are always kept.
   */
  maxCachedHeads?: number;
}

/** A task's cached head: `durable` is on disk, `pending` includes queued writes. */
interface HeadEntry {
  durable: TaskHead;
  pending: TaskHead;
  /** Set while the head is loading; callers queue on it in arrival order. */
  ready: Promise<void> | null;
  waiters: number;
  /** The task's keys, encoded once. */
  keys: TaskKeys;
}

const FORMAT_META = 'format';

/**
 * A short history's tail read with its head (#primeHeads): events `from`… as stored, then the
 * last event, decoded already (the head was read from it: not read nor decoded twice).
 */
interface TailHint {
  from: number;
  keys: Buffer[];
  values: Buffer[];
  last: HistoryEvent;
}

/** Longest tail #primeHeads reads ahead; a longer one is read by the task cache's own iterator. */
const TAIL_HINT_EVENTS = 64;
/** Longest span `readEvents` reads by keys in one `getMany` (#readKnown); longer ones are iterated. Above the engine's snapshot cadence (1,000): a recovered tail is one call. */
const GET_MANY_EVENTS = 2_048;

type State = 'new' | 'opening' | 'open' | 'closing' | 'closed';

/**
 * LevelDB-backed history store. Appends validate against an in-memory head per task (loaded
 * on first touch) and go out through group commit, so a lone durable append costs one
 * sync batch and many concurrent appends share one.
 *
 * @example
 * const store = new LevelHistoryStore('./data/turnlog');
 * await store.open();
 * await store.append('t1', [created], { expectedLastEventId: 0, generation: 1 });
 */
export class LevelHistoryStore implements HistoryStore {
  readonly location: string;
  readonly exclusive = true;
  readonly supports = { exclusive: true, watch: false, claim: false, groupCommit: true } as const;
  // Built in open(), after the directory check: a Level opens itself (and creates its files)
  // one microtask after construction unless open() is called first.
  #db!: Level<Buffer, Buffer>;
  readonly #sync: boolean;
  readonly #create: boolean;
  readonly #refBytes: number | undefined;
  readonly #heads = new Map<string, HeadEntry>();
  readonly #maxHeads: number;
  /** The head count at which the next eviction walk runs (a walk that freed too little waits for more heads). */
  #evictAt: number;
  /**
   * Snapshot records read with a claimed page's heads (#primeHeads), each handed to the next
   * `getSnapshot` of its task once; replaced by the next page, dropped by any write of the task.
   */
  #snapshotHints = new Map<string, Buffer | undefined>();
  /**
   * Likewise the events after the snapshot (or all of them) of a short history: the next
   * `readEvents` of the task from that event on takes them instead of opening an iterator.
   * Dropped by any write of the task's events.
   */
  #tailHints = new Map<string, TailHint>();
  /** Bumped by every compaction and delete: tails read across one are not hinted. */
  #cuts = 0;
  /**
   * Bumped whenever a head leaves the cache (eviction, a failed write, a failed load, a delete by
   * keys): a page read across one is not primed, as a task may have been written and dropped meanwhile.
   */
  #drops = 0;
  readonly #committer: GroupCommitter;
  #state: State = 'new';
  #opening: Promise<void> | null = null;

  constructor(location: string, options: LevelHistoryStoreOptions = {}) {
    if (typeof location !== 'string' || location === '') {
      throw invalidArgument('LevelHistoryStore needs a directory path.');
    }
    this.location = location;
    this.#sync = options.sync ?? true;
    this.#create = options.create ?? true;
    this.#refBytes = checkRefBytes(options.payloadRefBytes);
    const maxHeads = options.maxCachedHeads ?? 10_000;
    if (!Number.isInteger(maxHeads) || maxHeads < 1) throw invalidArgument(`LevelHistoryStore maxCachedHeads must be an integer ≥ 1, got ${String(maxHeads)}.`);
    this.#maxHeads = maxHeads;
    this.#evictAt = maxHeads;
    this.#committer = new GroupCommitter(
      (ops, sync) => {
        // The chained batch skips the array form's per-op option handling: measurably cheaper.
        const batch = this.#db.batch();
        for (const op of ops) {
          if (op.type === 'put') batch.put(op.key, op.value);
          else batch.del(op.key);
        }
        return batch.write({ sync });
      },
      (tasks) => {
        // The failed batch may have been partly applied in memory only: reload from disk.
        for (const t of tasks) this.#dropHead(t);
      },
    );
  }

  /** Each group commit's number of writes (appends, leases, snapshots), as it goes out. */
  onCommit(listener: (writes: number) => void): () => void {
    return this.#committer.listen(listener);
  }

  /** Group-commit counters (writes submitted, batches issued), for benchmarks and tests. */
  get commitStats(): { writes: number; batches: number } {
    return { writes: this.#committer.writes, batches: this.#committer.batches };
  }

  open(): Promise<void> {
    if (this.#state === 'open') return Promise.resolve();
    if (this.#opening) return this.#opening;
    if (this.#state !== 'new' && this.#state !== 'closed') {
      return Promise.reject(this.#closedError());
    }
    this.#state = 'opening';
    this.#opening = this.#doOpen().finally(() => {
      this.#opening = null;
    });
    return this.#opening;
  }

  async #doOpen(): Promise<void> {
    try {
      await this.#checkDirectory();
      this.#db = new Level<Buffer, Buffer>(this.location, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
      await this.#db.open({ createIfMissing: this.#create });
    } catch (err) {
      this.#state = 'closed';
      if (isTurnlogError(err)) throw err;
      if (isLockedError(err)) throw new StoreLockedError(this.location, { cause: err });
      throw new TurnlogError(
        'TURNLOG_STORE_OPEN',
        `Store ${this.location} could not be opened: ${osCause(err)}. Check that the path names a directory this process may create and write.`,
        { cause: err },
      );
    }
    try {
      await this.#checkFormat();
    } catch (err) {
      this.#state = 'closed';
      await this.#db.close();
      throw err;
    }
    this.#state = 'open';
  }

  /** Refuses, before LevelDB writes a byte, a directory that is not a turnlog store (store-dir.ts). */
  async #checkDirectory(): Promise<void> {
    const state = await inspectStoreDir(this.location);
    if (state === 'store' || (this.#create && (state === 'missing' || state === 'empty'))) return;
    const what =
      state === 'not-directory'
        ? 'is not a directory'
        : state === 'foreign'
          ? 'is a non-empty directory that holds no turnlog store'
          : 'holds no turnlog store';
    throw new TurnlogError(
      'TURNLOG_STORE_NOT_FOUND',
      `Store ${this.location} ${what}; nothing was written to it. Point the store at its own directory (default .turnlog), or at an existing store.`,
    );
  }

  async #checkFormat(): Promise<void> {
    const key = metaKey(FORMAT_META);
    const raw = await this.#db.get(key);
    if (raw === undefined) {
      // A LevelDB with data but no turnlog meta record belongs to something else: leave it alone.
      if ((await this.#db.keys({ limit: 1 }).all()).length > 0) {
        throw new TurnlogError(
          'TURNLOG_STORE_NOT_FOUND',
          `Store ${this.location} is a LevelDB written by something other than turnlog (it has no turnlog format record); nothing was written to it. Point the store at its own directory.`,
        );
      }
      const meta = { store: STORE_FORMAT_VERSION, history: HISTORY_FORMAT_VERSION };
      await this.#db.put(key, Buffer.from(JSON.stringify(meta)), { sync: true });
      return;
    }
    const meta = parseJson(raw, key) as { store?: unknown };
    if (typeof meta.store !== 'number') throw new HistoryCorruptError(describeKey(key), 'no store format version');
    if (meta.store > STORE_FORMAT_VERSION) {
      throw new TurnlogError(
        'TURNLOG_HISTORY_FORMAT',
        `Store ${this.location} has store format version ${meta.store}; this build reads up to ${STORE_FORMAT_VERSION}. Upgrade turnlog to open it.`,
      );
    }
  }

  async close(): Promise<void> {
    if (this.#opening) await this.#opening.catch(() => undefined);
    if (this.#state !== 'open') return;
    this.#state = 'closing';
    await this.#committer.drain();
    this.#heads.clear();
    await this.#db.close();
    this.#state = 'closed';
  }

  #closedError(): TurnlogError {
    return new TurnlogError(
      'TURNLOG_STORE_CLOSED',
      `Store ${this.location} is ${this.#state === 'closing' ? 'closing' : 'not open'}. Call open() first, and do not use a store after close().`,
    );
  }

  #checkOpen(): void {
    if (this.#state !== 'open') throw this.#closedError();
  }

  // ---------------------------------------------------------------------------------------------
  // Heads

  /**
   * Runs `fn` with the task's head, loading it on first touch. `fn` runs synchronously up to
   * its write submission, and callers run in arrival order, so validation sees every earlier
   * append of the task (written or queued).
   */
  #withHead<T>(taskId: string, fn: (h: HeadEntry) => Promise<T>, fresh = false): Promise<T> {
    try {
      this.#checkOpen();
      checkTaskId(taskId);
    } catch (err) {
      return Promise.reject(err);
    }
    let h = this.#heads.get(taskId);
    if (!h) {
      const entry: HeadEntry = {
        durable: EMPTY_HEAD,
        pending: EMPTY_HEAD,
        ready: null,
        waiters: 0,
        keys: new TaskKeys(taskId),
      };
      // A task the caller vouches is new (AppendOptions.fresh) has the empty head: nothing to read.
      if (!fresh) entry.ready = this.#loadHead(taskId, entry);
      this.#heads.set(taskId, entry);
      if (this.#heads.size > this.#evictAt) this.#evictHeads();
      h = entry;
    }
    const entry = h;
    const ready = entry.ready;
    if (ready === null) {
      try {
        return fn(entry);
      } catch (err) {
        return Promise.reject(err);
      }
    }
    entry.waiters++;
    const done = (): void => {
      if (--entry.waiters === 0 && entry.ready === ready) entry.ready = null;
    };
    return ready.then(
      () => {
        done();
        this.#checkOpen();
        return fn(entry);
      },
      (err: unknown) => {
        done();
        if (this.#heads.get(taskId) === entry) this.#dropHead(taskId);
        throw err;
      },
    );
  }

  /** Drops a task's cached head; a claim's page read across it is not primed (#drops). */
  #dropHead(taskId: string): void {
    this.#drops++;
    this.#heads.delete(taskId);
  }

  /**
   * Drops the oldest idle heads of completed tasks until the cache is back to 90% of its bound.
   * Without it every task ever touched kept its head (keys as Buffers, summary, lease) for the
   * life of the process: 1,000 new one-step tasks grew the heap by ~8 MB, and the GC's work with
   * it (profile: rounds of new tasks, heap and mark-compact time rising round after round).
   * A completed task never runs again, so a reload (its lease read back void) changes nothing.
   */
  #evictHeads(): void {
    const target = Math.floor(this.#maxHeads * 0.9);
    for (const [id, h] of this.#heads) {
      if (this.#heads.size <= target) break;
      if (h.ready === null && h.waiters === 0 && h.pending === h.durable && h.durable.summary?.status === 'completed') this.#dropHead(id);
    }
    // Mostly live tasks: walk again only after another tenth of the bound has been added.
    this.#evictAt = Math.max(this.#maxHeads, this.#heads.size + Math.ceil(this.#maxHeads / 10));
  }

  async #loadHead(taskId: string, entry: HeadEntry): Promise<void> {
    // One getMany for both records, not two gets: each native read costs a thread-pool round trip
    // and a promise (profiles of recovering 10,000 tasks and of new tasks at 100 in flight: reads
    // were the top self time).
    const [[rawSummary, rawLease], last] = await Promise.all([
      this.#db.getMany([entry.keys.summary, entry.keys.lease]),
      this.#db.iterator({ ...eventRange(taskId), reverse: true, limit: 1 }).all(),
    ]);
    let lastEventId = 0;
    let maxGeneration = 0;
    const tail = last[0];
    if (tail) {
      const e = this.#decode(taskId, tail[0], tail[1]);
      lastEventId = e.eventId;
      maxGeneration = e.generation;
    }
    let summary = rawSummary === undefined ? undefined : this.#summary(taskId, entry.keys.summary, rawSummary);
    // The summary is derived (invariant 1): if it disagrees with the history, rebuild it.
    if (lastEventId > 0 && summary?.lastEventId !== lastEventId) {
      summary = summarize(taskId, undefined, await this.readEvents(taskId));
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
  async #primeHeads(entries: readonly IndexEntry[], tasks: readonly Uint8Array[]): Promise<void> {
    const todo: IndexEntry[] = [];
    const taskKeys: TaskKeys[] = [];
    const readKeys: Buffer[] = [];
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i]!;
      if (e.summary === undefined || this.#heads.has(e.taskId)) continue;
      const last = e.summary.lastEventId;
      const k = new TaskKeys(e.taskId, tasks[i]);
      todo.push(e);
      taskKeys.push(k);
      readKeys.push(k.lease, eventKey(k.taskId, last, k.eventPrefix), eventKey(k.taskId, last + 1, k.eventPrefix), snapshotKeyOf(tasks[i]!));
    }
    if (todo.length === 0) return;
    const drops = this.#drops;
    const raws = await this.#db.getMany(readKeys);
    this.#snapshotHints = new Map();
    this.#tailHints = new Map();
    // A head dropped meanwhile may have been written first (a task that completed and was evicted):
    // this read may be older than the history, so the page's heads load as usual (test: level-store).
    if (drops !== this.#drops) return;
    // The tails the task cache reads next, for the second getMany: [task, from, key offset, last event].
    const tails: [string, number, number, HistoryEvent][] = [];
    const tailKeys: Buffer[] = [];
    for (let i = 0; i < todo.length; i++) {
      const [rawLease, rawLast, rawNext, rawSnapshot] = [raws[4 * i], raws[4 * i + 1], raws[4 * i + 2], raws[4 * i + 3]];
      const { taskId, summary } = todo[i]!;
      if (rawLast === undefined || rawNext !== undefined || this.#heads.has(taskId)) continue;
      try {
        const e = this.#decode(taskId, readKeys[4 * i + 1]!, rawLast);
        const stored = rawLease === undefined ? undefined : (parseJson(rawLease, readKeys[4 * i]!) as Lease);
        // As in #loadHead: a lease on disk was written by an earlier process, void at once.
        const head: TaskHead = { lastEventId: e.eventId, maxGeneration: e.generation, lease: stored && { ...stored, expiresAt: 0 }, summary: summary! };
        this.#heads.set(taskId, { durable: head, pending: head, ready: null, waiters: 0, keys: taskKeys[i]! });
        // No write of the task can come between: every write goes through its head, which did not exist.
        this.#snapshotHints.set(taskId, rawSnapshot);
        const from = (rawSnapshot !== undefined && rawSnapshot.length >= 4 ? rawSnapshot.readUInt32BE(0) : 0) + 1;
        if (from <= e.eventId && e.eventId - from < TAIL_HINT_EVENTS) {
          tails.push([taskId, from, tailKeys.length, e]);
          for (let id = from; id < e.eventId; id++) tailKeys.push(eventKey(taskId, id, taskKeys[i]!.eventPrefix));
        }
      } catch {
        // Unreadable: left for #loadHead, which reports it where it is needed.
      }
    }
    if (tails.length === 0) return;
    const cuts = this.#cuts;
    const tailRaws = tailKeys.length === 0 ? [] : await this.#db.getMany(tailKeys);
    // Appends move the head past the tail read (checked below); a cut or delete leaves no trace there.
    if (cuts !== this.#cuts) return;
    for (let i = 0; i < tails.length; i++) {
      const [taskId, from, at, last] = tails[i]!;
      const end = i + 1 < tails.length ? tails[i + 1]![2] : tailKeys.length;
      const values = tailRaws.slice(at, end);
      // A hole (a compaction cut behind the snapshot): the task cache's own read sorts it out.
      // Unmoved head: nothing was appended after `last` (read by the first getMany) meanwhile.
      if (values.every((v) => v !== undefined) && this.#heads.get(taskId)?.pending.lastEventId === last.eventId) {
        this.#tailHints.set(taskId, { from, keys: tailKeys.slice(at, end), values: values as Buffer[], last });
      }
    }
  }

  /** Decodes an event record of `taskId` (an event key: the name is built without decoding the key). */
  #decode(taskId: string, key: Buffer, value: Buffer): HistoryEvent {
    const id = eventIdOfKey(key);
    const name = `events/${taskId}/${id}`;
    // A plain Uint8Array view makes protobufjs return Uint8Array bytes fields, as the types say.
    const e = decodeEvent(new Uint8Array(value.buffer, value.byteOffset, value.byteLength), taskId, name);
    if (e.eventId !== id) throw new HistoryCorruptError(name, `holds event ${e.eventId}`);
    return e;
  }

  // ---------------------------------------------------------------------------------------------
  // Writes

  append(taskId: string, events: readonly HistoryEvent[], options: AppendOptions): Promise<AppendResult> {
    this.#tailHints.delete(taskId);
    return this.#withHead(taskId, (h) => {
      const prev = h.pending;
      const next = applyAppend(taskId, prev, events, options);
      const keys = h.keys;
      const ops: BatchOp[] = [];
      // Large payloads by reference only when configured: no Map an append otherwise.
      const refBytes = this.#refBytes;
      const blobs = refBytes === undefined ? undefined : new Map<string, Uint8Array>();
      for (let i = 0; i < events.length; i++) {
        const e = blobs === undefined ? events[i]! : externalize(events[i]!, refBytes, blobs);
        ops.push({ type: 'put', key: eventKey(taskId, e.eventId, keys.eventPrefix), value: asBuffer(encodeEvent(e)) });
      }
      // Content-addressed: writing the same payload again puts the same bytes under the same key.
      if (blobs !== undefined) for (const [hash, data] of blobs) ops.push({ type: 'put', key: payloadKey(taskId, hash), value: asBuffer(data) });
      const summary = next.summary!;
      ops.push({ type: 'put', key: keys.summary, value: encodeSummary(summary) });
      indexOps(keys, prev.summary, summary, ops);
      // applyAppend builds the lease as { owner, instance, generation, expiresAt }: encodeLease's bytes.
      if (options.lease) ops.push({ type: 'put', key: keys.lease, value: encodeLease(next.lease!) });
      h.pending = next;
      return this.#committer.submit(
        taskId,
        ops,
        options.sync ?? this.#sync,
        () => {
          h.durable = next;
          return { lastEventId: next.lastEventId, summary: { ...summary } };
        },
        // A new task's first append goes out at once after a lone batch too (group-commit.ts).
        options.fresh === true && options.expectedLastEventId === 0 ? 'new' : true,
      );
    }, options.fresh === true && options.expectedLastEventId === 0);
  }

  #writeLease(taskId: string, h: HeadEntry, lease: Lease): Promise<void> {
    const next: TaskHead = { ...h.pending, lease };
    h.pending = next;
    const ops: BatchOp[] = [{ type: 'put', key: h.keys.lease, value: Buffer.from(JSON.stringify(lease)) }];
    return this.#committer.submit(taskId, ops, this.#sync, () => {
      h.durable = next;
    });
  }

  claimLease(taskId: string, request: LeaseRequest): Promise<Lease> {
    return this.#withHead(taskId, (h) => {
      const lease = applyClaim(taskId, h.pending, request);
      return this.#writeLease(taskId, h, lease).then(() => ({ ...lease }));
    });
  }

  renewLease(taskId: string, lease: Lease, durationMs: number, now: number): Promise<Lease> {
    return this.#withHead(taskId, (h) => {
      const next = applyRenew(taskId, h.pending, lease, durationMs, now);
      return this.#writeLease(taskId, h, next).then(() => ({ ...next }));
    });
  }

  releaseLease(taskId: string, lease: Lease, now: number): Promise<void> {
    return this.#withHead(taskId, (h) => {
      const next = applyRelease(taskId, h.pending, lease, now);
      return next ? this.#writeLease(taskId, h, next) : Promise.resolve();
    });
  }

  putSnapshot(taskId: string, snapshot: StoredSnapshot): Promise<void> {
    this.#snapshotHints.delete(taskId);
    return this.#withHead(taskId, (h) => {
      const last = h.pending.lastEventId;
      if (!Number.isInteger(snapshot.eventId) || snapshot.eventId < 1 || snapshot.eventId > last) {
        throw invalidArgument(
          `Task ${taskId}: snapshot at event ${snapshot.eventId} is beyond the history (last event ${last}). Snapshot only appended events.`,
        );
      }
      const value = Buffer.allocUnsafe(4 + snapshot.data.length);
      value.writeUInt32BE(snapshot.eventId, 0);
      value.set(snapshot.data, 4);
      const ops: BatchOp[] = [{ type: 'put', key: snapshotKey(taskId), value }];
      return this.#committer.submit(taskId, ops, this.#sync, () => undefined);
    });
  }

  /** Compaction: event 2 becomes `compacted`, events 3..throughEventId go, in one batch. */
  async compactHistory(taskId: string, compacted: HistoryEvent): Promise<void> {
    this.#checkOpen();
    checkTaskId(taskId);
    if (compacted.type !== 'HistoryCompacted' || compacted.eventId !== 2) throw invalidArgument(`Task ${taskId}: compactHistory takes a HistoryCompacted event 2.`);
    this.#tailHints.delete(taskId);
    this.#cuts++;
    // A later cut already written (another engine's, racing on a shared store) stands: this
    // one's state ends before events that are gone, so writing it would leave a hole.
    const key2 = eventKey(taskId, 2);
    const [raw] = (await this.#db.getMany([key2])) as (Buffer | undefined)[];
    if (raw !== undefined && isLaterCut(this.#decode(taskId, key2, raw), compacted.throughEventId)) return;
    const ops: BatchOp[] = [{ type: 'put', key: key2, value: asBuffer(encodeEvent(compacted)) }];
    for (let id = 3; id <= compacted.throughEventId; id++) ops.push({ type: 'del', key: eventKey(taskId, id) });
    await this.#committer.submit(taskId, ops, this.#sync, () => void this.#cuts++);
  }

  async deleteTask(taskId: string): Promise<void> {
    this.#snapshotHints.delete(taskId);
    this.#tailHints.delete(taskId);
    this.#cuts++;
    // A task whose last event cannot be decoded has no head; delete it by key range instead,
    // so a corrupt task can still be removed or replaced (`turnlog import --force`).
    await this.#deleteWithHead(taskId).catch((err: unknown) => {
      if (!isHistoryUnreadable(err)) throw err;
      return this.#deleteByKeys(taskId);
    });
    // Its large payloads after the events: a crash in between leaves unreferenced bytes, never a
    // history that references a missing payload.
    this.#cuts++;
    await this.#db.clear(payloadRange(taskId));
  }

  async #deleteByKeys(taskId: string): Promise<void> {
    const ops: BatchOp[] = [];
    for (const key of await this.#db.keys(eventRange(taskId)).all()) ops.push({ type: 'del', key });
    for (const key of [summaryKey(taskId), leaseKey(taskId), snapshotKey(taskId), corruptKey(taskId)]) ops.push({ type: 'del', key });
    // The summary may be unreadable too: find the task's index entries by scanning both indexes.
    for (const prefix of [prefixOnly(Prefix.statusIndex), prefixOnly(Prefix.workflowIndex)]) {
      for (const key of await this.#db.keys({ gte: prefix, lt: prefixEnd(prefix) }).all()) {
        if (taskIdOfKey(key) === taskId) ops.push({ type: 'del', key });
      }
    }
    this.#dropHead(taskId);
    await this.#committer.submit(taskId, ops, this.#sync, () => this.#dropHead(taskId));
  }

  #deleteWithHead(taskId: string): Promise<void> {
    return this.#withHead(taskId, (h) => {
      const prev = h.pending;
      const ops: BatchOp[] = [];
      // Ids are dense, so the head names every event key: no scan, one atomic batch.
      const keys = h.keys;
      for (let id = 1; id <= prev.lastEventId; id++) ops.push({ type: 'del', key: eventKey(taskId, id, keys.eventPrefix) });
      ops.push({ type: 'del', key: keys.summary });
      ops.push({ type: 'del', key: keys.lease });
      ops.push({ type: 'del', key: snapshotKey(taskId) });
      ops.push({ type: 'del', key: corruptKey(taskId) });
      if (prev.summary) {
        ops.push({ type: 'del', key: keys.statusIndex(prev.summary.status, prev.summary.workflow) });
        ops.push({ type: 'del', key: keys.workflowIndex(prev.summary.workflow) });
      }
      h.pending = EMPTY_HEAD;
      return this.#committer.submit(taskId, ops, this.#sync, () => {
        h.durable = EMPTY_HEAD;
        // Nothing is stored under the id now: keep no head for it unless a write is queued (a
        // purged task's empty head would otherwise stay for the life of the process, unbounded).
        if (h.pending === EMPTY_HEAD && h.ready === null && this.#heads.get(taskId) === h) this.#dropHead(taskId);
      });
    });
  }

  async purgeCompleted(olderThanMs: number, now: number): Promise<string[]> {
    this.#checkOpen();
    const prefix = statusIndexPrefix('completed');
    const ids = await this.#db.keys({ gte: prefix, lt: prefixEnd(prefix) }).all();
    const taskIds = ids.map(taskIdOfKey);
    const summaries = await this.#summaries(taskIds, true);
    // A task the engine isolated as corrupt is kept for inspection, whatever its age.
    const marked = await this.#marks();
    const purge: string[] = [];
    for (let i = 0; i < taskIds.length; i++) {
      const s = summaries[i];
      if (s && isPurgeable(s, olderThanMs, now) && !marked.has(taskIds[i]!)) purge.push(taskIds[i]!);
    }
    await Promise.all(purge.map((id) => this.deleteTask(id)));
    return sortIds(purge);
  }

  // ---------------------------------------------------------------------------------------------
  // Reads (they see what is on disk; queued appends become visible once they resolve)

  async readEvents(taskId: string, options: ReadOptions = {}): Promise<HistoryEvent[]> {
    this.#checkOpen();
    checkTaskId(taskId);
    const { from, to, limit } = readBounds(options);
    if (limit === 0 || from > to) return [];
    const hint = this.#tailHints.get(taskId);
    if (hint) this.#tailHints.delete(taskId);
    let events: HistoryEvent[];
    if (hint && hint.from === from && to === MAX_EVENT_ID && limit > hint.values.length) {
      // The hinted events and the last one: limit ≥ values + 1.
      events = hint.values.map((v, i) => this.#decode(taskId, hint.keys[i]!, v));
      events.push(hint.last);
    } else {
      events = (await this.#readKnown(taskId, from, to, limit)) ?? (await this.#readRange(taskId, from, to, limit));
    }
    return resolveAll(taskId, events, async (hash) => {
      const v = await this.#db.get(payloadKey(taskId, hash));
      return v === undefined ? undefined : new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
    });
  }

  /**
   * Events `from`…`to` of a task whose head is loaded, by their keys in one `getMany` (one
   * snapshot, one native call), when the head bounds the span to at most {@link GET_MANY_EVENTS}
   * keys: undefined otherwise, and the iterator reads. A missing key is a compaction cut (the
   * iterator skips it too); no event lies past the head, as every write goes through it. Under
   * load an iterator's several native round trips cost recovery of a 1,000-event tail 4-79 ms
   * against 1.4-12 ms for one `getMany` (docs/performance.md).
   */
  async #readKnown(taskId: string, from: number, to: number, limit: number): Promise<HistoryEvent[] | undefined> {
    const h = this.#heads.get(taskId);
    if (h === undefined || h.ready !== null) return undefined;
    const last = Math.min(to, h.pending.lastEventId);
    const span = last - from + 1;
    if (span <= 0 || span > GET_MANY_EVENTS || span > limit) return undefined;
    const keys: Buffer[] = new Array<Buffer>(span);
    for (let i = 0; i < span; i++) keys[i] = eventKey(taskId, from + i, h.keys.eventPrefix);
    const cuts = this.#cuts;
    const values = await this.#db.getMany(keys);
    // A compaction or delete across the read: the iterator reads again.
    if (cuts !== this.#cuts) return undefined;
    const events: HistoryEvent[] = [];
    for (let i = 0; i < span; i++) {
      const v = values[i];
      if (v !== undefined) events.push(this.#decode(taskId, keys[i]!, v));
    }
    return events;
  }

  async #readRange(taskId: string, from: number, to: number, limit: number): Promise<HistoryEvent[]> {
    const range = eventRange(taskId, from, to);
    const entries = await this.#db.iterator(Number.isFinite(limit) ? { ...range, limit } : range).all();
    return entries.map(([k, v]) => this.#decode(taskId, k, v));
  }

  iterateEvents(taskId: string, options: ReadOptions = {}): AsyncIterable<HistoryEvent> {
    return iterateInPages((o) => this.readEvents(taskId, o), options);
  }

  #cached(taskId: string): TaskHead | undefined {
    const h = this.#heads.get(taskId);
    return h && h.ready === null ? h.durable : undefined;
  }

  async getSummary(taskId: string): Promise<TaskSummary | undefined> {
    this.#checkOpen();
    checkTaskId(taskId);
    const cached = this.#cached(taskId);
    if (cached) return cached.summary && { ...cached.summary };
    return (await this.#summaries([taskId]))[0];
  }

  async getLease(taskId: string): Promise<Lease | undefined> {
    this.#checkOpen();
    checkTaskId(taskId);
    const cached = this.#cached(taskId);
    if (cached) return cached.lease && { ...cached.lease };
    // Load the task's head (the engine appends next, e.g. when it recovers the task), so the
    // append reads nothing more. A head that cannot be loaded falls back to the lease alone.
    const viaHead = await this.#withHead(taskId, async (h) => h.durable.lease && { ...h.durable.lease }).then(
      (lease) => ({ lease }),
      () => undefined,
    );
    if (viaHead) return viaHead.lease;
    this.#checkOpen();
    const key = leaseKey(taskId);
    const raw = await this.#db.get(key);
    // Not cached, so written by an earlier process: void, as in #loadHead.
    return raw === undefined ? undefined : { ...(parseJson(raw, key) as Lease), expiresAt: 0 };
  }

  /**
   * A claimed task's snapshot, tail and lease from what its claim read (#primeHeads), with no read
   * and no await: recovery's load was six promises and three store calls more a task. Without
   * those hints (or with a payload reference to resolve) it reads as getSnapshot, readEvents, getLease.
   */
  readTaskStart(taskId: string, limit: number): Promise<TaskStart> {
    const start = this.takeTaskStart(taskId, limit);
    return start === undefined ? this.#readTaskStart(taskId, limit) : Promise.resolve(start);
  }

  /**
   * What {@link readTaskStart} gives a claimed task, from its claim's read, synchronously and
   * once; undefined when it would read (then readTaskStart reads). The task cache builds a claimed
   * task's entry with it in the claim's tick: no promise nor await for its load.
   */
  takeTaskStart(taskId: string, limit: number): TaskStart | undefined {
    const tail = this.#tailHints.get(taskId);
    if (tail === undefined) return undefined;
    const h = this.#heads.get(taskId);
    if (h === undefined || h.ready !== null || !this.#snapshotHints.has(taskId) || limit <= tail.values.length || this.#state !== 'open') return undefined;
    try {
      const raw = this.#snapshotHints.get(taskId);
      if (raw !== undefined && raw.length < 4) return undefined;
      const snapshot = raw === undefined ? undefined : { eventId: raw.readUInt32BE(0), data: new Uint8Array(raw.subarray(4)) };
      if (tail.from !== (snapshot?.eventId ?? 0) + 1) return undefined;
      const events = new Array<HistoryEvent>(tail.values.length + 1);
      for (let i = 0; i < tail.values.length; i++) events[i] = this.#decode(taskId, tail.keys[i]!, tail.values[i]!);
      events[tail.values.length] = tail.last;
      if (events.some(holdsRef)) return undefined;
      this.#snapshotHints.delete(taskId);
      this.#tailHints.delete(taskId);
      const lease = h.durable.lease;
      return { snapshot, events, lease: lease && { ...lease } };
    } catch {
      // Unreadable: the reads of readTaskStart report it where they find it.
      return undefined;
    }
  }

  async #readTaskStart(taskId: string, limit: number): Promise<TaskStart> {
    const snapshot = await this.getSnapshot(taskId);
    const events = await this.readEvents(taskId, { fromEventId: (snapshot?.eventId ?? 0) + 1, limit });
    return { snapshot, events, lease: await this.getLease(taskId) };
  }

  async getSnapshot(taskId: string): Promise<StoredSnapshot | undefined> {
    this.#checkOpen();
    checkTaskId(taskId);
    const key = snapshotKey(taskId);
    const hinted = this.#snapshotHints.has(taskId);
    const raw = hinted ? this.#snapshotHints.get(taskId) : await this.#db.get(key);
    if (hinted) this.#snapshotHints.delete(taskId);
    if (raw === undefined) return undefined;
    if (raw.length < 4) throw new HistoryCorruptError(describeKey(key), `${raw.length} bytes, need at least 4`);
    return { eventId: raw.readUInt32BE(0), data: new Uint8Array(raw.subarray(4)) };
  }

  /**
   * `rebuild` (listings): a summary that cannot be decoded is rebuilt from the task's history
   * (summaries are derived, invariant 1), so one bad record does not fail every task's listing.
   * It still throws when the history cannot be read either.
   */
  async #summaries(taskIds: readonly string[], rebuild = false): Promise<(TaskSummary | undefined)[]> {
    if (taskIds.length === 0) return [];
    const keys = taskIds.map(summaryKey);
    const raws = await this.#db.getMany(keys);
    const out: (TaskSummary | undefined)[] = [];
    for (let i = 0; i < raws.length; i++) {
      const raw = raws[i];
      const id = taskIds[i]!;
      try {
        out.push(raw === undefined ? undefined : this.#summary(id, keys[i]!, raw));
      } catch (err) {
        if (!rebuild) throw err;
        const events = await this.readEvents(id).catch(() => Promise.reject(err));
        out.push(events.length > 0 ? summarize(id, undefined, events) : undefined);
      }
    }
    return out;
  }

  #summary(taskId: string, key: Buffer, raw: Buffer): TaskSummary {
    try {
      return decodeSummary(taskId, raw);
    } catch (err) {
      throw new HistoryCorruptError(describeKey(key), (err as Error).message, { cause: err });
    }
  }

  async listTasks(options: ListOptions = {}): Promise<TaskPage> {
    this.#checkOpen();
    const limit = pageLimit(options.limit);
    const prefix =
      options.status !== undefined
        ? statusIndexPrefix(options.status, options.workflow)
        : options.workflow !== undefined
          ? workflowIndexPrefix(options.workflow)
          : prefixOnly(Prefix.summary);
    let after: Buffer | undefined;
    if (options.cursor !== undefined) {
      after = decodeCursorBytes(options.cursor);
      if (!after.subarray(0, prefix.length).equals(prefix)) {
        throw invalidArgument(`List cursor ${options.cursor} belongs to another filter. Pass the same status and workflow as the page that returned it.`);
      }
    }
    const range = after ? { gt: after, lt: prefixEnd(prefix) } : { gte: prefix, lt: prefixEnd(prefix) };
    const keys = await this.#db.keys({ ...range, limit: limit + 1 }).all();
    const pageKeys = keys.slice(0, limit);
    const summaries = await this.#summaries(pageKeys.map(taskIdOfKey), true);
    const marks = pageKeys.length === 0 ? undefined : await this.#marks();
    const page: TaskPage = {
      tasks: summaries.filter((s): s is TaskSummary => s !== undefined).map((s) => withMark(s, marks?.get(s.taskId))),
    };
    if (keys.length > limit) page.next = encodeCursor(pageKeys[pageKeys.length - 1]!);
    return page;
  }

  async markCorrupt(mark: CorruptMark): Promise<void> {
    this.#checkOpen();
    checkTaskId(mark.taskId);
    // Not through the task's head: loading it may be what fails. Only this key is written.
    const value = { taskId: mark.taskId, key: mark.key, code: mark.code, message: mark.message, time: mark.time };
    await this.#db.put(corruptKey(mark.taskId), Buffer.from(JSON.stringify(value)), { sync: this.#sync });
  }

  async listCorrupt(): Promise<CorruptMark[]> {
    this.#checkOpen();
    return [...(await this.#marks()).values()];
  }

  /** Corrupt marks by task id: a scan of the `x` prefix, which is empty in a healthy store. */
  async #marks(): Promise<Map<string, CorruptMark>> {
    const prefix = prefixOnly(Prefix.corrupt);
    const out = new Map<string, CorruptMark>();
    for (const [k, v] of await this.#db.iterator({ gte: prefix, lt: prefixEnd(prefix) }).all()) {
      const m = parseJson(v, k) as CorruptMark;
      out.set(taskIdOfKey(k), { ...m, taskId: taskIdOfKey(k) });
    }
    return out;
  }

  /** From the status index, a page at a time (store/due-work.ts has the rules). */
  async claimDueWork(request: ClaimRequest): Promise<DueBatch> {
    this.#checkOpen();
    let marks: Map<string, CorruptMark> | undefined;
    return claimFromIndex(request, async (status, cursor, limit) => {
      const prefix = statusIndexPrefix(status);
      const range = cursor === undefined ? { gte: prefix, lt: prefixEnd(prefix) } : { gt: decodeCursorBytes(cursor), lt: prefixEnd(prefix) };
      const keys = await this.#db.keys({ ...range, limit: limit + 1 }).all();
      const pageKeys = keys.slice(0, limit);
      const ids = pageKeys.map(taskIdOfKey);
      // Every key of the page's tasks from the id bytes in their index keys, each built once.
      const tasks = pageKeys.map(taskBytesOfKey);
      const summaryKeys = tasks.map(summaryKeyOf);
      const raws = ids.length ? await this.#db.getMany(summaryKeys) : [];
      if (status === 'completed' && ids.length) marks ??= await this.#marks();
      const entries = ids.map((id, i): IndexEntry => {
        const raw = raws[i];
        if (raw === undefined) return { taskId: id };
        try {
          return { taskId: id, summary: this.#summary(id, summaryKeys[i]!, raw), marked: marks?.has(id) ?? false };
        } catch {
          return { taskId: id, unreadable: true };
        }
      });
      // Leases matter only to in-progress tasks: the engine recovers these next, so their heads are
      // loaded here for the whole page in one read (#primeHeads) and their appends read nothing.
      if (status === 'in_progress') {
        await this.#primeHeads(entries, tasks);
        for (const e of entries) if (e.summary) e.lease = this.#cached(e.taskId)?.lease;
      }
      return keys.length > limit ? { entries, next: encodeCursor(pageKeys[pageKeys.length - 1]!) } : { entries };
    });
  }

  async listRecoverable(now: number, instance: string): Promise<string[]> {
    this.#checkOpen();
    const prefix = statusIndexPrefix('in_progress');
    const keys = await this.#db.keys({ gte: prefix, lt: prefixEnd(prefix) }).all();
    const ids = keys.map(taskIdOfKey);
    const raws = await this.#db.getMany(ids.map(summaryKey));
    const out: string[] = [];
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      const raw = raws[i];
      if (raw === undefined) continue;
      try {
        if (isRecoverable(this.#summary(id, summaryKey(id), raw), await this.getLease(id), now, instance)) out.push(id);
      } catch {
        // An unreadable summary or lease: return the task, so the engine loads it, finds what
        // is corrupt and isolates that one task instead of the whole scan failing.
        out.push(id);
      }
    }
    return sortIds(out);
  }
}

const EMPTY_VALUE = Buffer.alloc(0);

/**
 * Index maintenance for a summary change; only when status or workflow moved. The previous
 * workflow's keys are built before the current one's, as TaskKeys caches one workflow at a time.
 */
function indexOps(keys: TaskKeys, prev: TaskSummary | undefined, next: TaskSummary, ops: BatchOp[]): void {
  if (prev && prev.status === next.status && prev.workflow === next.workflow) return;
  const workflowMoved = prev?.workflow !== next.workflow;
  if (prev) {
    ops.push({ type: 'del', key: keys.statusIndex(prev.status, prev.workflow) });
    if (workflowMoved) ops.push({ type: 'del', key: keys.workflowIndex(prev.workflow) });
  }
  ops.push({ type: 'put', key: keys.statusIndex(next.status, next.workflow), value: EMPTY_VALUE });
  if (workflowMoved) ops.push({ type: 'put', key: keys.workflowIndex(next.workflow), value: EMPTY_VALUE });
}

/** A Buffer view of encoded bytes, without the copy `Buffer.from(uint8array)` makes. */
function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

function parseJson(raw: Buffer, key: Buffer): unknown {
  try {
    const v: unknown = JSON.parse(raw.toString('utf8'));
    if (typeof v !== 'object' || v === null) throw new Error('not a JSON object');
    return v;
  } catch (err) {
    throw new HistoryCorruptError(describeKey(key), (err as Error).message, { cause: err });
  }
}

function sortIds(ids: string[]): string[] {
  return ids.sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
}

/** The innermost cause's message (`ENOTDIR: not a directory, mkdir '…'`): LevelDB's own is generic. */
function osCause(err: unknown): string {
  let e = err as { message?: unknown; cause?: unknown } | undefined;
  for (let i = 0; i < 5 && e && typeof e.cause === 'object' && e.cause !== null; i++) e = e.cause as typeof e;
  return typeof e?.message === 'string' ? e.message : String(err);
}

/** classic-level reports a held lock as LEVEL_LOCKED, directly or as the open error's cause. */
function isLockedError(err: unknown): boolean {
  for (let e = err as { code?: unknown; cause?: unknown } | undefined, i = 0; e && i < 5; e = e.cause as typeof e, i++) {
    if (e.code === 'LEVEL_LOCKED') return true;
  }
  return false;
}
