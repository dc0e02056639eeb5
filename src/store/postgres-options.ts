/**
 * The options of the PostgreSQL store (postgres-store.ts) and the `pg` surfaces it uses: types
 * only, re-exported by postgres-store.ts (no code, so importing it loads nothing).
 */
import type { SqlClient } from './postgres-migrations.js';

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
   * Appends and a task's first load (readTaskStart) as named prepared statements, parsed and planned once per connection (default true;
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
