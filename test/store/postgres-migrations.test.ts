/**
 * Migrations apply by presence, not above the maximum: a migration written on a parallel branch
 * (another engineer's 4 beside this one's 5) applies whichever order the schema saw them in.
 */
import { afterEach, beforeEach, expect, it } from 'vitest';
import { isTurnlogError } from '../../src/errors.js';
import { MIGRATIONS, migrate, migrationGap, type Migration } from '../../src/store/postgres-migrations.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema, withClient } from '../helpers/postgres.js';

const top = Math.max(...MIGRATIONS.map((m) => m.version));
// Two branches' migrations: `a` has the lower number but lands on a schema after `b`.
const a: Migration = { version: top + 1, name: 'branch a', sql: (s) => `CREATE TABLE ${s}.branch_a (id int)` };
const b: Migration = { version: top + 2, name: 'branch b', sql: (s) => `CREATE TABLE ${s}.branch_b (id int)` };

it('migrationGap compares by presence', () => {
  const ms = [...MIGRATIONS, a, b];
  const base = MIGRATIONS.map((m) => m.version);
  expect(migrationGap([...base, b.version], ms)).toEqual({ missing: [a.version], unknown: [] });
  expect(migrationGap([...base, a.version, b.version], MIGRATIONS)).toEqual({ missing: [], unknown: [a.version, b.version] });
  expect(migrationGap([], [b, a])).toEqual({ missing: [a.version, b.version], unknown: [] });
});

describePg('PostgreSQL migrations by presence', () => {
  let schema: string;
  beforeEach(() => {
    schema = uniqueSchema('turnlog_mig');
  });
  afterEach(async () => {
    await dropSchema(schema);
  });

  const versions = (): Promise<number[]> =>
    withClient(async (c) => (await c.query(`SELECT version FROM "${schema}".schema_migrations ORDER BY version`)).rows.map((r: { version: number }) => r.version));
  const run = (ms: readonly Migration[]): Promise<number[]> => withClient((c) => migrate(c as never, schema, ms));

  it('a lower-numbered migration written on a parallel branch applies after a higher one', async () => {
    // The schema met branch b's build first (… 5), then the merged build (… 4, 5).
    expect(await run([...MIGRATIONS, b])).toEqual([...MIGRATIONS.map((m) => m.version), b.version]);
    expect(await run([...MIGRATIONS, a, b])).toEqual([a.version]);
    expect(await versions()).toEqual([...MIGRATIONS.map((m) => m.version), a.version, b.version].sort((x, y) => x - y));
    const tables = await withClient((c) => c.query(`SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = $1 AND tablename IN ('branch_a', 'branch_b')`, [schema]));
    expect(tables.rows[0].n).toBe(2);
    expect(await run([...MIGRATIONS, a, b])).toEqual([]);
  });

  it('the other order, and three connections at once, apply each exactly once', async () => {
    await run([...MIGRATIONS, a]);
    const applied = await Promise.all([0, 1, 2].map(() => run([...MIGRATIONS, b, a])));
    expect(applied.flat()).toEqual([b.version]);
    expect(await versions()).toContain(b.version);
  });

  it('a schema holding a migration this build does not know is TURNLOG_HISTORY_FORMAT, whatever its number', async () => {
    await run([...MIGRATIONS, a]);
    const err = await run(MIGRATIONS).catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_HISTORY_FORMAT')).toBe(true);
    expect(String((err as Error).message)).toContain(String(a.version));
    const store = createPostgresStore({ connectionString: PG_URL, schema, migrate: false });
    expect(isTurnlogError(await store.open().catch((e: unknown) => e), 'TURNLOG_HISTORY_FORMAT')).toBe(true);
  });

  it('migrate: false names the migrations a schema lacks, even below its highest', async () => {
    await run(MIGRATIONS.filter((m) => m.version !== 2));
    const store = createPostgresStore({ connectionString: PG_URL, schema, migrate: false });
    const err = await store.open().catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_STORE_NOT_FOUND')).toBe(true);
    expect(String((err as Error).message)).toContain('migration 2 not applied');
  });
});
