/**
 * The PostgreSQL store's private state, shared by its parts (reads, the write path, leases,
 * retention): the pool while open, the quoted schema, the heads it last saw, the per-task order
 * of its writes, the notifier; and the connection mechanics they all use: one guarded read, one
 * transaction, the locked read of a task's head. Internal: not exported from the package.
 */
import { TurnlogError } from '../errors.js';
import { quoteSchema, type SqlClient } from './postgres-migrations.js';
import { DB_NOW, guard, isConnectionLoss, quoteLiteral, redact, toLease, toSummary, unavailable, type LeaseRow, type SummaryRow } from './postgres-rows.js';
import { checkRefBytes } from './payload-refs.js';
import type { Notifier } from './postgres-notifier.js';
import type { PgClientLike, PgPoolLike, PostgresStoreOptions } from './postgres-options.js';
import type { TaskHead } from './task-head.js';

/**
 * Errors that are contention, not faults: a concurrent creator's row (unique violation), a
 * deadlock or serialization failure. A transaction retries them; a batch statement's appends
 * take the locked path quietly.
 */
export const CONTENTION = new Set(['23505', '40P01', '40001']);

/** Heads kept for the one-statement append (a few MB at most). */
const HEADS_KEPT = 10_000;

/** A task's head read under row locks, with the database's clock at that moment. */
export interface LockedHead {
  head: TaskHead;
  /** The database clock, ms since the epoch. */
  dbNow: number;
  exists: boolean;
  hasLease: boolean;
}

/** A checked-out client, with the store's error listener on it. */
function guarded(client: PgClientLike): PgClientLike {
  guard(client);
  return client;
}

export class PgStoreContext {
  readonly options: PostgresStoreOptions;
  /** The PostgreSQL schema, and the same quoted for SQL text. */
  readonly schema: string;
  readonly s: string;
  /** The redacted connection and schema, in every error message. */
  readonly location: string;
  /** `payloadRefBytes`, checked. */
  readonly refBytes: number | undefined;
  pool: PgPoolLike | undefined;
  state: 'new' | 'opening' | 'open' | 'closed' = 'new';
  /** Per task, the tail of this store's writes: one process's writes to a task run in call order. */
  readonly queues = new Map<string, Promise<unknown>>();
  /**
   * The head this store last saw of each task it wrote (lease times on the database clock): the
   * one-statement append expects it (postgres-append.ts). Only a hint: a stale head costs the
   * locked path, never a wrong write. Least recently written first, at most HEADS_KEPT.
   */
  readonly heads = new Map<string, TaskHead>();
  /** Sends the notices of committed appends, many per transaction (postgres-notifier.ts); set on open. */
  notifier: Notifier | undefined;

  constructor(options: PostgresStoreOptions) {
    this.options = options;
    this.schema = options.schema ?? 'turnlog';
    this.s = quoteSchema(this.schema);
    this.refBytes = checkRefBytes(options.payloadRefBytes);
    this.location = `${options.connectionString ? redact(options.connectionString) : 'postgres (pool)'}#${this.schema}`;
  }

  closedError(): TurnlogError {
    return new TurnlogError('TURNLOG_STORE_CLOSED', `Store ${this.location} is not open. Call open() first, and do not use a store after close().`);
  }

  checkedPool(): PgPoolLike {
    if (this.state !== 'open' || !this.pool) throw this.closedError();
    return this.pool;
  }

  /**
   * A pooled connection with the store's error listener on it (guard); a closed store is refused
   * (TURNLOG_STORE_CLOSED), a failure to connect too, as `what` (TURNLOG_STORE_UNAVAILABLE). The
   * caller releases it. Not an async function: the pool's promise chained once, as the callers'
   * `.catch` was (an async wrapper costs every query and transaction a promise, test:
   * store/postgres-lone-append).
   */
  connect(what: string): Promise<PgClientLike> {
    return this.checkedPool().connect().then(guarded, (err: unknown) => {
      throw unavailable(err, this.location, what);
    });
  }

  /**
   * One statement on a guarded client (not `pool.query`, whose one-shot error listener leaves a
   * second connection error of a terminated session unheard: an uncaught exception under
   * `pg_terminate_backend`, test: runtime/postgres-failures). `name`: run it as that prepared statement.
   */
  async query(text: string, values: unknown[], what = 'a read', name?: string): Promise<any[]> {
    const client = await this.connect(what);
    let broken: Error | undefined;
    try {
      if (name === undefined) return (await client.query(text, values)).rows;
      // pg's prepared form: parsed and planned once a connection.
      return (await (client as unknown as { query(c: { name: string; text: string; values: unknown[] }): Promise<{ rows: any[] }> }).query({ name, text, values })).rows;
    } catch (err) {
      if (isConnectionLoss(err)) broken = err as Error;
      throw unavailable(err, this.location, what);
    } finally {
      client.release(broken);
    }
  }

  /**
   * Runs `fn` in one transaction. A unique violation means a concurrent creator won the
   * insert race: retry, so the loser re-reads the head and fails with the contract's error.
   */
  async tx<T>(fn: (c: PgClientLike) => Promise<T>, sync = true): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const client = await this.connect('a write');
      let broken: Error | undefined;
      // BEGIN rides with the transaction's first statement when that one has no parameters
      // (lockHead): a multi-statement simple query, one round trip fewer per write.
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
  remember(taskId: string, head: TaskHead | undefined): void {
    this.heads.delete(taskId);
    if (!head) return;
    this.heads.set(taskId, head);
    if (this.heads.size > HEADS_KEPT) this.heads.delete(this.heads.keys().next().value!);
  }

  /**
   * Runs a write to `taskId` after this store's earlier writes to it, so pipelined appends
   * (not awaited) land in call order as on the Level store; other tasks run in parallel.
   */
  serial<T>(taskId: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.queues.get(taskId);
    const run = prev ? prev.then(fn, fn) : fn();
    // One promise for the tail: it never rejects, and drops itself from the map once the write settles.
    const done = (): void => {
      if (this.queues.get(taskId) === tail) this.queues.delete(taskId);
    };
    const tail: Promise<unknown> = run.then(done, done);
    this.queues.set(taskId, tail);
    return run;
  }

  /** Locks the task's summary then lease row (always this order) and reads the database clock. */
  async lockHead(c: SqlClient, taskId: string): Promise<LockedHead> {
    // The id as a literal (no parameters), so tx can send BEGIN in the same round trip.
    const id = quoteLiteral(taskId);
    const res = await c.query(
      `WITH s AS (SELECT * FROM ${this.s}.summaries WHERE task_id = ${id} FOR UPDATE),
            l AS (SELECT owner, instance, generation, expires_at FROM ${this.s}.leases WHERE task_id = ${id} FOR UPDATE)
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
}
