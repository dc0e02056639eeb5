/**
 * The storage contract. `LevelHistoryStore` (default), `MemoryHistoryStore` and
 * `PostgresHistoryStore` implement it; test/store/contract.ts runs one suite on each.
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

export interface HistoryStore {
  /** Directory or URL, for messages. */
  readonly location: string;
  /**
   * True when opening the store proves every earlier writer dead (LevelDB's process lock,
   * an in-memory store): leases of other instances are void at once and recovery need not wait.
   */
  readonly exclusive: boolean;

  open(): Promise<void>;
  close(): Promise<void>;

  /** Appends events atomically (all or nothing) with the derived summary and optional lease. */
  append(taskId: string, events: readonly HistoryEvent[], options: AppendOptions): Promise<AppendResult>;

  readEvents(taskId: string, options?: ReadOptions): Promise<HistoryEvent[]>;
  /** Streams a long history in pages without loading it whole. */
  iterateEvents(taskId: string, options?: ReadOptions): AsyncIterable<HistoryEvent>;
  getSummary(taskId: string): Promise<TaskSummary | undefined>;
  listTasks(options?: ListOptions): Promise<TaskPage>;

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
   */
  listRecoverable(now: number, instance: string): Promise<string[]>;

  putSnapshot(taskId: string, snapshot: StoredSnapshot): Promise<void>;
  getSnapshot(taskId: string): Promise<StoredSnapshot | undefined>;

  /** Deletes a task's history, summary, lease, snapshot and corrupt mark. */
  deleteTask(taskId: string): Promise<void>;
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
