/**
 * The storage contract, in roles (log, index, leases, claims, snapshots, retention) with a
 * `supports` manifest; `HistoryStore` is all of them. `LevelHistoryStore` (default),
 * `MemoryHistoryStore` and `PostgresHistoryStore` implement it; `storeContract` (turnlog/testing)
 * runs one suite on each.
 * Only the engine writes a store (invariant 2).
 */
import type { HistoryEvent, Lease, TaskStatus, TaskSummary } from '../history/events.js';
import type { LeaseRequest } from '../history/lease.js';

export interface AppendOptions {
  /** The task's last event id as the caller knows it; 0 creates the task. Else ConcurrencyError. */
  expectedLastEventId: number;
  /** Generation the events are written under; below the task's lease generation → StaleGenerationError. */
  generation: number;
  /**
   * A lease record to write in the same batch (a claim at turn start). Checked with the
   * acquisition table against the current lease; its generation must be ≥ the current one.
   */
  lease?: Lease;
  /** Override the store's durability for this append. */
  sync?: boolean;
  /**
   * With `expectedLastEventId: 0` only: the caller vouches that nothing is stored under this id
   * (the engine names such tasks with its time and 96 random bits), so a store may skip the read that proves
   * the task new. A store may ignore it and check anyway; it must not refuse it.
   */
  fresh?: boolean;
}

export interface AppendResult {
  lastEventId: number;
  summary: TaskSummary;
}

export interface ReadOptions {
  /** First event id to return (inclusive), default 1. */
  fromEventId?: number;
  /** Last event id to return (inclusive), default the end. */
  toEventId?: number;
  /**
   * At most this many events. A store returns exactly `min(limit, events in the range)`: a read
   * shorter than its limit means the range has no more (the engine loads a history in pages and
   * stops at the first short one; the contract suite checks it).
   */
  limit?: number;
}

export interface ListOptions {
  status?: TaskStatus;
  workflow?: string;
  /** Page size, default 100. */
  limit?: number;
  /** Opaque cursor from a previous page's `next`. */
  cursor?: string;
}

export interface TaskPage {
  tasks: TaskSummary[];
  /** Pass as `cursor` for the next page; absent on the last page. */
  next?: string;
}

/** A folded-state snapshot kept beside a history (the replayer's serialized state). */
export interface StoredSnapshot {
  /** The last event id folded into `data`. */
  eventId: number;
  data: Uint8Array;
}

/**
 * A task whose stored records cannot be read (docs/errors.md#turnlog_history_corrupt). The
 * engine writes one when it isolates such a task; the task's own records are never touched.
 */
export interface CorruptMark {
  taskId: string;
  /** The record that failed, as text: `events/<task>/<id>`, `summary/<task>`, … */
  key: string;
  /** The error's code, e.g. TURNLOG_HISTORY_CORRUPT. */
  code: string;
  message: string;
  /** When the engine found it (engine clock). */
  time: number;
}

/**
 * What a shared store tells its watchers: a task's history grew to `lastEventId` (an append
 * committed, by any engine), or `resync`: notices may have been missed, re-read what you hold.
 */
export type AppendNotice = { taskId: string; lastEventId: number; resync?: undefined } | { resync: true };

/**
 * What a store can do beyond the core contract. The engine, the CLI and the UI read this
 * manifest instead of testing a store's class (`instanceof`), so a third-party store is treated
 * by what it declares.
 */
export interface StoreSupports {
  /**
   * Opening the store proves every earlier writer dead (LevelDB's process lock, an in-memory
   * store): leases of other instances are void at once and recovery need not wait for them.
   */
  readonly exclusive: boolean;
  /** The store tells a caller that another writer appended (`watch`, LISTEN/NOTIFY on PostgreSQL). */
  readonly watch: boolean;
  /**
   * `claimDueWork` hands a task to one caller at a time even when many engines share the store
   * (`FOR UPDATE SKIP LOCKED`, a claim that expires after `claimMs`, `releaseDueWork`). False: the
   * claim is a plain read, safe only with one writer or with the fencing of leases and expected
   * ids (which every store has) to sort out a tie.
   */
  readonly claim: boolean;
  /** Concurrent appends share one durable write (store/group-commit.ts). */
  readonly groupCommit: boolean;
  /** Flow-limit slots and rates shared by every engine of the store ({@link FlowLimitStore}). */
  readonly flowLimits?: boolean;
}

/** One flow-limit acquire on a shared store (docs/time.md#flow-limits). */
export interface SlotRequest {
  limit: string;
  /** Unique per acquire; released or renewed by it. */
  slotId: string;
  instance: string;
  /** Infinity: no concurrency cap. */
  concurrency: number;
  /** ms between starts at the steady rate (0: no rate) and the GCRA's tolerance (burst - 1 intervals). */
  intervalMs: number;
  toleranceMs: number;
  /** The slot expires this long after now on the store's clock unless renewed. */
  leaseMs: number;
}
/** Granted, or not now: `retryInMs` when the rate says when; absent when a slot must free first. */
export type SlotAnswer = { granted: true } | { granted: false; retryInMs?: number };

/** A store with `supports.flowLimits`: slots and rate shared by all engines, on the store's clock. */
export interface FlowLimitStore {
  acquireSlot(request: SlotRequest): Promise<SlotAnswer>;
  releaseSlot(limit: string, slotId: string): Promise<void>;
  renewSlots(instance: string, slotIds: readonly string[], leaseMs: number): Promise<void>;
}

/** Why a task was handed out by {@link WorkClaims.claimDueWork}. */
export type DueReason =
  /** In progress, and its lease is missing or expired (exclusive stores: held by another instance). */
  | 'in-progress'
  /** Created, no turn started yet. */
  | 'pending'
  /** Suspended with queued inputs, or with a task cancel pending (`summary.cancelRequested`). */
  | 'queued'
  /** Completed longer than the retention ago, and not marked corrupt: delete it. */
  | 'retention';

export interface DueTask {
  taskId: string;
  reason: DueReason;
}

export interface ClaimRequest {
  /** The caller's clock. A store on a shared clock (PostgreSQL) judges lease expiry by its own. */
  now: number;
  /** The claiming engine's instance; on an exclusive store every other instance's lease is void. */
  instance: string;
  /** At most this many tasks in the batch (≥ 1). */
  limit: number;
  /** Continue after the batch that returned this `next`. */
  cursor?: string;
  /** Also hand out completed tasks last updated at least this long before `now`. Absent: none. */
  retentionMs?: number;
  /**
   * Also hand out tasks whose next scheduled input falls due within this many ms after `now`
   * (reason `queued`), so the engine can arm their wake-up. Absent: only those already due.
   */
  horizonMs?: number;
  /** Only tasks due for these reasons (default: all four). */
  reasons?: readonly DueReason[];
  /**
   * A store with `supports.claim`: each task handed out is claimed for `instance` until
   * {@link WorkClaims.releaseDueWork} or this many ms on the store's clock (default 60,000);
   * other instances' claims skip it meanwhile. Other stores ignore it.
   */
  claimMs?: number;
}

export interface DueBatch {
  /** In order: in-progress, pending, queued, retention; by task id within each. */
  tasks: DueTask[];
  /** Pass as `cursor` for the next batch; absent once every due task was handed out. */
  next?: string;
}

/** Opening and closing; `location` names the store in messages. */
export interface StoreLifecycle {
  /** Directory or URL, for messages. */
  readonly location: string;
  /** What the store can do; consult it instead of the store's class. */
  readonly supports: StoreSupports;
  /** Same as `supports.exclusive` (kept for code written before the manifest). */
  readonly exclusive: boolean;
  open(): Promise<void>;
  close(): Promise<void>;
  /**
   * Optional, for metrics: calls `listener` with the number of writes that share each group
   * commit as it goes out (`turnlog.group_commit.batch_size`); returns its unsubscribe.
   */
  onCommit?(listener: (writes: number) => void): () => void;
}

/** The log: append and read one task's events. */
export interface EventLog {
  /** Appends events atomically (all or nothing) with the derived summary and optional lease. */
  append(taskId: string, events: readonly HistoryEvent[], options: AppendOptions): Promise<AppendResult>;
  readEvents(taskId: string, options?: ReadOptions): Promise<HistoryEvent[]>;
  /** Streams a long history in pages without loading it whole. */
  iterateEvents(taskId: string, options?: ReadOptions): AsyncIterable<HistoryEvent>;
  /**
   * Optional, for a store where each read is a round trip (PostgreSQL): what the engine reads
   * first when it loads a task, in one read: the snapshot, the first `limit` events after it (from
   * event `snapshot.eventId + 1`, or 1; a full page unless the history ends there, as `readEvents`)
   * and the lease. Must equal `getSnapshot`, `readEvents(taskId, { fromEventId, limit })` and
   * `getLease` made at one instant (the contract suite compares them). Without it the engine
   * makes those three reads.
   */
  readTaskStart?(taskId: string, limit: number): Promise<TaskStart>;
  /**
   * Optional, for a store that read a task's start ahead (the LevelDB store, for the tasks a
   * `claimDueWork` page handed out): what `readTaskStart` would return, synchronously and without
   * I/O, or undefined when it would have to read. The engine then loads the task without an await.
   */
  takeTaskStart?(taskId: string, limit: number): TaskStart | undefined;
}

/** What {@link EventLog.readTaskStart} returns. */
export interface TaskStart {
  snapshot: StoredSnapshot | undefined;
  /** Events from `(snapshot?.eventId ?? 0) + 1`, at most the limit, in order. */
  events: HistoryEvent[];
  lease: Lease | undefined;
}

/** Summaries (derived from histories) and listing. */
export interface TaskIndex {
  getSummary(taskId: string): Promise<TaskSummary | undefined>;
  listTasks(options?: ListOptions): Promise<TaskPage>;
}

/** Leases: who may write a task, and fencing by generation. */
export interface LeaseStore {
  getLease(taskId: string): Promise<Lease | undefined>;
  /** Claims with the acquisition table (history/lease.ts); LeaseHeldError for a foreign live lease. */
  claimLease(taskId: string, request: LeaseRequest): Promise<Lease>;
  /** Extends a lease the caller holds; StaleGenerationError or LeaseHeldError if it lost it. */
  renewLease(taskId: string, lease: Lease, durationMs: number, now: number): Promise<Lease>;
  /** Expires the caller's lease now (no-op if it no longer holds it). */
  releaseLease(taskId: string, lease: Lease, now: number): Promise<void>;
  /**
   * In-progress tasks whose lease is missing or expired at `now` (exclusive stores: not held by
   * `instance`). A store on a shared clock (PostgreSQL) judges expiry by its own clock instead.
   * The engine uses {@link WorkClaims.claimDueWork}; this stays for tools and older callers.
   */
  listRecoverable(now: number, instance: string): Promise<string[]>;
  /**
   * A store that judges lease expiry on its own clock (a shared store): that clock now, ms since
   * the epoch. Engines judge other instances' leases with it (runtime/store-clock.ts).
   */
  databaseNow?(): Promise<number>;
}

/** The claim of due work: what recovery, the periodic scan and retention act on. */
export interface WorkClaims {
  /**
   * A bounded batch of tasks that need a decision: in progress under a dead lease, pending,
   * suspended with queued inputs, and (with `retentionMs`) completed past the retention. Never a
   * task marked corrupt for retention. A task whose summary cannot be read is handed out as
   * `in-progress`, so the engine loads it, finds what is corrupt and isolates that one task.
   */
  claimDueWork(request: ClaimRequest): Promise<DueBatch>;
  /**
   * A store with `supports.claim`: ends `instance`'s claims on these tasks now, so another
   * engine's next claim can take them. Claims of other instances are left alone.
   */
  releaseDueWork?(taskIds: readonly string[], instance: string): Promise<void>;
}

/** Snapshots: a shortcut past the start of a long history. */
export interface SnapshotStore {
  putSnapshot(taskId: string, snapshot: StoredSnapshot): Promise<void>;
  getSnapshot(taskId: string): Promise<StoredSnapshot | undefined>;
}

/** Deleting histories, and the marks of tasks that cannot be read. */
export interface RetentionStore {
  /** Deletes a task's history, summary, lease, snapshot and corrupt mark. */
  deleteTask(taskId: string): Promise<void>;
  /**
   * Compaction (optional; the engine skips compaction on a store without it): replaces events
   * 2..`compacted.throughEventId` by `compacted` (event 2) in one atomic write. Events after
   * it, the summary and the lease are untouched.
   */
  compactHistory?(taskId: string, compacted: HistoryEvent): Promise<void>;
  /** Retention: deletes completed tasks whose last update is older than `olderThanMs` before `now`. Returns ids. Never a task marked corrupt. */
  purgeCompleted(olderThanMs: number, now: number): Promise<string[]>;
  /** Records that a task cannot be read; touches none of its records. `listTasks` shows it on the task's summary. */
  markCorrupt(mark: CorruptMark): Promise<void>;
  /** Every task marked corrupt, by task id. */
  listCorrupt(): Promise<CorruptMark[]>;

  /**
   * Optional, for stores shared by many engines: calls `listener` after every committed append
   * (any engine's, this one's included) and with `resync` after notices may have been lost.
   * Returns the unsubscribe function. Engines poll when a store has no `watch`.
   */
  watch?(listener: (notice: AppendNotice) => void): () => void;
}

/** The whole contract: every role. What `Engine.open({ store })` takes. */
export interface HistoryStore extends StoreLifecycle, EventLog, TaskIndex, LeaseStore, WorkClaims, SnapshotStore, RetentionStore, Partial<FlowLimitStore> {}
