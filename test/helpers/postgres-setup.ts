/**
 * vitest globalSetup: probes PostgreSQL once per run and hands the answer to every test file
 * (inject('pgReachable')), so an unreachable server prints exactly one line, not one per file.
 */
import pg from 'pg';

export const DEFAULT_PG_URL = 'postgres://postgres@127.0.0.1:5432/test';

export default async function setup(project: { provide(key: 'pgReachable', value: boolean): void }): Promise<void> {
  const url = process.env['TURNLOG_TEST_PG_URL'] ?? DEFAULT_PG_URL;
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  let reachable = true;
  try {
    await client.connect();
    await client.query('SELECT 1');
  } catch {
    reachable = false;
  } finally {
    await client.end().catch(() => undefined);
  }
  if (!reachable && process.env['TURNLOG_REQUIRE_PG'] === undefined) {
    console.warn(`PostgreSQL not reachable at ${url}: PostgreSQL suites skipped (set TURNLOG_REQUIRE_PG=1 to fail instead)`);
  }
  project.provide('pgReachable', reachable);
}
