/**
 * A {@link HistoryStore} on PostgreSQL through `pg` (node-postgres), shared by many engines on
 * many hosts. `pg` is an optional peer dependency, loaded on open(), never at import.
 * Events are the same protobuf bytes the Level store keeps. Lease expiry is decided on the
 * database's clock (docs/decisions.md, docs/scale-out.md).
 */
import { createHash } from 'node:crypto';
import { ConcurrencyError, TurnlogError, invalidArgument } from '../errors.js';
import { decodeEvent, encodeEvent } from '../history/codec.js';
import { externalize } from './payload-refs.js';
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
import { claimDue, claimOrphans, recoverableSql, releaseDue, retainedSql, type ClaimedOrphan, type OrphanClaim } from './postgres-claims.js';
import { acquireSlot, releaseSlot, renewSlots } from './postgres-limits.js';

export { recoverableSql, type ClaimedOrphan, type OrphanClaim } from './postgres-claims.js';
import { iterateInPages } from './paging.js';
import { Batcher } from './batcher.js';
import { PgListener, noticeChannel } from './postgres-listener.js';
import { Notifier } from './postgres-notifier.js';
import { batchKey, casBatchSql, casBatchValues, casSql, casStatement, planCas, type CasItem, type CasPlan } from './postgres-append.js';
import { CONNECTION_TRIES, ClockFrame, DB_NOW, LEASE_UPSERT, asBuffer, guard, isConnectionLoss, loadPg, quoteLiteral, redact, toLease, toSummary, unavailable, type LeaseRow, type SummaryRow } from './postgres-rows.js';

export { isConnectionLoss, quoteLiteral } from './postgres-rows.js';
import { appliedVersions, migrate, migrationGap, unknownMigrationsError, type SqlClient } from './postgres-migrations.js';
import { applyAppend, applyClaim, applyRelease, applyRenew, type TaskHead } from './task-head.js';
import { CONTENTION, PgStoreContext } from './postgres-context.js';
import { corruptMarks, databaseNow, getLease, getSnapshot, getSummary, listTasks, readEvents, sizeBytes } from './postgres-reads.js';
import type { PgPoolLike, PostgresStoreOptions, StoreLogger } from './postgres-options.js';

export type { PgClientLike, PgPoolLike, PostgresStoreOptions, StoreLogger } from './postgres-options.js';

/** A `pg` client's prepared-statement form of query (a `name` is parsed once per connection). */
interface PreparingClient {
  query(config: { name?: string | undefined; text: string; values: unknown[] }): Promise<{ rows: any[] }>;
}

/** The default: stderr, one line, as the engine's default logger writes a warning. */
const stderrLogger: StoreLogger = {
  warn: (message, fields) =>
    console.error(`[turnlog] warn ${message}${Object.entries(fields ?? {}).map(([k, v]) => ` ${k}=${v instanceof Error ? v.message : String(v)}`).join('')}`),
};

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

const SUMMARY_UPSERT = ` ON CONFLICT (task_id) DO UPDATE SET workflow = EXCLUDED.workflow, kind = EXCLUDED.kind,
  status = EXCLUDED.status, outcome = EXCLUDED.outcome, last_event_id = EXCLUDED.last_event_id,
  max_generation = EXCLUDED.max_generation, turn = EXCLUDED.turn, queued = EXCLUDED.queued,
  last_input_id = EXCLUDED.last_input_id, created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at`;

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
  /** Group commit across tasks (`groupCommit`, default on). */
  readonly #batcher: Batcher<PendingAppend> | undefined;
  /** The LISTEN connection, made on the first `watch()`. */
  #listener: PgListener | undefined;
  /** The NOTIFY channel of this schema (docs/scale-out.md#notify). */
  readonly channel: string;
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
    this.#ctx = new PgStoreContext(options);
    this.schema = this.#ctx.schema;
    this.#s = this.#ctx.s;
    this.location = this.#ctx.location;
    this.channel = noticeChannel(this.schema);
    this.supports = { exclusive: false, watch: true, claim: true, groupCommit: options.groupCommit !== false, flowLimits: true };
    if (options.groupCommit !== false) {
      // Two batches in flight at most (one with a pool of 2 or 3): while they are written the next
      // one gathers, and the fewer the statements the less CPU an append costs both sides
      // (docs/decisions.md); two, so one batch waiting on a row lock does not stall every append.
      this.#batcher = new Batcher((entries) => this.#appendBatch(entries), Math.max(1, Math.min(2, Math.floor((options.max ?? 10) / 2))));
    }
    const ni = options.noticeIntervalMs;
    if (ni !== undefined && !(typeof ni === 'number' && ni >= 0 && ni <= 60_000)) {
      throw invalidArgument(`createPostgresStore noticeIntervalMs ${String(ni)} must be a number of ms from 0 to 60000 (default ${NOTICE_INTERVAL_MS}).`);
    }
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
    await Promise.all([...this.#ctx.queues.values()]);
    await this.#ctx.notifier?.drain();
    this.#ctx.state = 'closed';
    this.#ctx.heads.clear();
    await this.#listener?.stop();
    this.#listener = undefined;
    const pool = this.#ctx.pool;
    this.#ctx.pool = undefined;
    if (pool && this.#ownsPool) await pool.end();
  }

  // ---------------------------------------------------------------------------------------------
  // Writes

  async append(taskId: string, events: readonly HistoryEvent[], options: AppendOptions): Promise<AppendResult> {
    this.#ctx.checkedPool();
    checkTaskId(taskId);
    // Validate shape before taking a connection (applyAppend repeats it under the lock).
    if (!Array.isArray(events) || events.length === 0) throw invalidArgument(`Task ${taskId}: append needs at least one event.`);
    let callerNow = 0;
    for (const e of events) if (e.time > callerNow) callerNow = e.time;
    const batcher = this.#batcher;
    if (!batcher) return this.#ctx.serial(taskId, () => this.#appendOne({ taskId, events, options, callerNow }));
    return this.#ctx.serial(taskId, () => new Promise<AppendResult>((resolve, reject) => batcher.submit({ taskId, events, options, callerNow, resolve, reject })));
  }

  /** Writes a batch of appends to distinct tasks (the per-task queue keeps one in flight per task). */
  async #appendBatch(entries: PendingAppend[]): Promise<void> {
    const sync = entries.some((e) => e.options.sync ?? this.#ctx.options.sync ?? true);
    // Appends whose head this store knows go in one statement (postgres-append.ts); the others,
    // and those whose head moved, take the locked batch.
    const items: (CasItem & { entry: PendingAppend })[] = [];
    let rest: PendingAppend[] = [];
    for (const e of entries) {
      const plan = entries.length > 1 ? planCas(e.taskId, this.#ctx.heads.get(e.taskId), e.events, e.options, e.callerNow) : undefined;
      if (!plan) {
        rest.push(e);
        continue;
      }
      const blobs = new Map<string, Uint8Array>();
      const bytes = e.events.map((x) => encodeEvent(externalize(x, this.#ctx.refBytes, blobs)));
      items.push({ taskId: e.taskId, plan, events: e.events, bytes, blobs, entry: e });
    }
    if (items.length > 1) {
      let written: Set<string>;
      let now = 0;
      try {
        [written, now] = await this.#casBatch(items, sync);
      } catch (err) {
        for (const it of items) this.#ctx.remember(it.taskId, undefined);
        if (isConnectionLoss(err)) return this.#alone(items.map((it) => it.entry), true);
        // Contention (a concurrent creator's row, a deadlock): the locked batch decides. Anything
        // else is a fault (a server setting such as statement_timeout, a bug): the locked batch
        // still decides, and the cause is warned about once.
        if (!CONTENTION.has(String((err as { code?: unknown }).code))) this.#batchFellBack(err);
        written = new Set();
      }
      for (const it of items) {
        if (!written.has(it.taskId)) {
          this.#ctx.remember(it.taskId, undefined);
          rest.push(it.entry);
          continue;
        }
        const { next, leaseMs } = it.plan;
        this.#ctx.remember(it.taskId, { ...next, lease: leaseMs !== undefined ? { ...next.lease!, expiresAt: now + leaseMs } : next.lease });
        this.appendPaths.oneStatement++;
        this.#ctx.notifier!.add(it.taskId, next.lastEventId, routine(it.events));
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
      results = await this.#ctx.tx((c) => this.#writeBatch(c, rest), sync);
      this.appendPaths.locked += rest.length;
    } catch (err) {
      for (const e of rest) this.#ctx.remember(e.taskId, undefined);
      // The batch failed as a whole (a lost connection, a deadlock that outlived the retries):
      // each append goes again alone, and reports its own outcome (after a lost COMMIT reply, landed).
      return this.#alone(rest, isConnectionLoss(err));
    }
    results.forEach((r, i) => {
      const e = rest[i]!;
      if (r instanceof Error) return e.reject(r);
      this.#ctx.notifier!.add(e.taskId, r.lastEventId, routine(e.events));
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
    (this.#ctx.options.logger ?? stderrLogger).warn('a group commit statement failed; its appends took the locked path (warned once per cause)', {
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
        if (landed) this.#ctx.notifier!.add(e.taskId, landed.lastEventId, routine(e.events));
        return landed ?? this.#appendOne(e);
      }).map((p, i) => p.then(entries[i]!.resolve, entries[i]!.reject)),
    );
  }

  /** The batch statement: the tasks it wrote (their heads held) and the database's now. */
  async #casBatch(items: CasItem[], sync: boolean): Promise<[Set<string>, number]> {
    const st = this.#casStatement(batchKey(!sync), () => casBatchSql(this.#s, !sync));
    const client = await this.#ctx.checkedPool().connect().catch((err: unknown) => {
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
        this.#ctx.remember(e.taskId, head);
        out.push(err as Error);
        continue;
      }
      this.#ctx.remember(e.taskId, { ...next, lease: e.options.lease ? clock.leaseToDb(next.lease!) : head.lease });
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
    const rows = await this.#ctx.query(`SELECT data FROM ${this.#s}.events WHERE task_id = $1 AND event_id BETWEEN $2 AND $3 ORDER BY event_id`, [a.taskId, from, from + a.events.length - 1]);
    if (rows.length !== a.events.length || !rows.every((r: { data: Buffer }, i) => asBuffer(encodeEvent(a.events[i]!)).equals(r.data))) return undefined;
    const summary = await this.getSummary(a.taskId);
    return summary ? { lastEventId: from + a.events.length - 1, summary } : undefined;
  }

  /**
   * One append: one autocommit statement when the head this store last saw still holds
   * (postgres-append.ts), else the locked transaction, which decides on the head it reads.
   */
  async #appendOnce(a: Omit<PendingAppend, 'resolve' | 'reject'>): Promise<AppendResult> {
    const sync = a.options.sync ?? this.#ctx.options.sync ?? true;
    const plan = planCas(a.taskId, this.#ctx.heads.get(a.taskId), a.events, a.options, a.callerNow);
    const written = plan ? await this.#casAppend(a, plan, sync) : undefined;
    const out = written ?? (await this.#lockedAppend(a, sync));
    this.#ctx.notifier!.add(a.taskId, out.lastEventId, routine(a.events));
    return out;
  }

  /** The one-statement append of `plan`; undefined (nothing written) when the head moved. */
  async #casAppend(a: Omit<PendingAppend, 'resolve' | 'reject'>, plan: CasPlan, sync: boolean): Promise<AppendResult | undefined> {
    const { taskId, events } = a;
    const blobs = new Map<string, Uint8Array>();
    const bytes = events.map((e) => encodeEvent(externalize(e, this.#ctx.refBytes, blobs)));
    const { shape, key, values } = casStatement(taskId, plan, events, bytes, blobs, !sync);
    const st = this.#casStatement(key, () => casSql(this.#s, shape));
    const client = await this.#ctx.checkedPool().connect().catch((err: unknown) => {
      throw unavailable(err, this.location, 'a write');
    });
    guard(client);
    let broken: Error | undefined;
    try {
      const res = await (client as unknown as PreparingClient).query({ name: st.name, text: st.text, values });
      const row = res.rows[0] as { ok: boolean; now: string | number };
      if (!row.ok) {
        this.#ctx.remember(taskId, undefined);
        return undefined;
      }
      const { next, leaseMs } = plan;
      this.#ctx.remember(taskId, { ...next, lease: leaseMs !== undefined ? { ...next.lease!, expiresAt: Number(row.now) + leaseMs } : next.lease });
      this.appendPaths.oneStatement++;
      return { lastEventId: next.lastEventId, summary: { ...next.summary! } };
    } catch (err) {
      this.#ctx.remember(taskId, undefined);
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
      st = { name: this.#ctx.options.preparedStatements === false ? undefined : `turnlog_append_${createHash('sha256').update(t).digest('hex').slice(0, 24)}`, text: t };
      this.#casStatements.set(key, st);
    }
    return st;
  }

  /** One append in its own transaction (three round trips: BEGIN with the lock, the write, COMMIT). */
  #lockedAppend(a: Omit<PendingAppend, 'resolve' | 'reject'>, sync: boolean): Promise<AppendResult> {
    const { taskId, events, options, callerNow } = a;
    this.appendPaths.locked++;
    let refused = false;
    return this.#ctx.tx(async (c) => {
      const locked = await this.#ctx.lockHead(c, taskId);
      const clock = new ClockFrame(locked.dbNow, callerNow);
      let next: TaskHead;
      try {
        next = applyAppend(taskId, clock.headToCaller(locked.head), events, options, true);
      } catch (err) {
        refused = true;
        this.#ctx.remember(taskId, locked.head);
        throw err;
      }
      this.#ctx.remember(taskId, { ...next, lease: options.lease ? clock.leaseToDb(next.lease!) : locked.head.lease });
      const ids = events.map((e) => e.eventId);
      const blobs = new Map<string, Uint8Array>();
      const bytes = events.map((e) => asBuffer(encodeEvent(externalize(e, this.#ctx.refBytes, blobs))));
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
      if (!refused) this.#ctx.remember(taskId, undefined);
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
    this.#ctx.checkedPool();
    checkTaskId(taskId);
    return this.#ctx.serial(taskId, () => this.#ctx.tx(async (c) => {
      const locked = await this.#ctx.lockHead(c, taskId);
      const clock = new ClockFrame(locked.dbNow, now);
      // The head read stands (a stale one only costs an append the locked path).
      this.#ctx.remember(taskId, locked.head);
      const next = rule(clock.headToCaller(locked.head));
      if (!next) return undefined;
      const stored = clock.leaseToDb(next);
      await this.#putLease(c, taskId, stored, locked.hasLease);
      this.#ctx.remember(taskId, { ...locked.head, lease: stored });
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
    this.#ctx.checkedPool();
    checkTaskId(taskId);
    await this.#ctx.serial(taskId, () => this.#ctx.tx(async (c) => {
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
    this.#ctx.checkedPool();
    checkTaskId(taskId);
    this.#ctx.remember(taskId, undefined);
    await this.#ctx.serial(taskId, () => this.#ctx.tx(async (c) => {
      await this.#ctx.lockHead(c, taskId);
      await this.#deleteIds(c, [taskId]);
    }));
  }

  async #deleteIds(c: SqlClient, ids: string[]): Promise<void> {
    for (const id of ids) this.#ctx.remember(id, undefined);
    for (const table of ['events', 'payloads', 'snapshots', 'leases', 'summaries', 'corrupt_marks', 'due_claims']) {
      await c.query(`DELETE FROM ${this.#s}.${table} WHERE task_id = ANY($1::text[])`, [ids]);
    }
  }

  async purgeCompleted(olderThanMs: number, now: number): Promise<string[]> {
    this.#ctx.checkedPool();
    // updatedAt is the engine's event time, so retention compares it with the caller's clock.
    return this.#ctx.tx(async (c) => {
      const res = await c.query(
        // A task the engine isolated as corrupt is kept for inspection, whatever its age.
        `${retainedSql(this.#s)} ORDER BY s.task_id FOR UPDATE OF s SKIP LOCKED`,
        [now - olderThanMs],
      );
      const ids = res.rows.map((r: { task_id: string }) => r.task_id);
      if (ids.length) await this.#deleteIds(c, ids);
      return ids;
    });
  }

  // ---------------------------------------------------------------------------------------------
  // Reads (postgres-reads.ts): single statements, so they never block writers and see committed data only.

  readEvents(taskId: string, options: ReadOptions = {}): Promise<HistoryEvent[]> {
    return readEvents(this.#ctx, taskId, options);
  }

  /** Compaction: event 2 becomes `compacted`, events 3..throughEventId go, in one transaction. */
  async compactHistory(taskId: string, compacted: HistoryEvent): Promise<void> {
    this.#ctx.checkedPool();
    checkTaskId(taskId);
    if (compacted.type !== 'HistoryCompacted' || compacted.eventId !== 2) throw invalidArgument(`Task ${taskId}: compactHistory takes a HistoryCompacted event 2.`);
    await this.#ctx.serial(taskId, () => this.#ctx.tx(async (c) => {
      await this.#ctx.lockHead(c, taskId);
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

  async markCorrupt(mark: CorruptMark): Promise<void> {
    this.#ctx.checkedPool();
    checkTaskId(mark.taskId);
    // Not through the task's rows: reading them may be what fails. Only this row is written.
    await this.#ctx.query(
      `INSERT INTO ${this.#s}.corrupt_marks (task_id, key, code, message, time) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (task_id) DO UPDATE SET key = EXCLUDED.key, code = EXCLUDED.code, message = EXCLUDED.message, time = EXCLUDED.time`,
      [mark.taskId, mark.key, mark.code, mark.message, mark.time],
      'a write',
    );
  }

  async listCorrupt(): Promise<CorruptMark[]> {
    this.#ctx.checkedPool();
    return [...(await corruptMarks(this.#ctx)).values()];
  }

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
    return this.#ctx.notifier?.sent ?? 0;
  }

  /** How many times the LISTEN connection has connected (1, then one more per reconnect). */
  listenerConnects(): number {
    return this.#listener?.connects ?? 0;
  }

  /** Bytes the store's tables use on the server, with indexes and TOAST (`turnlog stats`). */
  sizeBytes(): Promise<number> {
    return sizeBytes(this.#ctx);
  }

  /** The database clock, ms since the epoch (what lease expiry is measured against). */
  databaseNow(): Promise<number> {
    return databaseNow(this.#ctx);
  }
}
