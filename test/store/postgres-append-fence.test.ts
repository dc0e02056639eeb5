/**
 * The one-statement append's lease fence (store/postgres-append.ts, `casSql`): on a task with
 * rows the summary's UPDATE is the compare-and-swap and the lease is compared after it, so when
 * only the lease moved (a zombie's step after another engine took the task without touching the
 * summary), the statement has already updated the summary and must still write nothing: the
 * events' NULL data fails their insert, and the locked path reports the contract's error.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { StaleGenerationError } from '../../src/errors.js';
import type { AppendOptions } from '../../src/store/history-store.js';
import { createPostgresStore, type PostgresHistoryStore } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema, withClient } from '../helpers/postgres.js';
import { created, step } from './events.js';

describePg('PostgreSQL one-statement append, a lease moved behind an unchanged summary', () => {
  const schema = uniqueSchema('turnlog_fence');
  // max 2: no kept connection (#casAppend's pool path); max 4: the kept connection (#lone).
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

  const rows = (taskId: string) =>
    withClient(async (c) => {
      const s = await c.query(`SELECT * FROM "${schema}".summaries WHERE task_id = $1`, [taskId]);
      const l = await c.query(`SELECT * FROM "${schema}".leases WHERE task_id = $1`, [taskId]);
      const e = await c.query(`SELECT count(*)::int AS n FROM "${schema}".events WHERE task_id = $1`, [taskId]);
      return { summary: s.rows[0], lease: l.rows[0], events: e.rows[0].n as number };
    });

  let n = 0;
  it.each([
    ['pool', 1, false],
    ['pool', 2, false],
    ['pool', 1, true],
    ['kept', 1, false],
    ['kept', 2, true],
  ] as const)('%s connection, %i event(s), lease written %s: refused as stale, nothing written', async (which, count, writesLease) => {
    const store = stores[which]!;
    const taskId = `fence-${n++}`;
    const now = Date.now();
    const lease = { owner: 'engine', instance: 'iA', generation: 1, expiresAt: now + 60_000 };
    await store.append(taskId, [created(1, { time: now })], { expectedLastEventId: 0, generation: 1, lease });
    await store.append(taskId, [step(2, 1, { time: now })], { expectedLastEventId: 1, generation: 1 });
    // Another engine takes the task: its lease, generation 2; the summary is as the store left it.
    await withClient((c) => c.query(`UPDATE "${schema}".leases SET instance = 'iB', generation = 2 WHERE task_id = $1`, [taskId]));
    const before = await rows(taskId);
    const paths = { ...store.appendPaths };

    const events = Array.from({ length: count }, (_, i) => step(3 + i, 2 + i, { time: now + 1 }));
    const options: AppendOptions = { expectedLastEventId: 2, generation: 1 };
    if (writesLease) options.lease = { ...lease, expiresAt: now + 90_000 };
    await expect(store.append(taskId, events, options)).rejects.toBeInstanceOf(StaleGenerationError);

    expect(await rows(taskId)).toEqual(before);
    expect(before.events).toBe(2);
    // The statement went out on the head the store remembered and was refused; the locked path decided.
    expect(store.appendPaths).toEqual({ oneStatement: paths.oneStatement, locked: paths.locked + 1 });
  });
});
