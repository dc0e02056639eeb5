/**
 * The PostgreSQL store's schema, as numbered migrations. Each runs in its own transaction under
 * a transaction-scoped advisory lock, so engines starting at once apply each exactly once
 * (docs/scale-out.md#migrations). Never edit a shipped migration: add the next number.
 */
import { TurnlogError } from '../errors.js';

/** One schema step. `sql` gets the quoted schema name. */
export interface Migration {
  version: number;
  name: string;
  sql: (schema: string) => string;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'events, summaries, leases, snapshots',
    // COLLATE "C": ids and workflows sort by UTF-8 bytes, as the Level and memory stores list them.
    sql: (s) => `
      CREATE TABLE ${s}.events (
        task_id text COLLATE "C" NOT NULL,
        event_id bigint NOT NULL,
        data bytea NOT NULL,
        PRIMARY KEY (task_id, event_id)
      );
      CREATE TABLE ${s}.summaries (
        task_id text COLLATE "C" PRIMARY KEY,
        workflow text COLLATE "C" NOT NULL,
        kind text NOT NULL,
        status text NOT NULL,
        outcome text,
        last_event_id bigint NOT NULL,
        max_generation bigint NOT NULL,
        turn bigint NOT NULL,
        queued bigint NOT NULL,
        last_input_id text,
        created_at bigint NOT NULL,
        updated_at bigint NOT NULL
      );
      CREATE INDEX summaries_status_workflow ON ${s}.summaries (status, workflow, task_id);
      CREATE INDEX summaries_workflow ON ${s}.summaries (workflow, task_id);
      CREATE INDEX summaries_status_updated ON ${s}.summaries (status, updated_at);
      CREATE INDEX summaries_in_progress ON ${s}.summaries (task_id) WHERE status = 'in_progress';
      CREATE TABLE ${s}.leases (
        task_id text COLLATE "C" PRIMARY KEY,
        owner text NOT NULL,
        instance text NOT NULL,
        generation bigint NOT NULL,
        expires_at bigint NOT NULL
      );
      COMMENT ON COLUMN ${s}.leases.expires_at IS 'milliseconds since the epoch on the database clock';
      CREATE INDEX leases_expires_at ON ${s}.leases (expires_at);
      CREATE TABLE ${s}.snapshots (
        task_id text COLLATE "C" PRIMARY KEY,
        event_id bigint NOT NULL,
        data bytea NOT NULL
      );
    `,
  },
  {
    version: 2,
    name: 'corrupt marks',
    // Written when an engine isolates a task it cannot read; never touches the task's own rows.
    sql: (s) => `
      CREATE TABLE ${s}.corrupt_marks (
        task_id text COLLATE "C" PRIMARY KEY,
        key text NOT NULL,
        code text NOT NULL,
        message text NOT NULL,
        time double precision NOT NULL
      );
    `,
  },
  {
    version: 3,
    name: 'large payloads by reference',
    sql: (s) => `
      CREATE TABLE ${s}.payloads (
        task_id text COLLATE "C" NOT NULL,
        hash text COLLATE "C" NOT NULL,
        data bytea NOT NULL,
        PRIMARY KEY (task_id, hash)
      );
    `,
  },
  {
    version: 4,
    name: 'flow limits',
    // Slots held by steps under a flow limit (a lease on the database clock) and each limit's rate (GCRA time).
    sql: (s) => `
      CREATE TABLE ${s}.limit_slots (
        limit_name text COLLATE "C" NOT NULL,
        slot_id text COLLATE "C" NOT NULL,
        instance text NOT NULL,
        expires_at bigint NOT NULL,
        PRIMARY KEY (limit_name, slot_id)
      );
      COMMENT ON COLUMN ${s}.limit_slots.expires_at IS 'milliseconds since the epoch on the database clock';
      CREATE TABLE ${s}.limit_buckets (
        limit_name text COLLATE "C" PRIMARY KEY,
        tat double precision NOT NULL
      );
    `,
  },
  {
    version: 5,
    name: 'claims of due work',
    // One row per task an engine claimed in claimDueWork; expires_at on the database clock.
    sql: (s) => `
      CREATE TABLE ${s}.due_claims (
        task_id text COLLATE "C" PRIMARY KEY,
        instance text NOT NULL,
        expires_at bigint NOT NULL
      );
      COMMENT ON COLUMN ${s}.due_claims.expires_at IS 'milliseconds since the epoch on the database clock';
    `,
  },
  {
    version: 6,
    name: 'completions for retention; summaries updated in place (HOT)',
    // Retention reads completions (written by triggers only when a row is or was completed), so
    // updated_at leaves every summaries index and a step's update is HOT (docs/scale-out.md#schema).
    // The triggers exist before the back-fill: writers wait for the lock, none slips between the two.
    sql: (s) => `
      CREATE TABLE ${s}.completions (
        task_id text COLLATE "C" PRIMARY KEY,
        updated_at bigint NOT NULL
      );
      COMMENT ON TABLE ${s}.completions IS 'task_id and updated_at of every summary whose status is completed, kept by triggers on summaries';
      CREATE INDEX completions_updated ON ${s}.completions (updated_at);
      CREATE FUNCTION ${s}.summaries_track_completion() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        IF TG_OP <> 'INSERT' AND (TG_OP = 'DELETE' OR NEW.status <> 'completed') THEN
          DELETE FROM ${s}.completions WHERE task_id = OLD.task_id;
        END IF;
        IF TG_OP <> 'DELETE' AND NEW.status = 'completed' THEN
          INSERT INTO ${s}.completions (task_id, updated_at) VALUES (NEW.task_id, NEW.updated_at)
            ON CONFLICT (task_id) DO UPDATE SET updated_at = EXCLUDED.updated_at;
        END IF;
        RETURN NULL;
      END
      $fn$;
      CREATE TRIGGER summaries_completion_insert AFTER INSERT ON ${s}.summaries
        FOR EACH ROW WHEN (NEW.status = 'completed') EXECUTE FUNCTION ${s}.summaries_track_completion();
      CREATE TRIGGER summaries_completion_update AFTER UPDATE ON ${s}.summaries
        FOR EACH ROW WHEN (NEW.status = 'completed' OR OLD.status = 'completed') EXECUTE FUNCTION ${s}.summaries_track_completion();
      CREATE TRIGGER summaries_completion_delete AFTER DELETE ON ${s}.summaries
        FOR EACH ROW WHEN (OLD.status = 'completed') EXECUTE FUNCTION ${s}.summaries_track_completion();
      INSERT INTO ${s}.completions (task_id, updated_at) SELECT task_id, updated_at FROM ${s}.summaries WHERE status = 'completed';
      DROP INDEX ${s}.summaries_status_updated;
    `,
  },
  {
    version: 7,
    name: 'pending task cancels in summaries',
    // cancel_requested holds for the history through cancel_known_through; where that is not the
    // row's last_event_id (rows from before this migration: NULL, and an older build's writes,
    // which leave both as they were) the claim of due work derives it from the events
    // (postgres-claims.ts, docs/scale-out.md#pending-task-cancels). Constant defaults: no rewrite.
    sql: (s) => `
      ALTER TABLE ${s}.summaries ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false,
        ADD COLUMN cancel_known_through bigint;
      COMMENT ON COLUMN ${s}.summaries.cancel_requested IS 'a task cancel is pending (no TaskCompleted since), as of event cancel_known_through';
      COMMENT ON COLUMN ${s}.summaries.cancel_known_through IS 'the last_event_id cancel_requested was derived for; another value means not known';
    `,
  },
];

/** The schema version this build writes and reads: its highest migration (all of MIGRATIONS must be applied). */
export const SCHEMA_VERSION = Math.max(...MIGRATIONS.map((m) => m.version));

/** The minimal client surface the migrations need (a `pg` PoolClient fits). */
export interface SqlClient {
  query(text: string, values?: unknown[]): Promise<{ rows: any[]; rowCount: number | null }>;
}

/** Quotes a schema name after checking it is a plain identifier. */
export function quoteSchema(schema: string): string {
  if (typeof schema !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(schema)) {
    throw new TurnlogError(
      'TURNLOG_INVALID_ARGUMENT',
      `PostgreSQL schema name ${JSON.stringify(schema)} is invalid. Use letters, digits and underscores (at most 63), not starting with a digit.`,
    );
  }
  if (schema.startsWith('pg_')) {
    // PostgreSQL refuses to create it; refused here, it is a bad argument rather than a failed open.
    throw new TurnlogError('TURNLOG_INVALID_ARGUMENT', `PostgreSQL schema name ${JSON.stringify(schema)} is reserved: PostgreSQL keeps names starting with pg_ for itself. Pick another name (default turnlog).`);
  }
  return `"${schema}"`;
}

/** The versions applied in `schema`, or undefined when it has no migrations table. Reads only. */
export async function appliedVersions(client: SqlClient, schema: string): Promise<number[] | undefined> {
  const exists = await client.query('SELECT to_regclass($1) IS NOT NULL AS ok', [`${quoteSchema(schema)}.schema_migrations`]);
  if (!exists.rows[0].ok) return undefined;
  const res = await client.query(`SELECT version FROM ${quoteSchema(schema)}.schema_migrations ORDER BY version`);
  return res.rows.map((r: { version: number }) => Number(r.version));
}

/**
 * What `applied` lacks of `migrations` and what it holds that they do not know, by version.
 * Presence, not the maximum: migrations written on parallel branches (4 and 5) apply in any order.
 */
export function migrationGap(applied: readonly number[], migrations: readonly Migration[] = MIGRATIONS): { missing: number[]; unknown: number[] } {
  const known = new Set(migrations.map((m) => m.version));
  const have = new Set(applied);
  return {
    missing: migrations.map((m) => m.version).filter((v) => !have.has(v)).sort((a, b) => a - b),
    unknown: [...have].filter((v) => !known.has(v)).sort((a, b) => a - b),
  };
}

/** TURNLOG_HISTORY_FORMAT for a schema holding migrations this build does not know (a newer turnlog's). */
export function unknownMigrationsError(schema: string, unknown: readonly number[], migrations: readonly Migration[] = MIGRATIONS): TurnlogError {
  return new TurnlogError(
    'TURNLOG_HISTORY_FORMAT',
    `PostgreSQL schema ${schema} has migration${unknown.length > 1 ? 's' : ''} ${unknown.join(', ')} applied, which this build does not know (it knows ${migrations.map((m) => m.version).join(', ')}). Upgrade turnlog to use it.`,
  );
}

/**
 * Applies every migration whose version is not recorded in `schema_migrations` (by presence, in
 * version order), each in one transaction under `pg_advisory_xact_lock` keyed by the schema name,
 * re-reading the applied versions inside the lock. Safe from many connections and processes at
 * once. Returns the versions it applied. `migrations` is for tests (default: this build's).
 */
export async function migrate(client: SqlClient, schema: string, migrations: readonly Migration[] = MIGRATIONS): Promise<number[]> {
  const s = quoteSchema(schema);
  const applied: number[] = [];
  const ordered = [...migrations].sort((a, b) => a.version - b.version);
  for (const m of ordered) {
    await client.query('BEGIN');
    try {
      await client.query(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, [`turnlog.migrate:${schema}`]);
      await client.query(`CREATE SCHEMA IF NOT EXISTS ${s}`);
      await client.query(
        `CREATE TABLE IF NOT EXISTS ${s}.schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
      );
      const done = await client.query(`SELECT version FROM ${s}.schema_migrations`);
      const versions = done.rows.map((r: { version: number }) => Number(r.version));
      const gap = migrationGap(versions, migrations);
      if (gap.unknown.length > 0) throw unknownMigrationsError(schema, gap.unknown, migrations);
      if (gap.missing.includes(m.version)) {
        await client.query(m.sql(s));
        await client.query(`INSERT INTO ${s}.schema_migrations (version, name) VALUES ($1, $2)`, [m.version, m.name]);
        applied.push(m.version);
      }
      await client.query('COMMIT');
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
  }
  return applied;
}
