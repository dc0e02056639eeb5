/**
 * The PostgreSQL claim of due work (docs/scale-out.md#due-claims): stores on separate pools
 * racing for the same due tasks get disjoint batches; a claim expires on the database clock.
 */
import { afterEach, beforeEach, expect, it } from 'vitest';
import type { DueTask } from '../../src/store/history-store.js';
import { createPostgresStore, type PostgresHistoryStore } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema, withClient } from '../helpers/postgres.js';
import { until } from '../helpers/processes.js';
import { created, queued } from './events.js';

describePg('PostgreSQL claims of due work', () => {
  let schema: string;
  const stores: PostgresHistoryStore[] = [];
  const open = async () => {
    const s = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
    stores.push(s);
    await s.open();
    return s;
  };
  beforeEach(() => {
    schema = uniqueSchema('turnlog_claims');
  });
  afterEach(async () => {
    for (const s of stores.splice(0)) await s.close();
    await dropSchema(schema);
  });

  /** `n` pending tasks p000… (created with one queued input, no turn). */
  async function pending(store: PostgresHistoryStore, n: number): Promise<string[]> {
    const ids = Array.from({ length: n }, (_, i) => `p${String(i).padStart(3, '0')}`);
    await Promise.all(ids.map((id) => store.append(id, [created(1), queued(2, `${id}-in`)], { expectedLastEventId: 0, generation: 1 })));
    return ids;
  }

  /** One engine's passes: claim in batches until a pass finds nothing. */
  async function drain(store: PostgresHistoryStore, instance: string, limit: number): Promise<string[]> {
    const got: string[] = [];
    for (;;) {
      let cursor: string | undefined;
      let pass: DueTask[] = [];
      do {
        const batch = await store.claimDueWork({ now: Date.now(), instance, limit, claimMs: 600_000, ...(cursor === undefined ? {} : { cursor }) });
        pass = pass.concat(batch.tasks);
        cursor = batch.next;
      } while (cursor !== undefined);
      const fresh = pass.map((d) => d.taskId).filter((id) => !got.includes(id));
      if (fresh.length === 0) return got;
      got.push(...fresh);
    }
  }

  it('two stores racing (separate pools) claim disjoint tasks, and every due task once', async () => {
    const [a, b] = [await open(), await open()];
    const ids = await pending(a, 300);
    const [ga, gb] = await Promise.all([drain(a, 'a', 16), drain(b, 'b', 16)]);
    expect(ga.filter((id) => gb.includes(id))).toEqual([]);
    expect([...ga, ...gb].sort()).toEqual(ids);
    const rows = await withClient((c) => c.query(`SELECT instance, count(*)::int AS n FROM "${schema}".due_claims GROUP BY instance ORDER BY instance`));
    expect(rows.rows.reduce((n: number, r: { n: number }) => n + r.n, 0)).toBe(300);
  });

  it('a claim expires claimMs after the database clock; the other instance then takes it', async () => {
    const [a, b] = [await open(), await open()];
    await pending(a, 1);
    const t0 = await a.databaseNow();
    expect((await a.claimDueWork({ now: 0, instance: 'a', limit: 10, claimMs: 200 })).tasks).toHaveLength(1);
    expect((await b.claimDueWork({ now: 0, instance: 'b', limit: 10, claimMs: 60_000 })).tasks).toHaveLength(0);
    await until(async () => (await b.claimDueWork({ now: 0, instance: 'b', limit: 10, claimMs: 60_000 })).tasks.length === 1, 'a’s claim to expire');
    expect(await b.databaseNow()).toBeGreaterThanOrEqual(t0 + 200);
    expect((await a.claimDueWork({ now: 0, instance: 'a', limit: 10 })).tasks).toHaveLength(0);
  });

  it('deleting a task (retention) removes its claim', async () => {
    const a = await open();
    await pending(a, 1);
    await a.claimDueWork({ now: 0, instance: 'a', limit: 10 });
    await a.deleteTask('p000');
    const rows = await withClient((c) => c.query(`SELECT count(*)::int AS n FROM "${schema}".due_claims`));
    expect(rows.rows[0].n).toBe(0);
  });
});
