/**
 * A {@link HistoryStore} on PostgreSQL through `pg` (node-postgres), shared by many engines on
 * many hosts. `pg` is an optional peer dependency, loaded on open(), never at import.
 * Events are the same protobuf bytes the Level store keeps. Lease expiry is decided on the
 * database's clock (docs/decisions.md, docs/scale-out.md).
 */
import { createHash } from 'node:crypto';
import { ConcurrencyError, HistoryCorruptError, TurnlogError, invalidArgument } from '../errors.js';
import { decodeEvent, encodeEvent } from '../history/codec.js';
import { checkRefBytes, externalize, resolveAll } from './payload-refs.js';
import { isLaterCut } from './task-head.js';
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
  StoreSupports,
  TaskPage,
} from './history-store.js';
import { checkTaskId } from './keys.js';
import { checkClaim } from './due-work.js';
import { claimDue, claimOrphans, recoverableSql, releaseDue, type ClaimedOrphan, type OrphanClaim } from './postgres-claims.js';
import { acquireSlot, releaseSlot, renewSlots } from './postgres-limits.js';

export { recoverableSql, type ClaimedOrphan, type OrphanClaim } from './postgres-claims.js';
import { decodeCursor, encodeCursor, pageLimit, iterateInPages, readBounds } from './paging.js';
import { Batcher } from './batcher.js';
import { PgListener, noticeChannel } from './postgres-listener.js';
import { Notifier } from './postgres-notifier.js';
import { batchKey, casBatchSql, casBatchValues, casSql, casStatement, planCas, type CasItem, type CasPlan } from './postgres-append.js';
import { CONNECTION_TRIES, ClockFrame, DB_NOW, LEASE_UPSERT, asBuffer, guard, isConnectionLoss, loadPg, quoteLiteral, redact, toLease, toSummary, unavailable, type LeaseRow, type SummaryRow } from './postgres-rows.js';

export { isConnectionLoss, quoteLiteral } from './postgres-rows.js';
import { appliedVersions, migrate, migrationGap, quoteSchema, unknownMigrationsError, type SqlClient } from './postgres-migrations.js';
import { applyAppend, applyClaim, applyRelease, applyRenew, withMark, type TaskHead } from './task-head.js';

/** A `pg` client's prepared-statement form of query (a `name` is parsed once per connection). */
interface PreparingClient {
  query(config: { name?: string | undefined; text: string; values: unknown[] }): Promise<{ rows: any[] }>;
}

/** The `pg` PoolClient surface this store uses. */
export interface PgClientLike extends SqlClient {
  release(err?: Error | boolean): void;
}

/** The `pg` Pool surface this store uses; pass your own `pg.Pool` as `pool`. */
export interface PgPoolLike {
  connect(): Promise<PgClientLike>;
  query(text: string, values?: unknown[]): Promise<{ rows: any[]; rowCount: number | null }>;
  end(): Promise<void>;
}

/** Options of {@link createPostgresStore}. Give `connectionString` or `pool`. */
export interface PostgresStoreOptions {
  /** `postgres://user@host:5432/db`; the store creates (and ends) its own pool. */
  connectionString?: string;
  /** A `pg.Pool` you own; the store never ends it. */
  pool?: PgPoolLike;
  /** PostgreSQL schema holding the tables (default `turnlog`). */
  schema?: string;
  /** Pool size when the store creates the pool (default 10); ignored with `pool`. */
  max?: number;
  /** Run pending migrations on open (default true). False: fail unless the schema is current. */
  migrate?: boolean;
  /**
   * Every connection read-only (`default_transaction_read_only`), for inspection (default false).
   * Only when the store creates the pool; configure your own `pool` yourself.
   */
  readOnly?: boolean;
  /** Durable commit before an append resolves (default true); false is `synchronous_commit = off`. */
  sync?: boolean;
  /** Payloads above this many bytes are stored once per task by hash (table `payloads`); default off. */
  payloadRefBytes?: number;
  /**
   * Group commit across tasks (default true): appends to different tasks that arrive while
   * earlier ones are being written share one transaction and one commit (docs/scale-out.md#group-commit).
   */
  groupCommit?: boolean;
  /**
   * Appends as named prepared statements, parsed and planned once per connection (default true;
   * about half the server CPU of an append). False behind a pooler that cannot carry them
   * (PgBouncer before 1.21 in transaction mode; docs/scale-out.md#connections).
   */
  preparedStatements?: boolean;
  /**
   * At most one notifying transaction per this many ms per store (default 10): the notices of
   * appends committed meanwhile go together in the next one; the first after a quiet spell goes
   * at once. Other engines hear of an append up to this much later, and of one that holds only
   * recorded steps and checkpoints up to ten times this (unless another notice goes sooner), so a
   * turn's steps cost one notifying transaction per 100 ms, not one per step. 0: each goes as
   * soon as the one before it is out (docs/scale-out.md#notify).
   */
  noticeIntervalMs?: number;
  /**
   * Where the store's warnings go (default: stderr, as the engine's default logger). It warns
   * once per cause when a group commit's batch statement fails other than by a lost connection
   * or contention, and its appends fall back to the locked path (docs/scale-out.md#group-commit).
   */
  logger?: StoreLogger;
}

/** Where a store's warnings go; an engine's `Logger` fits. */
export interface StoreLogger {
  warn(message: string, fields?: Record<string, unknown>): void;
}

/** The default: stderr, one line, as the engine's default logger writes a warning. */
const stderrLogger: StoreLogger = {
  warn: (message, fields) =>
    console.error(`[turnlog] warn ${message}${Object.entries(fields ?? {}).map(([k, v]) => ` ${k}=${v instanceof Error ? v.message : String(v)}`).join('')}`),
};

/**
 * Errors of the batch statement that are contention, not faults: a concurrent creator's row
 * (unique violation), a deadlock or serialization failure. Its appends take the locked path quietly.
 */
const CONTENTION = new Set(['23505', '40P01', '40001']);
/** Distinct causes of a batch fallback warned about, at most (then no more warnings). */
const FALLBACK_CAUSES_KEPT = 100;

/**
 * Events only the running turn's own engine acts on (recorded steps, checkpoints): an append of
 * nothing else is a routine notice, which may wait ten intervals for company (postgres-notifier.ts).
 */
const ROUTINE_EVENTS: ReadonlySet<HistoryEvent['type']> = new Set(['StepCompleted', 'Checkpointed']);

function routine(events: readonly HistoryEvent[]): boolean {
  for (const e of events) if (!ROUTINE_EVENTS.has(e.type)) return false;
  return true;
}

/** The default `noticeIntervalMs`. */
const NOTICE_INTERVAL_MS = 10;

/** An append waiting for its batch. */
interface PendingAppend {
  taskId: string;
  events: readonly HistoryEvent[];
  options: AppendOptions;
  /** The latest event time: the caller's clock, rebased onto the database's for leases. */
  callerNow: number;
  resolve(r: AppendResult): void;
  reject(err: unknown): void;
}


/** Heads kept for the one-statement append (a few MB at most). */
const HEADS_KEPT = 10_000;

const SUMMARY_UPSERT = ` ON CONFLICT (task_id) DO UPDATE SET workflow = EXCLUDED.workflow, kind = EXCLUDED.kind,
  status = EXCLUDED.status, outcome = EXCLUDED.outcome, last_event_id = EXCLUDED.last_event_id,
  max_generation = EXCLUDED.max_generation, turn = EXCLUDED.turn, queued = EXCLUDED.queued,
  last_input_id = EXCLUDED.last_input_id, created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at`;
/** A task's head read under row locks, with the database's clock at that moment. */
interface LockedHead {
  head: TaskHead;
  /** The database clock, ms since the epoch. */
  dbNow: number;
  exists: boolean;
  hasLease: boolean;
}

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
  readonly #s: string;
  readonly #options: PostgresStoreOptions;
  readonly #refBytes: number | undefined;
  #pool: PgPoolLike | undefined;
  #ownsPool = false;
  #state: 'new' | 'opening' | 'open' | 'closed' = 'new';
  #opening: Promise<void> | null = null;
  #appliedOnOpen: number[] = [];
  /** Per task, the tail of this store's writes: one process's writes to a task run in call order. */
  readonly #queues = new Map<string, Promise<unknown>>();
  /** Group commit across tasks (`groupCommit`, default on). */
  readonly #batcher: Batcher<PendingAppend> | undefined;
  /** The LISTEN connection, made on the first `watch()`. */
  #listener: PgListener | undefined;
  /** The NOTIFY channel of this schema (docs/scale-out.md#notify). */
  readonly channel: string;
  /** Sends the notices of committed appends, many per transaction (postgres-notifier.ts). */
  #notifier: Notifier | undefined;
  /**
   * The head this store last saw of each task it wrote (lease times on the database clock): the
   * one-statement append expects it (postgres-append.ts). Only a hint: a stale head costs the
   * locked path, never a wrong write. Least recently written first, at most HEADS_KEPT.
   */
  readonly #heads = new Map<string, TaskHead>();
  /** The one-statement append's text and prepared-statement name per shape key (postgres-append.ts). */
  readonly #casStatements = new Map<number, { name: string | undefined; text: string }>();
  /** Appends written by the one-statement path and by the locked path, for the benchmark and tests. */
  readonly appendPaths = { oneStatement: 0, locked: 0 };
  /** Batch statements that failed other than by contention or a lost connection (their appends took the locked path). */
  batchFallbacks = 0;
  /** The causes of those already warned about (`sqlstate: message`). */
  readonly #fallbackCauses = new Set<string>();

  constructor(options: PostgresStoreOptions) {
    if (!options || (options.connectionString === undefined) === (options.pool === undefined)) {
      throw invalidArgument('createPostgresStore needs exactly one of connectionString or pool.');
    }
    this.schema = options.schema ?? 'turnlog';
    this.#s = quoteSchema(this.schema);
    this.channel = noticeChannel(this.schema);
    this.supports = { exclusive: false, watch: true, claim: true, groupCommit: options.groupCommit !== false, flowLimits: true };
    if (options.groupCommit !== false) {
      // Two batches in flight at most (one with a pool of 2 or 3): while they are written the next
      // one gathers, and the fewer the statements the less CPU an append costs both sides
      // (docs/decisions.md); two, so one batch waiting on a row lock does not stall every append.
      this.#batcher = new Batcher((entries) => this.#appendBatch(entries), Math.max(1, Math.min(2, Math.floor((options.max ?? 10) / 2))));
    }
    this.#options = options;
    this.#refBytes = checkRefBytes(options.payloadRefBytes);
    const ni = options.noticeIntervalMs;
    if (ni !== undefined && !(typeof ni === 'number' && ni >= 0 && ni <= 60_000)) {
      throw invalidArgument(`createPostgresStore noticeIntervalMs ${String(ni)} must be a number of ms from 0 to 60000 (default ${NOTICE_INTERVAL_MS}).`);
    }
    this.location = `${options.connectionString ? redact(options.connectionString) : 'postgres (pool)'}#${this.schema}`;
  }

  open(): Promise<void> {
    if (this.#state === 'open') return Promise.resolve();
    if (this.#opening) return this.#opening;
    this.#state = 'opening';
    this.#opening = this.#doOpen().finally(() => {
      this.#opening = null;
    });
    return this.#opening;
  }

  async #doOpen(): Promise<void> {
    let pool = this.#options.pool;
    if (!pool) {
      const pg = await loadPg();
      const config: Record<string, unknown> = {
        connectionString: this.#options.connectionString,
        max: this.#options.max ?? 10,
        connectionTimeoutMillis: 10_000,
      };
      if (this.#options.readOnly) config['options'] = '-c default_transaction_read_only=on';
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
    this.#pool = pool;
    this.#notifier = new Notifier(() => pool.connect(), this.channel, this.#options.noticeIntervalMs ?? NOTICE_INTERVAL_MS);
    try {
      if (this.#options.migrate === false) await this.#checkSchema();
      else this.#appliedOnOpen = await this.migrate();
    } catch (err) {
      this.#state = 'closed';
      if (this.#ownsPool) await pool.end().catch(() => undefined);
      this.#pool = undefined;
      if (err instanceof TurnlogError) throw err;
      throw new TurnlogError(
        'TURNLOG_STORE_OPEN',
        `Store ${this.location} could not be opened (${(err as Error).message}). Check the connection string, that PostgreSQL is running and accepts this user.`,
        { cause: err },
      );
    }
    this.#state = 'open';
  }

  /**
   * Applies pending schema migrations (idempotent; safe from many processes at once).
   * Returns the versions applied now. `open()` calls it unless `migrate: false`.
   */
  async migrate(): Promise<number[]> {
    const pool = this.#pool;
    if (!pool) throw this.#closedError();
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
    const client = await this.#pool!.connect();
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
    if (this.#state !== 'open') return;
    // Writes already called finish first, as the Level store drains its group commit.
    await Promise.all([...this.#queues.values()]);
    await this.#notifier?.drain();
    this.#state = 'closed';
    this.#heads.clear();
    await this.#listener?.stop();
    this.#listener = undefined;
    const pool = this.#pool;
    this.#pool = undefined;
    if (pool && this.#ownsPool) await pool.end();
  }

  #closedError(): TurnlogError {
    return new TurnlogError('TURNLOG_STORE_CLOSED', `Store ${this.location} is not open. Call open() first, and do not use a store after close().`);
  }

  #checkedPool(): PgPoolLike {
    if (this.#state !== 'open' || !this.#pool) throw this.#closedError();
    return this.#pool;
  }

  /**
   * Runs `fn` in one transaction. A unique violation means a concurrent creator won the
   * insert race: retry, so the loser re-reads the head and fails with the contract's error.
   */
  async #tx<T>(fn: (c: PgClientLike) => Promise<T>, sync = true): Promise<T> {
    const pool = this.#checkedPool();
    for (let attempt = 1; ; attempt++) {
      const client = await pool.connect().catch((err: unknown) => {
        throw unavailable(err, this.location, 'a write');
      });
      guard(client);
      let broken: Error | undefined;
      // BEGIN rides with the transaction's first statement when that one has no parameters
      // (#lockHead): a multi-statement simple query, one round trip fewer per write.
      let begin: string | undefined = sync ? 'BEGIN;' : 'BEGIN; SET LOCAL synchronous_commit TO off;';
      const tx: PgClientLike = {
        query: async (text, values) => {
          const first = begin;
          begin = undefined;
          if (first === undefined) return client.query(text, values);
          if (values !== undefined && values.length > 0) {
            await client.query(first);
            return client.query(text, values);
          }
          const res = (await client.query(first + text)) as unknown;
          return (Array.isArray(res) ? res[res.length - 1] : res) as Awaited<ReturnType<PgClientLike['query']>>;
        },
        release: () => undefined,
      };
      try {
        const out = await fn(tx);
        if (begin !== undefined) return out; // fn wrote nothing: no transaction was opened
        await client.query('COMMIT');
        return out;
      } catch (err) {
        await client.query('ROLLBACK').catch((e: Error) => {
          broken = e;
        });
        const code = (err as { code?: unknown }).code;
        if (attempt < 4 && CONTENTION.has(String(code))) continue;
        throw unavailable(err, this.location, 'a write');
      } finally {
        client.release(broken);
      }
    }
  }

  /** Remembers `head` as the task's (lease times on the database clock), or forgets the task. */
  #remember(taskId: string, head: TaskHead | undefined): void {
    this.#heads.delete(taskId);
    if (!head) return;
    this.#heads.set(taskId, head);
    if (this.#heads.size > HEADS_KEPT) this.#heads.delete(this.#heads.keys().next().value!);
  }

  /**
   * Runs a write to `taskId` after this store's earlier writes to it, so pipelined appends
   * (not awaited) land in call order as on the Level store; other tasks run in parallel.
   */
  #serial<T>(taskId: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.#queues.get(taskId);
    const run = prev ? prev.then(fn, fn) : fn();
    const tail = run.catch(() => undefined);
    this.#queues.set(taskId, tail);
    void tail.then(() => {
      if (this.#queues.get(taskId) === tail) this.#queues.delete(taskId);
    });
    return run;
  }

  /** Locks the task's summary then lease row (always this order) and reads the database clock. */
  async #lockHead(c: SqlClient, taskId: string): Promise<LockedHead> {
    // The id as a literal (no parameters), so #tx can send BEGIN in the same round trip.
    const id = quoteLiteral(taskId);
    const res = await c.query(
      `WITH s AS (SELECT * FROM ${this.#s}.summaries WHERE task_id = ${id} FOR UPDATE),
            l AS (SELECT owner, instance, generation, expires_at FROM ${this.#s}.leases WHERE task_id = ${id} FOR UPDATE)
       SELECT (SELECT row_to_json(s) FROM s) AS s, (SELECT row_to_json(l) FROM l) AS l, ${DB_NOW} AS now`,
    );
    const row = res.rows[0] as { s: SummaryRow | null; l: LeaseRow | null; now: number };
    const summary = row.s ? toSummary(row.s) : undefined;
    return {
      dbNow: Number(row.now),
      exists: row.s !== null,
      hasLease: row.l !== null,
      head: {
        lastEventId: row.s ? Number(row.s.last_event_id) : 0,
        maxGeneration: row.s ? Number(row.s.max_generation) : 0,
        lease: row.l ? toLease(row.l) : undefined,
        summary,
      },
    };
  }

  // ---------------------------------------------------------------------------------------------
  // Writes

  async append(taskId: string, events: readonly HistoryEvent[], options: AppendOptions): Promise<AppendResult> {
    this.#checkedPool();
    checkTaskId(taskId);
    // Validate shape before taking a connection (applyAppend repeats it under the lock).
    if (!Array.isArray(events) || events.length === 0) throw invalidArgument(`Task ${taskId}: append needs at least one event.`);
    let callerNow = 0;
    for (const e of events) if (e.time > callerNow) callerNow = e.time;
    const batcher = this.#batcher;
    if (!batcher) return this.#serial(taskId, () => this.#appendOne({ taskId, events, options, callerNow }));
    return this.#serial(taskId, () => new Promise<AppendResult>((resolve, reject) => batcher.submit({ taskId, events, options, callerNow, resolve, reject })));
  }

  /** Writes a batch of appends to distinct tasks (the per-task queue keeps one in flight per task). */
  async #appendBatch(entries: PendingAppend[]): Promise<void> {
    const sync = entries.some((e) => e.options.sync ?? this.#options.sync ?? true);
    // Appends whose head this store knows go in one statement (postgres-append.ts); the others,
    // and those whose head moved, take the locked batch.
    const items: (CasItem & { entry: PendingAppend })[] = [];
    let rest: PendingAppend[] = [];
    for (const e of entries) {
      const plan = entries.length > 1 ? planCas(e.taskId, this.#heads.get(e.taskId), e.events, e.options, e.callerNow) : undefined;
      if (!plan) {
        rest.push(e);
        continue;
      }
      const blobs = new Map<string, Uint8Array>();
      const bytes = e.events.map((x) => encodeEvent(externalize(x, this.#refBytes, blobs)));
      items.push({ taskId: e.taskId, plan, events: e.events, bytes, blobs, entry: e });
    }
    if (items.length > 1) {
      let written: Set<string>;
      let now = 0;
      try {
        [written, now] = await this.#casBatch(items, sync);
      } catch (err) {
        for (const it of items) this.#remember(it.taskId, undefined);
        if (isConnectionLoss(err)) return this.#alone(items.map((it) => it.entry), true);
        // Contention (a concurrent creator's row, a deadlock): the locked batch decides. Anything
        // else is a fault (a server setting such as statement_timeout, a bug): the locked batch
        // still decides, and the cause is warned about once.
        if (!CONTENTION.has(String((err as { code?: unknown }).code))) this.#batchFellBack(err);
        written = new Set();
      }
      for (const it of items) {
        if (!written.has(it.taskId)) {
          this.#remember(it.taskId, undefined);
          rest.push(it.entry);
          continue;
        }
        const { next, leaseMs } = it.plan;
        this.#remember(it.taskId, { ...next, lease: leaseMs !== undefined ? { ...next.lease!, expiresAt: now + leaseMs } : next.lease });
        this.appendPaths.oneStatement++;
        this.#notifier!.add(it.taskId, next.lastEventId, routine(it.events));
        it.entry.resolve({ lastEventId: next.lastEventId, summary: { ...next.summary! } });
      }
    } else {
      rest = entries;
    }
    if (rest.length === 0) return;
    if (rest.length === 1) {
      const e = rest[0]!;
      return this.#appendOne(e).then(e.resolve, e.reject);
    }
    let results: (AppendResult | Error)[];
    try {
      results = await this.#tx((c) => this.#writeBatch(c, rest), sync);
      this.appendPaths.locked += rest.length;
    } catch (err) {
      for (const e of rest) this.#remember(e.taskId, undefined);
      // The batch failed as a whole (a lost connection, a deadlock that outlived the retries):
      // each append goes again alone, and reports its own outcome (after a lost COMMIT reply, landed).
      return this.#alone(rest, isConnectionLoss(err));
    }
    results.forEach((r, i) => {
      const e = rest[i]!;
      if (r instanceof Error) return e.reject(r);
      this.#notifier!.add(e.taskId, r.lastEventId, routine(e.events));
      e.resolve(r);
    });
  }

  /** Counts a batch statement's fault and warns once per cause (sqlstate and message). */
  #batchFellBack(err: unknown): void {
    this.batchFallbacks++;
    const sqlstate = String((err as { code?: unknown }).code ?? '');
    const cause = `${sqlstate}: ${(err as Error)?.message ?? String(err)}`;
    if (this.#fallbackCauses.has(cause) || this.#fallbackCauses.size >= FALLBACK_CAUSES_KEPT) return;
    this.#fallbackCauses.add(cause);
    (this.#options.logger ?? stderrLogger).warn('a group commit statement failed; its appends took the locked path (warned once per cause)', {
      store: this.location,
      sqlstate,
      error: err,
    });
  }

  /** Each append of a failed batch again alone (after a lost connection, first: did it land?). */
  async #alone(entries: PendingAppend[], lost: boolean): Promise<void> {
    await Promise.all(
      entries.map(async (e) => {
        const landed = lost ? await this.#landed(e).catch(() => undefined) : undefined;
        if (landed) this.#notifier!.add(e.taskId, landed.lastEventId, routine(e.events));
        return landed ?? this.#appendOne(e);
      }).map((p, i) => p.then(entries[i]!.resolve, entries[i]!.reject)),
    );
  }

  /** The batch statement: the tasks it wrote (their heads held) and the database's now. */
  async #casBatch(items: CasItem[], sync: boolean): Promise<[Set<string>, number]> {
    const st = this.#casStatement(batchKey(!sync), () => casBatchSql(this.#s, !sync));
    const client = await this.#checkedPool().connect().catch((err: unknown) => {
      throw unavailable(err, this.location, 'a write');
    });
    guard(client);
    let broken: Error | undefined;
    try {
      const values = casBatchValues(items);
      const res = await (client as unknown as PreparingClient).query({ name: st.name, text: st.text, values });
      const row = res.rows[0] as { ok: string[]; now: string | number };
      return [new Set(row.ok), Number(row.now)];
    } catch (err) {
      if (isConnectionLoss(err)) broken = err as Error;
      if (CONTENTION.has(String((err as { code?: unknown }).code))) throw err;
      throw unavailable(err, this.location, 'a write');
    } finally {
      client.release(broken);
    }
  }

  /**
   * One transaction for many tasks' appends: lock every head (summaries then leases, each in task
   * id order, so batches never deadlock), apply each append's rules alone (a rejection is that
   * append's, never its neighbours'), then write all events, summaries and leases in one statement.
   */
  async #writeBatch(c: SqlClient, entries: PendingAppend[]): Promise<(AppendResult | Error)[]> {
    const list = [...entries.map((e) => e.taskId)].sort().map(quoteLiteral).join(',');
    const res = await c.query(
      `WITH s AS (SELECT * FROM ${this.#s}.summaries WHERE task_id = ANY(ARRAY[${list}]::text[]) ORDER BY task_id FOR UPDATE),
            l AS (SELECT task_id, owner, instance, generation, expires_at FROM ${this.#s}.leases WHERE task_id = ANY(ARRAY[${list}]::text[]) ORDER BY task_id FOR UPDATE)
       SELECT (SELECT coalesce(json_agg(row_to_json(s)), '[]'::json) FROM s) AS s, (SELECT coalesce(json_agg(row_to_json(l)), '[]'::json) FROM l) AS l, ${DB_NOW} AS now`,
    );
    const row = res.rows[0] as { s: SummaryRow[]; l: (LeaseRow & { task_id: string })[]; now: number };
    const dbNow = Number(row.now);
    const summaries = new Map(row.s.map((r) => [r.task_id, r]));
    const leases = new Map(row.l.map((r) => [r.task_id, r]));
    const ev: [string[], number[], Buffer[]] = [[], [], []];
    const ls: [string[], string[], string[], number[], number[]] = [[], [], [], [], []];
    const sm: unknown[][] = Array.from({ length: 12 }, () => []);
    const out: (AppendResult | Error)[] = [];
    for (const e of entries) {
      const sr = summaries.get(e.taskId);
      const lr = leases.get(e.taskId);
      const head: TaskHead = {
        lastEventId: sr ? Number(sr.last_event_id) : 0,
        maxGeneration: sr ? Number(sr.max_generation) : 0,
        lease: lr ? toLease(lr) : undefined,
        summary: sr ? toSummary(sr) : undefined,
      };
      const clock = new ClockFrame(dbNow, e.callerNow);
      let next: TaskHead;
      try {
        next = applyAppend(e.taskId, clock.headToCaller(head), e.events, e.options, true);
      } catch (err) {
        this.#remember(e.taskId, head);
        out.push(err as Error);
        continue;
      }
      this.#remember(e.taskId, { ...next, lease: e.options.lease ? clock.leaseToDb(next.lease!) : head.lease });
      for (const x of e.events) {
        ev[0].push(e.taskId);
        ev[1].push(x.eventId);
        ev[2].push(asBuffer(encodeEvent(x)));
      }
      const s = next.summary!;
      [e.taskId, s.workflow, s.kind, s.status, s.outcome ?? null, s.lastEventId, next.maxGeneration, s.turn, s.queued, s.lastInputId ?? null, s.createdAt, s.updatedAt].forEach((v, i) => sm[i]!.push(v));
      if (e.options.lease) {
        const l = clock.leaseToDb(next.lease!);
        [e.taskId, l.owner, l.instance, l.generation, l.expiresAt].forEach((v, i) => (ls[i] as unknown[]).push(v));
      }
      out.push({ lastEventId: next.lastEventId, summary: { ...s } });
    }
    if (ev[0].length === 0) return out;
    // Upserts are safe for rows this transaction did not see: a concurrent creator's event 1
    // fails the events insert on its primary key, and #tx retries the batch against its row.
    await c.query(
      `WITH e AS (INSERT INTO ${this.#s}.events (task_id, event_id, data) SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])),
            l AS (INSERT INTO ${this.#s}.leases (task_id, owner, instance, generation, expires_at) SELECT * FROM unnest($4::text[], $5::text[], $6::text[], $7::bigint[], $8::bigint[])${LEASE_UPSERT})
       INSERT INTO ${this.#s}.summaries (task_id, workflow, kind, status, outcome, last_event_id, max_generation, turn, queued, last_input_id, created_at, updated_at)
       SELECT * FROM unnest($9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::bigint[], $15::bigint[], $16::bigint[], $17::bigint[], $18::text[], $19::bigint[], $20::bigint[])${SUMMARY_UPSERT}`,
      [...ev, ...ls, ...sm],
    );
    return out;
  }

  /**
   * One append, retried when the connection is lost: first it checks whether the lost write
   * landed (a COMMIT whose reply never came), so a retry never writes twice.
   */
  async #appendOne(a: Omit<PendingAppend, 'resolve' | 'reject'>): Promise<AppendResult> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.#appendOnce(a);
      } catch (err) {
        if (!isConnectionLoss(err)) throw err;
        const landed = await this.#landed(a).catch(() => null);
        if (landed) return landed;
        if (attempt >= CONNECTION_TRIES) {
          throw new TurnlogError(
            'TURNLOG_STORE_UNAVAILABLE',
            `Store ${this.location}: task ${a.taskId}'s append lost its connection ${attempt} times (${(err as Error).message})${landed === null ? '; whether the last try landed could not be checked' : ''}. Retry once PostgreSQL is reachable.`,
            { cause: err },
          );
        }
        await new Promise((r) => setTimeout(r, 100 * 2 ** attempt));
      }
    }
  }

  /** The result of `a` if its events are stored exactly (a commit whose reply was lost), else undefined. */
  async #landed(a: Omit<PendingAppend, 'resolve' | 'reject'>): Promise<AppendResult | undefined> {
    const from = a.options.expectedLastEventId + 1;
    const rows = await this.#query(`SELECT data FROM ${this.#s}.events WHERE task_id = $1 AND event_id BETWEEN $2 AND $3 ORDER BY event_id`, [a.taskId, from, from + a.events.length - 1]);
    if (rows.length !== a.events.length || !rows.every((r: { data: Buffer }, i) => asBuffer(encodeEvent(a.events[i]!)).equals(r.data))) return undefined;
    const summary = await this.getSummary(a.taskId);
    return summary ? { lastEventId: from + a.events.length - 1, summary } : undefined;
  }

  /**
   * One append: one autocommit statement when the head this store last saw still holds
   * (postgres-append.ts), else the locked transaction, which decides on the head it reads.
   */
  async #appendOnce(a: Omit<PendingAppend, 'resolve' | 'reject'>): Promise<AppendResult> {
    const sync = a.options.sync ?? this.#options.sync ?? true;
    const plan = planCas(a.taskId, this.#heads.get(a.taskId), a.events, a.options, a.callerNow);
    const written = plan ? await this.#casAppend(a, plan, sync) : undefined;
    const out = written ?? (await this.#lockedAppend(a, sync));
    this.#notifier!.add(a.taskId, out.lastEventId, routine(a.events));
    return out;
  }

  /** The one-statement append of `plan`; undefined (nothing written) when the head moved. */
  async #casAppend(a: Omit<PendingAppend, 'resolve' | 'reject'>, plan: CasPlan, sync: boolean): Promise<AppendResult | undefined> {
    const { taskId, events } = a;
    const blobs = new Map<string, Uint8Array>();
    const bytes = events.map((e) => encodeEvent(externalize(e, this.#refBytes, blobs)));
    const { shape, key, values } = casStatement(taskId, plan, events, bytes, blobs, !sync);
    const st = this.#casStatement(key, () => casSql(this.#s, shape));
    const client = await this.#checkedPool().connect().catch((err: unknown) => {
      throw unavailable(err, this.location, 'a write');
    });
    guard(client);
    let broken: Error | undefined;
    try {
      const res = await (client as unknown as PreparingClient).query({ name: st.name, text: st.text, values });
      const row = res.rows[0] as { ok: boolean; now: string | number };
      if (!row.ok) {
        this.#remember(taskId, undefined);
        return undefined;
      }
      const { next, leaseMs } = plan;
      this.#remember(taskId, { ...next, lease: leaseMs !== undefined ? { ...next.lease!, expiresAt: Number(row.now) + leaseMs } : next.lease });
      this.appendPaths.oneStatement++;
      return { lastEventId: next.lastEventId, summary: { ...next.summary! } };
    } catch (err) {
      this.#remember(taskId, undefined);
      // A concurrent creator's row or events: the locked path decides against them.
      if ((err as { code?: unknown }).code === '23505') return undefined;
      if (isConnectionLoss(err)) broken = err as Error;
      throw unavailable(err, this.location, 'a write');
    } finally {
      client.release(broken);
    }
  }

  /**
   * A statement's text and prepared-statement name (undefined with `preparedStatements: false`),
   * built once per store and key (the schema is in the text: one name per store and shape).
   */
  #casStatement(key: number, text: () => string): { name: string | undefined; text: string } {
    let st = this.#casStatements.get(key);
    if (st === undefined) {
      const t = text();
      st = { name: this.#options.preparedStatements === false ? undefined : `turnlog_append_${createHash('sha256').update(t).digest('hex').slice(0, 24)}`, text: t };
      this.#casStatements.set(key, st);
    }
    return st;
  }

  /** One append in its own transaction (three round trips: BEGIN with the lock, the write, COMMIT). */
  #lockedAppend(a: Omit<PendingAppend, 'resolve' | 'reject'>, sync: boolean): Promise<AppendResult> {
    const { taskId, events, options, callerNow } = a;
    this.appendPaths.locked++;
    let refused = false;
    return this.#tx(async (c) => {
      const locked = await this.#lockHead(c, taskId);
      const clock = new ClockFrame(locked.dbNow, callerNow);
      let next: TaskHead;
      try {
        next = applyAppend(taskId, clock.headToCaller(locked.head), events, options, true);
      } catch (err) {
        refused = true;
        this.#remember(taskId, locked.head);
        throw err;
      }
      this.#remember(taskId, { ...next, lease: options.lease ? clock.leaseToDb(next.lease!) : locked.head.lease });
      const ids = events.map((e) => e.eventId);
      const blobs = new Map<string, Uint8Array>();
      const bytes = events.map((e) => asBuffer(encodeEvent(externalize(e, this.#refBytes, blobs))));
      if (blobs.size > 0) {
        await c.query(
          `INSERT INTO ${this.#s}.payloads (task_id, hash, data) SELECT $1, * FROM unnest($2::text[], $3::bytea[]) ON CONFLICT DO NOTHING`,
          [taskId, [...blobs.keys()], [...blobs.values()].map(asBuffer)],
        );
      }
      const s = next.summary!;
      const values: unknown[] = [taskId, ids, bytes, s.workflow, s.kind, s.status, s.outcome ?? null, s.lastEventId, next.maxGeneration, s.turn, s.queued, s.lastInputId ?? null, s.createdAt, s.updatedAt];
      let leaseCte = '';
      if (options.lease) {
        const l = clock.leaseToDb(next.lease!);
        values.push(l.owner, l.instance, l.generation, l.expiresAt);
        leaseCte = `, l AS (INSERT INTO ${this.#s}.leases (task_id, owner, instance, generation, expires_at) VALUES ($1, $15, $16, $17, $18)${locked.hasLease ? LEASE_UPSERT : ''})`;
      }
      // One statement: events, summary and lease. A row this transaction did not see is inserted,
      // never upserted: if a concurrent creator committed it meanwhile, the insert fails and #tx
      // retries against the fresh row.
      await c.query(
        `WITH e AS (INSERT INTO ${this.#s}.events (task_id, event_id, data) SELECT $1, * FROM unnest($2::bigint[], $3::bytea[]))${leaseCte}
         INSERT INTO ${this.#s}.summaries (task_id, workflow, kind, status, outcome, last_event_id, max_generation, turn, queued, last_input_id, created_at, updated_at)
         VALUES ($1, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)${locked.exists ? SUMMARY_UPSERT : ''}`,
        values,
      );
      return { lastEventId: next.lastEventId, summary: { ...s } };
    }, sync).catch((err: unknown) => {
      // Refused by the rules: the head read stands. Anything else: the head is unknown.
      if (!refused) this.#remember(taskId, undefined);
      throw this.#raceError(err, taskId, options.expectedLastEventId);
    });
  }

  /** A unique violation that outlived the retries: still a lost race, reported as the contract's error. */
  #raceError(err: unknown, taskId: string, expected: number): unknown {
    if ((err as { code?: unknown }).code === '23505') return new ConcurrencyError(taskId, expected, expected + 1);
    return err;
  }

  /** Writes the lease row; insert-only when the transaction saw none (see append). */
  async #putLease(c: SqlClient, taskId: string, l: Lease, exists: boolean): Promise<void> {
    await c.query(
      `INSERT INTO ${this.#s}.leases (task_id, owner, instance, generation, expires_at) VALUES ($1, $2, $3, $4, $5)${exists ? LEASE_UPSERT : ''}`,
      [taskId, l.owner, l.instance, l.generation, l.expiresAt],
    );
  }

  /** Runs a lease rule under the row locks with the caller's `now` rebased onto the database clock. */
  async #leaseOp(taskId: string, now: number, rule: (head: TaskHead) => Lease | undefined): Promise<Lease | undefined> {
    this.#checkedPool();
    checkTaskId(taskId);
    return this.#serial(taskId, () => this.#tx(async (c) => {
      const locked = await this.#lockHead(c, taskId);
      const clock = new ClockFrame(locked.dbNow, now);
      // The head read stands (a stale one only costs an append the locked path).
      this.#remember(taskId, locked.head);
      const next = rule(clock.headToCaller(locked.head));
      if (!next) return undefined;
      const stored = clock.leaseToDb(next);
      await this.#putLease(c, taskId, stored, locked.hasLease);
      this.#remember(taskId, { ...locked.head, lease: stored });
      return stored;
    }));
  }

  async claimLease(taskId: string, request: LeaseRequest): Promise<Lease> {
    return (await this.#leaseOp(taskId, request.now, (h) => applyClaim(taskId, h, request, true)))!;
  }

  async renewLease(taskId: string, lease: Lease, durationMs: number, now: number): Promise<Lease> {
    return (await this.#leaseOp(taskId, now, (h) => applyRenew(taskId, h, lease, durationMs, now)))!;
  }

  async releaseLease(taskId: string, lease: Lease, now: number): Promise<void> {
    await this.#leaseOp(taskId, now, (h) => applyRelease(taskId, h, lease, now));
  }

  async putSnapshot(taskId: string, snapshot: StoredSnapshot): Promise<void> {
    this.#checkedPool();
    checkTaskId(taskId);
    await this.#serial(taskId, () => this.#tx(async (c) => {
      const res = await c.query(`SELECT last_event_id FROM ${this.#s}.summaries WHERE task_id = $1 FOR SHARE`, [taskId]);
      const last = res.rows.length ? Number(res.rows[0].last_event_id) : 0;
      if (!Number.isInteger(snapshot.eventId) || snapshot.eventId < 1 || snapshot.eventId > last) {
        throw invalidArgument(
          `Task ${taskId}: snapshot at event ${snapshot.eventId} is beyond the history (last event ${last}). Snapshot only appended events.`,
        );
      }
      await c.query(
        `INSERT INTO ${this.#s}.snapshots (task_id, event_id, data) VALUES ($1, $2, $3)
         ON CONFLICT (task_id) DO UPDATE SET event_id = EXCLUDED.event_id, data = EXCLUDED.data`,
        [taskId, snapshot.eventId, Buffer.from(snapshot.data)],
      );
    }));
  }

  async deleteTask(taskId: string): Promise<void> {
    this.#checkedPool();
    checkTaskId(taskId);
    this.#remember(taskId, undefined);
    await this.#serial(taskId, () => this.#tx(async (c) => {
      await this.#lockHead(c, taskId);
      await this.#deleteIds(c, [taskId]);
    }));
  }

  async #deleteIds(c: SqlClient, ids: string[]): Promise<void> {
    for (const id of ids) this.#remember(id, undefined);
    for (const table of ['events', 'payloads', 'snapshots', 'leases', 'summaries', 'corrupt_marks', 'due_claims']) {
      await c.query(`DELETE FROM ${this.#s}.${table} WHERE task_id = ANY($1::text[])`, [ids]);
    }
  }

  async purgeCompleted(olderThanMs: number, now: number): Promise<string[]> {
    this.#checkedPool();
    // updatedAt is the engine's event time, so retention compares it with the caller's clock.
    return this.#tx(async (c) => {
      const res = await c.query(
        // A task the engine isolated as corrupt is kept for inspection, whatever its age.
        `SELECT task_id FROM ${this.#s}.summaries s WHERE status = 'completed' AND updated_at <= $1
           AND NOT EXISTS (SELECT 1 FROM ${this.#s}.corrupt_marks m WHERE m.task_id = s.task_id)
         ORDER BY task_id FOR UPDATE SKIP LOCKED`,
        [now - olderThanMs],
      );
      const ids = res.rows.map((r: { task_id: string }) => r.task_id);
      if (ids.length) await this.#deleteIds(c, ids);
      return ids;
    });
  }

  // ---------------------------------------------------------------------------------------------
  // Reads: single statements, so they never block writers and see committed data only.

  /**
   * One statement on a guarded client (not `pool.query`, whose one-shot error listener leaves a
   * second connection error of a terminated session unheard: an uncaught exception under
   * `pg_terminate_backend`, test: runtime/postgres-failures).
   */
  async #query(text: string, values: unknown[], what = 'a read'): Promise<any[]> {
    const pool = this.#checkedPool();
    const client = await pool.connect().catch((err: unknown) => {
      throw unavailable(err, this.location, what);
    });
    guard(client);
    let broken: Error | undefined;
    try {
      return (await client.query(text, values)).rows;
    } catch (err) {
      if (isConnectionLoss(err)) broken = err as Error;
      throw unavailable(err, this.location, what);
    } finally {
      client.release(broken);
    }
  }

  async readEvents(taskId: string, options: ReadOptions = {}): Promise<HistoryEvent[]> {
    this.#checkedPool();
    checkTaskId(taskId);
    const { from, to, limit } = readBounds(options);
    if (limit === 0 || from > to) return [];
    const rows = await this.#query(
      `SELECT event_id, data FROM ${this.#s}.events WHERE task_id = $1 AND event_id BETWEEN $2 AND $3 ORDER BY event_id${Number.isFinite(limit) ? ' LIMIT $4' : ''}`,
      Number.isFinite(limit) ? [taskId, from, to, limit] : [taskId, from, to],
    );
    const events = rows.map((r: { event_id: string; data: Buffer }) => {
      const name = `${this.location} events(${JSON.stringify(taskId)}, ${r.event_id})`;
      // A plain Uint8Array view makes protobufjs return Uint8Array bytes fields, as the types say.
      const e = decodeEvent(new Uint8Array(r.data.buffer, r.data.byteOffset, r.data.byteLength), taskId, name);
      if (e.eventId !== Number(r.event_id)) throw new HistoryCorruptError(name, `holds event ${e.eventId}`);
      return e;
    });
    return resolveAll(taskId, events, async (hash) => {
      const [row] = await this.#query(`SELECT data FROM ${this.#s}.payloads WHERE task_id = $1 AND hash = $2`, [taskId, hash]);
      return row ? new Uint8Array((row.data as Buffer).buffer, (row.data as Buffer).byteOffset, (row.data as Buffer).byteLength) : undefined;
    });
  }

  /** Compaction: event 2 becomes `compacted`, events 3..throughEventId go, in one transaction. */
  async compactHistory(taskId: string, compacted: HistoryEvent): Promise<void> {
    this.#checkedPool();
    checkTaskId(taskId);
    if (compacted.type !== 'HistoryCompacted' || compacted.eventId !== 2) throw invalidArgument(`Task ${taskId}: compactHistory takes a HistoryCompacted event 2.`);
    await this.#serial(taskId, () => this.#tx(async (c) => {
      await this.#lockHead(c, taskId);
      // A later cut already written (another engine's) stands (level-store.ts).
      const cur = await c.query(`SELECT data FROM ${this.#s}.events WHERE task_id = $1 AND event_id = 2`, [taskId]);
      const row = cur.rows[0] as { data: Buffer } | undefined;
      if (row && isLaterCut(decodeEvent(new Uint8Array(row.data.buffer, row.data.byteOffset, row.data.byteLength), taskId, `${this.location} events(${JSON.stringify(taskId)}, 2)`), compacted.throughEventId)) return;
      await c.query(`UPDATE ${this.#s}.events SET data = $2 WHERE task_id = $1 AND event_id = 2`, [taskId, asBuffer(encodeEvent(compacted))]);
      await c.query(`DELETE FROM ${this.#s}.events WHERE task_id = $1 AND event_id BETWEEN 3 AND $2`, [taskId, compacted.throughEventId]);
    }));
  }

  iterateEvents(taskId: string, options: ReadOptions = {}): AsyncIterable<HistoryEvent> {
    return iterateInPages((o) => this.readEvents(taskId, o), options);
  }

  async getSummary(taskId: string): Promise<TaskSummary | undefined> {
    this.#checkedPool();
    checkTaskId(taskId);
    const rows = await this.#query(`SELECT row_to_json(s) AS s FROM ${this.#s}.summaries s WHERE task_id = $1`, [taskId]);
    return rows.length ? toSummary(rows[0].s as SummaryRow) : undefined;
  }

  /** The lease with `expiresAt` on the database clock (ms since the epoch). */
  async getLease(taskId: string): Promise<Lease | undefined> {
    this.#checkedPool();
    checkTaskId(taskId);
    const rows = await this.#query(`SELECT owner, instance, generation, expires_at FROM ${this.#s}.leases WHERE task_id = $1`, [taskId]);
    return rows.length ? toLease(rows[0] as LeaseRow) : undefined;
  }

  async getSnapshot(taskId: string): Promise<StoredSnapshot | undefined> {
    this.#checkedPool();
    checkTaskId(taskId);
    const rows = await this.#query(`SELECT event_id, data FROM ${this.#s}.snapshots WHERE task_id = $1`, [taskId]);
    if (!rows.length) return undefined;
    return { eventId: Number(rows[0].event_id), data: new Uint8Array(rows[0].data as Buffer) };
  }

  async listTasks(options: ListOptions = {}): Promise<TaskPage> {
    this.#checkedPool();
    const limit = pageLimit(options.limit);
    const { status, workflow } = options;
    // Same orders as the Level store's indexes: status alone lists by workflow, then id.
    const byWorkflow = status !== undefined && workflow === undefined;
    const where: string[] = [];
    const values: unknown[] = [];
    if (status !== undefined) where.push(`status = $${values.push(status)}`);
    if (workflow !== undefined) where.push(`workflow = $${values.push(workflow)}`);
    if (options.cursor !== undefined) {
      const key = this.#cursorKey(options.cursor, status, workflow);
      if (byWorkflow) where.push(`(workflow, task_id) > ($${values.push(key[0])}, $${values.push(key[1])})`);
      else where.push(`task_id > $${values.push(key[0])}`);
    }
    const rows = await this.#query(
      `SELECT row_to_json(s) AS s FROM ${this.#s}.summaries s ${where.length ? 'WHERE ' + where.join(' AND ') : ''}
       ORDER BY ${byWorkflow ? 'workflow, task_id' : 'task_id'} LIMIT $${values.push(limit + 1)}`,
      values,
    );
    let tasks = rows.slice(0, limit).map((r: { s: SummaryRow }) => toSummary(r.s));
    if (tasks.length) {
      const marks = await this.#marks(tasks.map((t) => t.taskId));
      if (marks.size) tasks = tasks.map((t) => withMark(t, marks.get(t.taskId)));
    }
    const page: TaskPage = { tasks };
    if (rows.length > limit) {
      const last = tasks[tasks.length - 1]!;
      const key = byWorkflow ? [last.workflow, last.taskId] : [last.taskId];
      page.next = encodeCursor(JSON.stringify([status ?? null, workflow ?? null, ...key]));
    }
    return page;
  }

  #cursorKey(cursor: string, status: string | undefined, workflow: string | undefined): string[] {
    let parsed: unknown;
    try {
      parsed = JSON.parse(decodeCursor(cursor));
    } catch {
      parsed = undefined;
    }
    const a = parsed as unknown[];
    if (!Array.isArray(a) || a[0] !== (status ?? null) || a[1] !== (workflow ?? null) || a.length < 3 || !a.slice(2).every((k) => typeof k === 'string')) {
      throw invalidArgument(`List cursor ${cursor} belongs to another filter. Pass the same status and workflow as the page that returned it.`);
    }
    return a.slice(2) as string[];
  }

  async markCorrupt(mark: CorruptMark): Promise<void> {
    this.#checkedPool();
    checkTaskId(mark.taskId);
    // Not through the task's rows: reading them may be what fails. Only this row is written.
    await this.#query(
      `INSERT INTO ${this.#s}.corrupt_marks (task_id, key, code, message, time) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (task_id) DO UPDATE SET key = EXCLUDED.key, code = EXCLUDED.code, message = EXCLUDED.message, time = EXCLUDED.time`,
      [mark.taskId, mark.key, mark.code, mark.message, mark.time],
      'a write',
    );
  }

  async listCorrupt(): Promise<CorruptMark[]> {
    this.#checkedPool();
    return [...(await this.#marks()).values()];
  }

  /** Corrupt marks by task id (of `ids`, or all), in task-id byte order. */
  async #marks(ids?: string[]): Promise<Map<string, CorruptMark>> {
    const rows = await this.#query(
      `SELECT task_id, key, code, message, time FROM ${this.#s}.corrupt_marks${ids ? ' WHERE task_id = ANY($1::text[])' : ''} ORDER BY task_id`,
      ids ? [ids] : [],
    );
    return new Map(rows.map((r: { task_id: string; key: string; code: string; message: string; time: number }) => [r.task_id, { taskId: r.task_id, key: r.key, code: r.code, message: r.message, time: Number(r.time) }]));
  }

  /**
   * A real claim (postgres-claims.ts): due tasks locked `FOR UPDATE SKIP LOCKED`, each claimed
   * for `request.instance` until released or `claimMs` on the database clock; lease expiry on the
   * database clock, retention on the caller's. Ordered by phase then task id; cursor `<phase>.<task id>`.
   */
  async claimDueWork(request: ClaimRequest): Promise<DueBatch> {
    checkClaim(request);
    return this.#tx((c) => claimDue(c, this.#s, request));
  }

  acquireSlot(request: SlotRequest): Promise<SlotAnswer> {
    return this.#tx((c) => acquireSlot(c, this.#s, request));
  }

  async releaseSlot(limit: string, slotId: string): Promise<void> {
    await this.#tx((c) => releaseSlot(c, this.#s, limit, slotId));
  }

  async renewSlots(instance: string, slotIds: readonly string[], leaseMs: number): Promise<void> {
    if (slotIds.length > 0) await this.#tx((c) => renewSlots(c, this.#s, instance, slotIds, leaseMs));
  }

  async releaseDueWork(taskIds: readonly string[], instance: string): Promise<void> {
    this.#checkedPool();
    for (const id of taskIds) checkTaskId(id);
    await this.#tx((c) => releaseDue(c, this.#s, taskIds, instance));
  }

  async listRecoverable(_now: number, _instance: string): Promise<string[]> {
    const rows = await this.#query(recoverableSql(this.#s), []);
    return rows.map((r: { task_id: string }) => r.task_id);
  }

  /**
   * Calls `listener` after every append committed to this schema, by any engine (LISTEN/NOTIFY on
   * one connection taken from the pool for good; it reconnects, then reports `resync`).
   */
  watch(listener: (notice: AppendNotice) => void): () => void {
    const pool = this.#checkedPool();
    this.#listener ??= new PgListener(() => pool.connect(), this.channel);
    return this.#listener.subscribe(listener);
  }

  /** Resolves once the LISTEN connection listens (tests; `watch` works without awaiting it). */
  async listening(): Promise<boolean> {
    await this.#listener?.ready();
    return this.#listener?.listening ?? false;
  }

  /**
   * Claims up to `limit` orphaned tasks (in progress, lease missing or expired on the database
   * clock) for `instance`, `FOR UPDATE SKIP LOCKED` (postgres-claims.ts): engines claiming at once
   * get disjoint tasks, each with this instance's lease (generation + 1) and the one it replaced.
   */
  async claimOrphans(request: OrphanClaim): Promise<ClaimedOrphan[]> {
    this.#checkedPool();
    if (!Number.isInteger(request.limit) || request.limit < 1) {
      throw invalidArgument(`claimOrphans limit ${String(request.limit)} must be a positive integer.`);
    }
    return this.#tx((c) => claimOrphans(c, this.#s, request));
  }

  /** Group-commit counters: batches written and appends in them (0 and 0 with `groupCommit: false`). */
  groupCommitStats(): { batches: number; appends: number } {
    return { batches: this.#batcher?.batches ?? 0, appends: this.#batcher?.entries ?? 0 };
  }

  /** Each group commit's number of appends, as it goes out (none with `groupCommit: false`). */
  onCommit(listener: (appends: number) => void): () => void {
    return this.#batcher?.listen(listener) ?? (() => undefined);
  }

  /** Notifying transactions sent (each carries the notices of every append committed before it). */
  notifyTransactions(): number {
    return this.#notifier?.sent ?? 0;
  }

  /** How many times the LISTEN connection has connected (1, then one more per reconnect). */
  listenerConnects(): number {
    return this.#listener?.connects ?? 0;
  }

  /** Bytes the store's tables use on the server, with indexes and TOAST (`turnlog stats`). */
  async sizeBytes(): Promise<number> {
    const rows = await this.#query(
      `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::float8 AS n FROM pg_class c
       JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'`,
      [this.schema],
    );
    return Number(rows[0].n);
  }

  /** The database clock, ms since the epoch (what lease expiry is measured against). */
  async databaseNow(): Promise<number> {
    const rows = await this.#query(`SELECT ${DB_NOW} AS now`, []);
    return Number(rows[0].now);
  }
}
