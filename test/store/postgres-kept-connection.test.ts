/**
 * The connection the PostgreSQL store keeps for lone one-statement appends
 * (postgres-appender.ts, `#kept`): a sequential writer's appends do not check a connection out of
 * the pool each; one the server drops while it is kept is replaced; close() gives it back (the
 * store's pool.end() would wait for it forever otherwise).
 */
import pg from 'pg';
import { afterAll, expect, it, vi } from 'vitest';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema, withClient } from '../helpers/postgres.js';
import { created, step } from './events.js';

describePg('PostgreSQL store: the connection kept for lone appends', () => {
  const schema = uniqueSchema('turnlog_kept');
  afterAll(() => dropSchema(schema));

  it('sequential appends take one pool connection, a dropped one is replaced, close gives it back', async () => {
    // A long notice interval: the first notice goes at once, the rest wait for close (one checkout).
    const store = createPostgresStore({ connectionString: PG_URL, schema, noticeIntervalMs: 1_000 });
    await store.open();
    const connect = vi.spyOn(pg.Pool.prototype, 'connect');
    try {
      await store.append('t', [created(1)], { expectedLastEventId: 0, generation: 1 });
      for (let i = 2; i <= 21; i++) await store.append('t', [step(i, i)], { expectedLastEventId: i - 1, generation: 1 });
      expect(store.appendPaths.oneStatement).toBe(21);
      // The kept connection, and the first notice's: not one per append.
      expect(connect.mock.calls.length).toBeLessThanOrEqual(2);

      const killed = await withClient(async (c) =>
        (await c.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND (query LIKE 'WITH s AS MATERIALIZED%' OR query LIKE 'WITH w AS (UPDATE%') AND query LIKE $1`, [`%"${schema}".summaries%`])).rowCount,
      );
      expect(killed).toBe(1);
      await new Promise((r) => setTimeout(r, 100));
      for (let i = 22; i <= 25; i++) await store.append('t', [step(i, i)], { expectedLastEventId: i - 1, generation: 1 });
      expect((await store.readEvents('t')).map((e) => e.eventId)).toEqual(Array.from({ length: 25 }, (_, i) => i + 1));
    } finally {
      connect.mockRestore();
      await store.close();
    }
  });
});
