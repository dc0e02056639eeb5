/**
 * The default {@link HistoryStore}: one LevelDB directory through `level`, owned by one
 * process (LevelDB's lock). docs/storage.md describes the key layout, group commit and
 * why the append path does no read I/O. Here: open and close, the lock on a task's head and
 * every write; the head cache is level-heads.ts's, the reads level-reads.ts's, the recovery scans
 * (claimDueWork, listRecoverable) level-claims.ts's, the checks at open level-open.ts's.
 */
import { Level } from 'level';
import { TurnlogError, invalidArgument, isHistoryUnreadable } from '../errors.js';
import { encodeEvent } from '../history/codec.js';
import { checkRefBytes, externalize } from './payload-refs.js';
import { isLaterCut } from './task-head.js';
import { type HistoryEvent, type Lease, type TaskSummary } from '../history/events.js';
import type { LeaseRequest } from '../history/lease.js';
import { GroupCommitter, type BatchOp } from './group-commit.js';
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
  checkTaskId,
  corruptKey,
  eventKey,
  payloadKey,
  payloadRange,
  eventRange,
  leaseKey,
  prefixEnd,
  prefixOnly,
  snapshotKey,
  sortIds,
  statusIndexPrefix,
  summaryKey,
  taskIdOfKey,
  TaskKeys,
} from './keys.js';
import { LevelHeads, type HeadEntry, type TailHint } from './level-heads.js';
import { LevelReads } from './level-reads.js';
import { LevelClaims } from './level-claims.js';
import { checkDirectory, checkFormat, deriveCancelRequested, openError } from './level-open.js';
import { decodeEventRecord } from './level-records.js';
import { encodeLease, encodeSummary } from './records.js';
import {
  EMPTY_HEAD,
  applyAppend,
  applyClaim,
  applyRelease,
  applyRenew,
  isPurgeable,
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
  readonly supports = { exclusive: true, watch: false, claim: false, groupCommit: true, flowLimits: false } as const;
  // Built in open(), after the directory check: a Level opens itself (and creates its files)
  // one microtask after construction unless open() is called first.
  #db!: Level<Buffer, Buffer>;
  readonly #sync: boolean;
  readonly #create: boolean;
  readonly #refBytes: number | undefined;
  /** The head cache (level-heads.ts) and the reads over it (level-reads.ts). */
  readonly #cache: LevelHeads;
  readonly #reads: LevelReads;
  readonly #claims: LevelClaims;
  // The cache's maps, held here too: the append path reads them as its own fields.
  readonly #heads: Map<string, HeadEntry>;
  readonly #snapshotHints: Map<string, Buffer | undefined>;
  readonly #tailHints: Map<string, TailHint>;
  /** The head count at which the next eviction walk runs (a walk that freed too little waits for more heads). */
  #evictAt: number;
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
    this.#evictAt = maxHeads;
    this.#cache = new LevelHeads(maxHeads, this);
    this.#reads = new LevelReads(this.#cache, this, () => this.#checkOpen(), (taskId, fn) => this.#withHead(taskId, fn));
    this.#claims = new LevelClaims(this.#cache, this.#reads, this);
    this.#heads = this.#cache.heads;
    this.#snapshotHints = this.#cache.snapshotHints;
    this.#tailHints = this.#cache.tailHints;
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
        for (const t of tasks) this.#cache.drop(t);
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
      await checkDirectory(this.location, this.#create);
      this.#db = new Level<Buffer, Buffer>(this.location, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
      this.#cache.db = this.#db;
      await this.#db.open({ createIfMissing: this.#create });
    } catch (err) {
      this.#state = 'closed';
      throw openError(this.location, err);
    }
    try {
      await checkFormat(this.#db, this.location);
      this.#state = 'open';
      // Before any head is loaded: the rewritten summaries are read from disk by their first use.
      await deriveCancelRequested(this.#db, (taskId) => this.readEvents(taskId));
    } catch (err) {
      this.#state = 'closed';
      await this.#db.close();
      throw err;
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
  // Heads (the cache, its loads, eviction and a claim's read-ahead: level-heads.ts)

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
      if (!fresh) entry.ready = this.#cache.load(taskId, entry);
      this.#heads.set(taskId, entry);
      if (this.#heads.size > this.#evictAt) this.#evictAt = this.#cache.evict();
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
        if (this.#heads.get(taskId) === entry) this.#cache.drop(taskId);
        throw err;
      },
    );
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
    this.#cache.cuts++;
    // A later cut already written (another engine's, racing on a shared store) stands: this
    // one's state ends before events that are gone, so writing it would leave a hole.
    const key2 = eventKey(taskId, 2);
    const [raw] = (await this.#db.getMany([key2])) as (Buffer | undefined)[];
    if (raw !== undefined && isLaterCut(decodeEventRecord(taskId, key2, raw), compacted.throughEventId)) return;
    const ops: BatchOp[] = [{ type: 'put', key: key2, value: asBuffer(encodeEvent(compacted)) }];
    for (let id = 3; id <= compacted.throughEventId; id++) ops.push({ type: 'del', key: eventKey(taskId, id) });
    await this.#committer.submit(taskId, ops, this.#sync, () => void this.#cache.cuts++);
  }

  async deleteTask(taskId: string): Promise<void> {
    this.#snapshotHints.delete(taskId);
    this.#tailHints.delete(taskId);
    this.#cache.cuts++;
    // A task whose last event cannot be decoded has no head; delete it by key range instead,
    // so a corrupt task can still be removed or replaced (`turnlog import --force`).
    await this.#deleteWithHead(taskId).catch((err: unknown) => {
      if (!isHistoryUnreadable(err)) throw err;
      return this.#deleteByKeys(taskId);
    });
    // Its large payloads after the events: a crash in between leaves unreferenced bytes, never a
    // history that references a missing payload.
    this.#cache.cuts++;
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
    this.#cache.drop(taskId);
    await this.#committer.submit(taskId, ops, this.#sync, () => this.#cache.drop(taskId));
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
        if (h.pending === EMPTY_HEAD && h.ready === null && this.#heads.get(taskId) === h) this.#cache.drop(taskId);
      });
    });
  }

  async purgeCompleted(olderThanMs: number, now: number): Promise<string[]> {
    this.#checkOpen();
    const prefix = statusIndexPrefix('completed');
    const ids = await this.#db.keys({ gte: prefix, lt: prefixEnd(prefix) }).all();
    const taskIds = ids.map(taskIdOfKey);
    const summaries = await this.#reads.summaries(taskIds, true);
    // A task the engine isolated as corrupt is kept for inspection, whatever its age.
    const marked = await this.#reads.marks();
    const purge: string[] = [];
    for (let i = 0; i < taskIds.length; i++) {
      const s = summaries[i];
      if (s && isPurgeable(s, olderThanMs, now) && !marked.has(taskIds[i]!)) purge.push(taskIds[i]!);
    }
    await Promise.all(purge.map((id) => this.deleteTask(id)));
    return sortIds(purge);
  }

  // ---------------------------------------------------------------------------------------------
  // Reads (level-reads.ts; they see what is on disk: queued appends become visible once they resolve)

  readEvents(taskId: string, options: ReadOptions = {}): Promise<HistoryEvent[]> {
    return this.#reads.readEvents(taskId, options);
  }

  iterateEvents(taskId: string, options: ReadOptions = {}): AsyncIterable<HistoryEvent> {
    return this.#reads.iterateEvents(taskId, options);
  }

  getSummary(taskId: string): Promise<TaskSummary | undefined> {
    return this.#reads.getSummary(taskId);
  }

  getLease(taskId: string): Promise<Lease | undefined> {
    return this.#reads.getLease(taskId);
  }

  /**
   * A claimed task's snapshot, tail and lease from what its claim read (level-heads.ts), with no read
   * and no await: recovery's load was six promises and three store calls more a task. Without
   * those hints (or with a payload reference to resolve) it reads as getSnapshot, readEvents, getLease.
   */
  readTaskStart(taskId: string, limit: number): Promise<TaskStart> {
    return this.#reads.readTaskStart(taskId, limit);
  }

  /**
   * What {@link readTaskStart} gives a claimed task, from its claim's read, synchronously and
   * once; undefined when it would read (then readTaskStart reads). The task cache builds a claimed
   * task's entry with it in the claim's tick: no promise nor await for its load.
   */
  takeTaskStart(taskId: string, limit: number): TaskStart | undefined {
    // Closed: nothing handed out, and readTaskStart's reads report the closed store.
    return this.#state === 'open' ? this.#cache.take(taskId, limit) : undefined;
  }

  getSnapshot(taskId: string): Promise<StoredSnapshot | undefined> {
    return this.#reads.getSnapshot(taskId);
  }

  listTasks(options: ListOptions = {}): Promise<TaskPage> {
    return this.#reads.listTasks(options);
  }


  async markCorrupt(mark: CorruptMark): Promise<void> {
    this.#checkOpen();
    checkTaskId(mark.taskId);
    // Not through the task's head: loading it may be what fails. Only this key is written.
    const value = { taskId: mark.taskId, key: mark.key, code: mark.code, message: mark.message, time: mark.time };
    await this.#db.put(corruptKey(mark.taskId), Buffer.from(JSON.stringify(value)), { sync: this.#sync });
  }

  listCorrupt(): Promise<CorruptMark[]> {
    return this.#reads.listCorrupt();
  }


  // ---------------------------------------------------------------------------------------------
  // Recovery scans (level-claims.ts)

  /** From the status index, a page at a time (store/due-work.ts has the rules). */
  async claimDueWork(request: ClaimRequest): Promise<DueBatch> {
    this.#checkOpen();
    return this.#claims.claimDueWork(request);
  }

  // Not async: the scan's own async function is the one promise, as when it was written here.
  listRecoverable(now: number, instance: string): Promise<string[]> {
    try {
      this.#checkOpen();
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#claims.listRecoverable(now, instance);
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
