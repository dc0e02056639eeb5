/**
 * A connection the server terminates while the store has it checked out and idle (between two
 * queries of a transaction) makes pg emit 'error' on the client. Without a listener that is an
 * uncaught exception that kills the whole process (seen as a flake of the pg_terminate_backend
 * test under load). Every connection of the store's pool carries a listener for its whole life.
 */
import pg from 'pg';
import { afterEach, expect, it } from 'vitest';
import { createPostgresStore, type PostgresHistoryStore } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema, withClient } from '../helpers/postgres.js';
import { until } from '../helpers/processes.js';

describePg('PostgreSQL store: a terminated connection', () => {
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it('terminated while checked out and idle: no uncaught error; the pool replaces it and the store keeps working', async () => {
    const schema = uniqueSchema('turnlog_terminated');
    cleanups.push(() => dropSchema(schema));
    const app = `turnlog_term_${process.pid}`;
    const pool = new pg.Pool({ connectionString: PG_URL, application_name: app, max: 2 });
    // The user's pool: its idle clients are the user's to handle, as pg documents.
    pool.on('error', () => undefined);
    cleanups.push(() => pool.end());
    const store: PostgresHistoryStore = createPostgresStore({ pool, schema });
    cleanups.push(() => store.close());
    await store.open();

    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown) => uncaught.push(err);
    process.on('uncaughtException', onUncaught);
    cleanups.push(async () => process.off('uncaughtException', onUncaught));

    // A connection made for the store, checked out and idle (as inside a transaction between
    // statements), whose backend the server then terminates.
    const client = await pool.connect();
    const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
    const ended = new Promise<void>((resolve) => client.once('end', () => resolve()));
    await withClient((c) => c.query('SELECT pg_terminate_backend($1)', [pid]));
    await ended;
    await until(async () => (await withClient((c) => c.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = $1', [pid]))).rows[0].n === 0, 'the backend to go');
    client.release(true);

    expect(uncaught).toEqual([]);
    expect((await store.listTasks()).tasks).toEqual([]);
  });
});
