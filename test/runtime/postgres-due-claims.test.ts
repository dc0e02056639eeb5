/**
 * Two engines opening at once on one schema with due work waiting (pending tasks): their
 * recovery scans claim disjoint tasks (docs/scale-out.md#due-claims), each turn starts once, and
 * every claim is released when the pass ends.
 */
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { silentLogger } from '../../src/logger.js';
import type { ClaimRequest, DueBatch } from '../../src/store/history-store.js';
import { createPostgresStore, type PostgresHistoryStore } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema, withClient } from '../helpers/postgres.js';
import { until } from '../helpers/processes.js';
import { created, queued } from '../store/events.js';

const echo = defineWorkflow({ name: 'wf', turn: async (_ctx, input: { inputId: string }) => input.inputId });

/** The store, with every task its claimDueWork handed out recorded in `into`. */
function recording(store: PostgresHistoryStore, into: string[]): PostgresHistoryStore {
  return new Proxy(store, {
    get(target, key) {
      if (key === 'claimDueWork') {
        return async (r: ClaimRequest): Promise<DueBatch> => {
          const batch = await target.claimDueWork(r);
          into.push(...batch.tasks.map((d) => d.taskId));
          return batch;
        };
      }
      const v = Reflect.get(target, key, target) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

describePg('engines racing for due work on PostgreSQL', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
  });

  it('two engines opening at once claim disjoint pending tasks; each turn starts once; claims are released', async () => {
    const schema = uniqueSchema('turnlog_due');
    cleanups.push(() => dropSchema(schema));
    const seed = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
    await seed.open();
    cleanups.push(() => seed.close());
    const ids = Array.from({ length: 60 }, (_, i) => `d${String(i).padStart(2, '0')}`);
    await Promise.all(ids.map((id) => seed.append(id, [created(1, { time: Date.now() }), queued(2, `${id}-in`, { time: Date.now() })], { expectedLastEventId: 0, generation: 1 })));

    const handed: string[][] = [[], []];
    const engines = await Promise.all(
      [0, 1].map(async (i) => {
        const store = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
        cleanups.push(() => store.close());
        const e = await Engine.open({ store: recording(store, handed[i]!), workflows: [echo], logger: silentLogger, owner: `e${i}`, instance: `e${i}`, scanIntervalMs: 0 });
        cleanups.push(() => e.shutdown({ graceMs: 0 }));
        return e;
      }),
    );
    await Promise.all(engines.map((e) => e.recovered()));
    await until(async () => (await seed.listTasks({ status: 'completed', limit: 100 })).tasks.length === ids.length, 'every task to complete');
    expect(handed[0]!.filter((id) => handed[1]!.includes(id))).toEqual([]);
    expect([...handed[0]!, ...handed[1]!].sort()).toEqual(ids);
    for (const id of ids) {
      const h = await seed.readEvents(id);
      expect(h.filter((e) => e.type === 'TurnStarted')).toHaveLength(1);
      expect(h.filter((e) => e.type === 'TurnCompleted')).toHaveLength(1);
    }
    await until(async () => (await withClient((c) => c.query(`SELECT count(*)::int AS n FROM "${schema}".due_claims`))).rows[0].n === 0, 'the claims to be released');
  });
});
