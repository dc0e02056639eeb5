// The PostgreSQL benchmarks' connection: TURNLOG_TEST_PG_URL (default the test server), probed
// with one client; unreachable, it prints one line saying the benchmark is skipped.
import pg from 'pg';

export async function connectPg(benchmark: string): Promise<{ url: string; probe: pg.Client } | undefined> {
  const url = process.env['TURNLOG_TEST_PG_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';
  const probe = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  try {
    await probe.connect();
  } catch {
    console.log(`PostgreSQL not reachable at ${url}: ${benchmark} skipped`);
    return undefined;
  }
  return { url, probe };
}
