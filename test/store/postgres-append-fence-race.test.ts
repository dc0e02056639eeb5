/**
 * The one-statement append's fence against a lease taken *while* the statement waits (invariant 3,
 * store/postgres-append.ts `casSql`): another engine's claim holds the task's summary row locked
 * and moves its lease, the zombie's step statement waits on that row, and the claim
 * commits without touching the summary. The statement must then see the new lease and write
 * nothing: the zombie learns StaleGenerationError, the history stays as the claim left it.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import pg from 'pg';
import { StaleGenerationError } from '../../src/errors.js';
import { createPostgresStore, type PostgresHistoryStore } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema, withClient } from '../helpers/postgres.js';
import { created, step } from './events.js';

describePg('PostgreSQL one-statement append, a lease taken while it waits for the summary row', () => {
  const schema = uniqueSchema('turnlog_fencerace');
  const stores: Record<string, PostgresHistoryStore> = {};
  beforeAll(async () => {
    stores['pool'] = createPostgresStore({ connectionString: PG_URL, schema, max: 2, groupCommit: false });
    stores['kept'] = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
    for (const s of Object.values(stores)) await s.open();
  });
  afterAll(async () => {
    for (const s of Object.values(stores)) await s.close();
    await dropSchema(schema);
  });

  const events = (taskId: string) =>
    withClient(async (c) => (await c.query(`SELECT count(*)::int AS n FROM "${schema}".events WHERE task_id = $1`, [taskId])).rows[0].n as number);

  /** Waits until a backend waits on a lock (the append's statement behind the claim's row lock). */
  async function untilBlocked(c: pg.Client): Promise<void> {
    for (let i = 0; i < 400; i++) {
      const r = await c.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, [schema]);
      if (r.rows[0].n > 0) return;
      await new Promise((r) => setTimeout(r, 10));
    }
    throw new Error('the append never waited on the claim');
  }

  let n = 0;
  it.each([
    ['pool', 'moved'],
    ['kept', 'moved'],
  ] as const)('%s connection, lease %s by the claim: refused as stale, nothing written', async (which, _how) => {
    const store = stores[which]!;
    const taskId = `race-${n++}`;
    const now = Date.now();
    const lease = { owner: 'engine', instance: 'iA', generation: 1, expiresAt: now + 60_000 };
    await store.append(taskId, [created(1, { time: now })], { expectedLastEventId: 0, generation: 1, lease });
    await store.append(taskId, [step(2, 1, { time: now })], { expectedLastEventId: 1, generation: 1 });

    const claim = new pg.Client({ connectionString: PG_URL });
    await claim.connect();
    try {
      // The claim, as leaseOp runs it: the summary row locked first, then the lease written.
      await claim.query('BEGIN');
      await claim.query(`SELECT 1 FROM "${schema}".summaries WHERE task_id = $1 FOR UPDATE`, [taskId]);
      const zombie = store.append(taskId, [step(3, 2, { time: now + 1 })], { expectedLastEventId: 2, generation: 1 }).then(
        () => 'written',
        (err: unknown) => err,
      );
      await untilBlocked(claim);
      await claim.query(
        `INSERT INTO "${schema}".leases (task_id, owner, instance, generation, expires_at) VALUES ($1, 'engine', 'iB', 2, $2)
         ON CONFLICT (task_id) DO UPDATE SET owner = EXCLUDED.owner, instance = EXCLUDED.instance, generation = EXCLUDED.generation, expires_at = EXCLUDED.expires_at`,
        [taskId, now + 60_000],
      );
      await claim.query('COMMIT');
      expect(await zombie).toBeInstanceOf(StaleGenerationError);
    } finally {
      await claim.end();
    }
    expect(await events(taskId)).toBe(2);
  });
});
