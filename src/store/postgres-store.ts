/**
 * A {@link HistoryStore} on PostgreSQL through `pg` (node-postgres), shared by many engines on
 * many hosts. `pg` is an optional peer dependency, loaded on open(), never at import.
 * Events are the same protobuf bytes the Level store keeps. Lease expiry is decided on the
 * database's clock (docs/decisions.md, docs/scale-out.md).
 */
import { TurnlogError, invalidArgument } from '../errors.js';
import type { HistoryEvent, Lease, TaskSummary } from '../history/events.js';
import type { LeaseRequest } from '../history/lease.js';
import type {
  AppendNotice,
  CorruptMark,
  AppendOptions,
  AppendResult,
  ClaimRequest,
  DueBatch,
  HistoryStore,
  ListOptions,
  ReadOptions,
  SlotAnswer,
  SlotRequest,
  StoredSnapshot,
  TaskStart,
  StoreSupports,
  TaskPage,
} from './history-store.js';
import { checkTaskId } from './keys.js';
import { checkClaim } from './due-work.js';
import { iterateInPages } from './paging.js';
import { PgStoreContext } from './postgres-context.js';
import { PgAppender } from './postgres-appender.js';
import { corruptMarks, databaseNow, getLease, getSnapshot, getSummary, listTasks, readEvents, readTaskStart, sizeBytes } from './postgres-reads.js';
import { claimLease, releaseLease, renewLease } from './postgres-leases.js';
import { compactHistory, deleteTask, markCorrupt, purgeCompleted, putSnapshot } from './postgres-retention.js';
import { claimDue, claimOrphans, recoverableSql, releaseDue, type ClaimedOrphan, type OrphanClaim } from './postgres-claims.js';
import { acquireSlot, releaseSlot, renewSlots } from './postgres-limits.js';
import { PgListener, noticeChannel } from './postgres-listener.js';
import { Notifier } from './postgres-notifier.js';
import { guard, loadPg, redact } from './postgres-rows.js';
import { appliedVersions, migrate, migrationGap, unknownMigrationsError } from './postgres-migrations.js';
import type { PgPoolLike, PostgresStoreOptions } from './postgres-options.js';

export { recoverableSql, type ClaimedOrphan, type OrphanClaim } from './postgres-claims.js';
export { isConnectionLoss, quoteLiteral } from './postgres-rows.js';
export type { PgClientLike, PgPoolLike, PostgresStoreOptions, StoreLogger } from './postgres-options.js';

/** The default `noticeIntervalMs`. */
const NOTICE_INTERVAL_MS = 10;

/**
 * Creates (does not open) a PostgreSQL history store. `pg` is loaded on `open()`.
 *
 * @example
 * const store = createPostgresStore({ connectionString: 'postgres://postgres@127.0.0.1:5432/test' });
 * const engine = await Engine.open({ store, workflows: [agent] });
 */
export function createPostgresStore(options: PostgresStoreOptions): PostgresHistoryStore {
  return new PostgresHistoryStore(options);
}

/** True for a PostgreSQL connection URL (`postgres://…` or `postgresql://…`). */
export function isPostgresUrl(spec: string): boolean {
  return /^postgres(ql)?:\/\//i.test(spec);
}

/**
 * Splits `?schema=name` off a PostgreSQL URL (pg would pass it to the server as a setting).
 * TURNLOG_INVALID_ARGUMENT for a URL that does not parse.
 */
export function parsePostgresUrl(url: string): { connectionString: string; schema?: string } {
  let u: URL;
  try {
    u = new URL(url);
  } catch (err) {
    throw new TurnlogError('TURNLOG_INVALID_ARGUMENT', `Store URL ${redact(url)} is not a valid PostgreSQL URL. Use postgres://user@host:5432/database[?schema=name].`, { cause: err });
  }
  const schema = u.searchParams.get('schema');
  if (schema === null) return { connectionString: url };
  u.searchParams.delete('schema');
  return { connectionString: u.toString(), schema };
}

/**
 * PostgreSQL-backed history store. Not exclusive: many engines share it, and a lease of another
 * instance is honoured until it expires on the database clock. Each append is one transaction
 * that locks the task's summary and lease rows, checks generation then last event id, and writes
 * events, summary and lease together.
 */
export class PostgresHistoryStore implements HistoryStore {
  readonly location: string;
  readonly exclusive = false;
  /** `claim: true`: `claimDueWork` claims (SKIP LOCKED, `due_claims`); orphans' leases are claimed by `claimOrphans`. */
  readonly supports: StoreSupports;
  /** The PostgreSQL schema holding the tables. */
  readonly schema: string;
  /** The private state every part of the store shares (postgres-context.ts). */
  readonly #ctx: PgStoreContext;
  readonly #s: string;
  #ownsPool = false;
  #opening: Promise<void> | null = null;
  #appliedOnOpen: number[] = [];
  /** Appends: group commit, the one-statement and the locked paths (postgres-appender.ts). */
  readonly #appender: PgAppender;
  /** The LISTEN connection, made on the first `watch()`. */
  #listener: PgListener | undefined;
  /** The NOTIFY channel of this schema (docs/scale-out.md#notify). */
  readonly channel: string;
  /** Appends written by the one-statement path and by the locked path, for the benchmark and tests. */
  readonly appendPaths: { oneStatement: number; locked: number };

  constructor(options: PostgresStoreOptions) {
    if (!options || (options.connectionString === undefined) === (options.pool === undefined)) {
      throw invalidArgument('createPostgresStore needs exactly one of connectionString or pool.');
    }
    if (options.readOnly && options.pool !== undefined) {
      // Silently ignored, the store would write through a pool its caller asked to be read-only.
      throw invalidArgument('createPostgresStore readOnly applies only to a pool the store creates: pass connectionString, or make your own pool read-only (options: \'-c default_transaction_read_only=on\').');
    }
    const max = options.max;
    if (max !== undefined && options.pool === undefined && !(Number.isInteger(max) && max >= 2)) {
      // pg took 0 as its default, 2.5 as 3, and with -1 never handed out a connection: open() waited forever.
      // With 1, an engine's LISTEN connection (watch) held it, and every append waited forever.
      throw invalidArgument(`createPostgresStore max ${String(max)} must be an integer of at least 2 (connections in the pool the store creates: one listens for appends while an engine runs; default 10).`);
    }
    this.#ctx = new PgStoreContext(options);
    this.schema = this.#ctx.schema;
    this.#s = this.#ctx.s;
    this.location = this.#ctx.location;
    this.channel = noticeChannel(this.schema);
    this.supports = { exclusive: false, watch: true, claim: true, groupCommit: options.groupCommit !== false, flowLimits: true };
    this.#appender = new PgAppender(this.#ctx);
    this.appendPaths = this.#appender.appendPaths;
    const ni = options.noticeIntervalMs;
    if (ni !== undefined && !(typeof ni === 'number' && ni >= 0 && ni <= 60_000)) {
      throw invalidArgument(`createPostgresStore noticeIntervalMs ${String(ni)} must be a number of ms from 0 to 60000 (default ${NOTICE_INTERVAL_MS}).`);
    }
  }

  /** Batch statements that failed other than by contention or a lost connection (their appends took the locked path). */
  get batchFallbacks(): number {
    return this.#appender.batchFallbacks;
  }

  open(): Promise<void> {
    if (this.#ctx.state === 'open') return Promise.resolve();
    if (this.#opening) return this.#opening;
    this.#ctx.state = 'opening';
    this.#opening = this.#doOpen().finally(() => {
      this.#opening = null;
    });
    return this.#opening;
  }

  async #doOpen(): Promise<void> {
    let pool = this.#ctx.options.pool;
    if (!pool) {
      const pg = await loadPg();
      const config: Record<string, unknown> = {
        connectionString: this.#ctx.options.connectionString,
        max: this.#ctx.options.max ?? 10,
        connectionTimeoutMillis: 10_000,
      };
      if (this.#ctx.options.readOnly) config['options'] = '-c default_transaction_read_only=on';
      pool = new pg.Pool(config) as PgPoolLike;
      // An idle client's error (server restart) must not crash the process; the next query reports it.
      (pool as unknown as { on(e: string, f: () => void): void }).on('error', () => undefined);
      this.#ownsPool = true;
    }
    // Every connection the pool makes gets an error listener for its whole life: a server that
    // terminates a checked-out connection between two queries (pg_terminate_backend, a restart)
    // makes pg emit 'error' on the client, which would otherwise be an uncaught exception that
    // kills the process. The failure still reaches the caller through the query that uses it.
    (pool as unknown as { on?(e: string, f: (c: object) => void): void }).on?.('connect', guard);
    this.#ctx.pool = pool;
    this.#ctx.notifier = new Notifier(() => pool.connect(), this.channel, this.#ctx.options.noticeIntervalMs ?? NOTICE_INTERVAL_MS);
    try {
      if (this.#ctx.options.migrate === false) await this.#checkSchema();
      else this.#appliedOnOpen = await this.migrate();
    } catch (err) {
      this.#ctx.state = 'closed';
      if (this.#ownsPool) await pool.end().catch(() => undefined);
      this.#ctx.pool = undefined;
      if (err instanceof TurnlogError) throw err;
      throw new TurnlogError(
        'TURNLOG_STORE_OPEN',
        `Store ${this.location} could not be opened (${(err as Error).message}). Check the connection string, that PostgreSQL is running and accepts this user.`,
        { cause: err },
      );
    }
    this.#ctx.state = 'open';
  }

  /**
   * Applies pending schema migrations (idempotent; safe from many processes at once).
   * Returns the versions applied now. `open()` calls it unless `migrate: false`.
   */
  async migrate(): Promise<number[]> {
    const pool = this.#ctx.pool;
    if (!pool) throw this.#ctx.closedError();
    const client = await pool.connect();
    guard(client);
    try {
      return await migrate(client, this.schema);
    } finally {
      client.release();
    }
  }

  /** The migration versions the last `open()` applied (empty when the schema was current). */
  get migrationsApplied(): readonly number[] {
    return this.#appliedOnOpen;
  }

  async #checkSchema(): Promise<void> {
    const client = await this.#ctx.pool!.connect();
    guard(client);
    try {
      const gap = migrationGap((await appliedVersions(client, this.schema)) ?? []);
      if (gap.unknown.length > 0) throw unknownMigrationsError(this.schema, gap.unknown);
      if (gap.missing.length > 0) {
        throw new TurnlogError(
          'TURNLOG_STORE_NOT_FOUND',
          `Store ${this.location} has no turnlog schema at the current version (migration${gap.missing.length > 1 ? 's' : ''} ${gap.missing.join(', ')} not applied). Run \`turnlog migrate --store <url>\`, or open an engine on it, first.`,
        );
      }
    } finally {
      client.release();
    }
  }

  async close(): Promise<void> {
    if (this.#opening) await this.#opening.catch(() => undefined);
    if (this.#ctx.state !== 'open') return;
    // Writes already called finish first, as the Level store drains its group commit.
    await Promise.allSettled([...this.#ctx.queues.values()]);
    await this.#ctx.notifier?.drain();
    this.#ctx.state = 'closed';
    this.#ctx.heads.clear();
    this.#appender.releaseKept();
    await this.#listener?.stop();
    this.#listener = undefined;
    const pool = this.#ctx.pool;
    this.#ctx.pool = undefined;
    if (pool && this.#ownsPool) await pool.end();
  }

  // ---------------------------------------------------------------------------------------------
  // Writes: appends (postgres-appender.ts), leases (postgres-leases.ts), snapshots and retention
  // (postgres-retention.ts); each write to a task runs after this store's earlier ones to it.

  append(taskId: string, events: readonly HistoryEvent[], options: AppendOptions): Promise<AppendResult> {
    return this.#appender.append(taskId, events, options);
  }

  claimLease(taskId: string, request: LeaseRequest): Promise<Lease> {
    return claimLease(this.#ctx, taskId, request);
  }

  renewLease(taskId: string, lease: Lease, durationMs: number, now: number): Promise<Lease> {
    return renewLease(this.#ctx, taskId, lease, durationMs, now);
  }

  releaseLease(taskId: string, lease: Lease, now: number): Promise<void> {
    return releaseLease(this.#ctx, taskId, lease, now);
  }

  putSnapshot(taskId: string, snapshot: StoredSnapshot): Promise<void> {
    return putSnapshot(this.#ctx, taskId, snapshot);
  }

  deleteTask(taskId: string): Promise<void> {
    return deleteTask(this.#ctx, taskId);
  }

  /** Compaction: event 2 becomes `compacted`, events 3..throughEventId go, in one transaction. */
  compactHistory(taskId: string, compacted: HistoryEvent): Promise<void> {
    return compactHistory(this.#ctx, taskId, compacted);
  }

  markCorrupt(mark: CorruptMark): Promise<void> {
    return markCorrupt(this.#ctx, mark);
  }

  /** Retention: completed tasks older than `olderThanMs` before `now` (the caller's clock), never a corrupt one. */
  purgeCompleted(olderThanMs: number, now: number): Promise<string[]> {
    return purgeCompleted(this.#ctx, olderThanMs, now);
  }

  // ---------------------------------------------------------------------------------------------
  // Reads (postgres-reads.ts): single statements, so they never block writers and see committed data only.

  readEvents(taskId: string, options: ReadOptions = {}): Promise<HistoryEvent[]> {
    return readEvents(this.#ctx, taskId, options);
  }

  iterateEvents(taskId: string, options: ReadOptions = {}): AsyncIterable<HistoryEvent> {
    return iterateInPages((o) => this.readEvents(taskId, o), options);
  }

  /** Snapshot, first page after it and lease in one statement (a task's first load: one round trip, not three). */
  readTaskStart(taskId: string, limit: number): Promise<TaskStart> {
    return readTaskStart(this.#ctx, taskId, limit);
  }

  getSummary(taskId: string): Promise<TaskSummary | undefined> {
    return getSummary(this.#ctx, taskId);
  }

  /** The lease with `expiresAt` on the database clock (ms since the epoch). */
  getLease(taskId: string): Promise<Lease | undefined> {
    return getLease(this.#ctx, taskId);
  }

  getSnapshot(taskId: string): Promise<StoredSnapshot | undefined> {
    return getSnapshot(this.#ctx, taskId);
  }

  listTasks(options: ListOptions = {}): Promise<TaskPage> {
    return listTasks(this.#ctx, options);
  }

  async listCorrupt(): Promise<CorruptMark[]> {
    this.#ctx.checkedPool();
    return [...(await corruptMarks(this.#ctx)).values()];
  }

  /** Bytes the store's tables use on the server, with indexes and TOAST (`turnlog stats`). */
  sizeBytes(): Promise<number> {
    return sizeBytes(this.#ctx);
  }

  /** The database clock, ms since the epoch (what lease expiry is measured against). */
  databaseNow(): Promise<number> {
    return databaseNow(this.#ctx);
  }

  // ---------------------------------------------------------------------------------------------
  // Claims (postgres-claims.ts) and flow limits (postgres-limits.ts), each one transaction.

  /**
   * A real claim (postgres-claims.ts): due tasks locked `FOR UPDATE SKIP LOCKED`, each claimed
   * for `request.instance` until released or `claimMs` on the database clock; lease expiry on the
   * database clock, retention on the caller's. Ordered by phase then task id; cursor `<phase>.<task id>`.
   */
  async claimDueWork(request: ClaimRequest): Promise<DueBatch> {
    checkClaim(request);
    return this.#ctx.tx((c) => claimDue(c, this.#s, request));
  }

  acquireSlot(request: SlotRequest): Promise<SlotAnswer> {
    return this.#ctx.tx((c) => acquireSlot(c, this.#s, request));
  }

  async releaseSlot(limit: string, slotId: string): Promise<void> {
    await this.#ctx.tx((c) => releaseSlot(c, this.#s, limit, slotId));
  }

  async renewSlots(instance: string, slotIds: readonly string[], leaseMs: number): Promise<void> {
    if (slotIds.length > 0) await this.#ctx.tx((c) => renewSlots(c, this.#s, instance, slotIds, leaseMs));
  }

  async releaseDueWork(taskIds: readonly string[], instance: string): Promise<void> {
    this.#ctx.checkedPool();
    for (const id of taskIds) checkTaskId(id);
    await this.#ctx.tx((c) => releaseDue(c, this.#s, taskIds, instance));
  }

  async listRecoverable(_now: number, _instance: string): Promise<string[]> {
    const rows = await this.#ctx.query(recoverableSql(this.#s), []);
    return rows.map((r: { task_id: string }) => r.task_id);
  }

  /**
   * Claims up to `limit` orphaned tasks (in progress, lease missing or expired on the database
   * clock) for `instance`, `FOR UPDATE SKIP LOCKED` (postgres-claims.ts): engines claiming at once
   * get disjoint tasks, each with this instance's lease (generation + 1) and the one it replaced.
   */
  async claimOrphans(request: OrphanClaim): Promise<ClaimedOrphan[]> {
    this.#ctx.checkedPool();
    if (!Number.isInteger(request.limit) || request.limit < 1) {
      throw invalidArgument(`claimOrphans limit ${String(request.limit)} must be a positive integer.`);
    }
    return this.#ctx.tx((c) => claimOrphans(c, this.#s, request));
  }

  // ---------------------------------------------------------------------------------------------
  // Notices (postgres-listener.ts, postgres-notifier.ts) and counters

  /**
   * Calls `listener` after every append committed to this schema, by any engine (LISTEN/NOTIFY on
   * one connection taken from the pool for good; it reconnects, then reports `resync`).
   */
  watch(listener: (notice: AppendNotice) => void): () => void {
    const pool = this.#ctx.checkedPool();
    this.#listener ??= new PgListener(() => pool.connect(), this.channel);
    return this.#listener.subscribe(listener);
  }

  /** Resolves once the LISTEN connection listens (tests; `watch` works without awaiting it). */
  async listening(): Promise<boolean> {
    await this.#listener?.ready();
    return this.#listener?.listening ?? false;
  }

  /** Group-commit counters: batches written and appends in them (0 and 0 with `groupCommit: false`). */
  groupCommitStats(): { batches: number; appends: number } {
    return this.#appender.groupCommitStats();
  }

  /** Each group commit's number of appends, as it goes out (none with `groupCommit: false`). */
  onCommit(listener: (appends: number) => void): () => void {
    return this.#appender.onCommit(listener);
  }

  /** Notifying transactions sent (each carries the notices of every append committed before it). */
  notifyTransactions(): number {
    return this.#ctx.notifier?.sent ?? 0;
  }

  /** How many times the LISTEN connection has connected (1, then one more per reconnect). */
  listenerConnects(): number {
    return this.#listener?.connects ?? 0;
  }
}
