/**
 * Lease renewals that fail on a shared store (the store answers with an error, quickly) must not
 * cancel the turn: a cancelled turn never runs again (DESIGN 7), and nobody asked for it. The
 * attempt stops by the lease-lapse rule and the turn is re-run once the lease expired.
 */
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { silentLogger } from '../../src/logger.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema, withClient } from '../helpers/postgres.js';

describePg('lease renewals failing on PostgreSQL', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
  });

  it('three failed renewals do not cancel the turn: it is re-run, never TurnCancelled', async () => {
    const schema = uniqueSchema('turnlog_renew_fail');
    cleanups.push(() => dropSchema(schema));
    let aborted!: () => void;
    const abortSeen = new Promise<void>((r) => (aborted = r));
    let resume!: () => void;
    const resumed = new Promise<void>((r) => (resume = r));
    const work = defineWorkflow({
      name: 'pg-renew-fail',
      turn: async (ctx, n: number) => {
        if (ctx.attempt > 1) return { n, attempt: ctx.attempt };
        await new Promise<void>((r) => ctx.signal.addEventListener('abort', () => r(), { once: true }));
        aborted();
        await resumed;
        throw ctx.signal.reason;
      },
    });
    const store = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
    cleanups.push(() => store.close());
    const engine = await Engine.open({ store, workflows: [work], logger: silentLogger, owner: 'a', instance: 'a-1', leaseMs: 3_000, scanIntervalMs: 200 });
    cleanups.push(() => engine.shutdown({ graceMs: 0 }));
    // Every lease update fails while the flag row exists (a renewal; the turn start inserts).
    await withClient(async (c) => {
      await c.query(`CREATE TABLE ${schema}.fail_renew (x int)`);
      await c.query(`CREATE FUNCTION ${schema}.no_renew() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF EXISTS (SELECT 1 FROM ${schema}.fail_renew) THEN RAISE EXCEPTION 'renewal refused by the test'; END IF; RETURN NEW; END $$`);
      await c.query(`CREATE TRIGGER no_renew BEFORE UPDATE ON ${schema}.leases FOR EACH ROW EXECUTE FUNCTION ${schema}.no_renew()`);
    });
    const h = await engine.start(work, 1, { taskId: 'renew-1' });
    await withClient((c) => c.query(`INSERT INTO ${schema}.fail_renew VALUES (1)`));
    await abortSeen;
    await withClient((c) => c.query(`DELETE FROM ${schema}.fail_renew`));
    resume();
    await expect(engine.task('renew-1').result()).resolves.toMatchObject({ n: 1, attempt: 2 });
    const events = await store.readEvents('renew-1');
    expect(events.filter((e) => e.type === 'TurnCancelled')).toHaveLength(0);
    expect(events.filter((e) => e.type === 'TurnCompleted')).toHaveLength(1);
    void h;
  }, 30_000);
});
