/**
 * Flow limits and schedules on a shared PostgreSQL store (docs/time.md): the concurrency of a
 * limit holds across two engines, a crashed engine's slot frees itself when its lease expires
 * (database clock), and two engines racing one schedule slot start its run once.
 */
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { silentLogger } from '../../src/logger.js';
import { createPostgresStore, type PostgresHistoryStore } from '../../src/store/postgres-store.js';
import { runTaskId } from '../../src/runtime/schedules.js';
import { PG_URL, describePg, dropSchema, uniqueSchema } from '../helpers/postgres.js';
import { until } from '../helpers/processes.js';

let running = 0;
let peak = 0;
const gates: (() => void)[] = [];
const caller = defineWorkflow({
  name: 'pg-limited',
  turn: async (ctx, i: number) =>
    ctx.step(
      'model',
      async () => {
        running++;
        peak = Math.max(peak, running);
        await new Promise<void>((r) => gates.push(r));
        running--;
        return i;
      },
      { limit: 'model' },
    ),
});
const job = defineWorkflow({ name: 'pg-job', turn: async (ctx, _: null) => ctx.taskId });

describePg('flow limits and schedules on PostgreSQL', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
  });

  async function open(schema: string, i: number, leaseMs = 60_000): Promise<{ engine: Engine; store: PostgresHistoryStore }> {
    const store = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
    cleanups.push(() => store.close());
    const engine = await Engine.open({ store, workflows: [caller, job], logger: silentLogger, instance: `instance-${i}`, owner: `engine-${i}`, scanIntervalMs: 0, leaseMs, flowLimits: { model: { concurrency: 2 } } });
    cleanups.push(() => engine.shutdown({ graceMs: 0 }));
    return { engine, store };
  }

  it('two engines share one concurrency: never more than 2 steps under the limit at once', async () => {
    const schema = uniqueSchema('turnlog_limits');
    cleanups.push(() => dropSchema(schema));
    const [a, b] = [await open(schema, 0), await open(schema, 1)];
    running = 0;
    peak = 0;
    const handles = await Promise.all(Array.from({ length: 8 }, (_, i) => (i % 2 ? b : a).engine.start(caller, i, { taskId: `l-${i}` })));
    for (let opened = 0; opened < 8; opened++) {
      await until(() => gates.length > 0, 'a step holding a slot');
      expect(running).toBeLessThanOrEqual(2);
      gates.shift()!();
    }
    expect((await Promise.all(handles.map((h) => h.result()))).sort()).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(peak).toBeLessThanOrEqual(2);
    expect(peak).toBeGreaterThanOrEqual(1);
  });

  it("a slot held by an engine that died is freed when its lease expires on the database clock", async () => {
    const schema = uniqueSchema('turnlog_limits');
    cleanups.push(() => dropSchema(schema));
    const { store } = await open(schema, 0);
    const req = { limit: 'model', instance: 'dead', concurrency: 1, intervalMs: 0, toleranceMs: 0, leaseMs: 300 };
    expect(await store.acquireSlot({ ...req, slotId: 'dead/1' })).toEqual({ granted: true });
    // The dead engine never renews nor releases: a live one is refused until the lease runs out.
    expect(await store.acquireSlot({ ...req, instance: 'live', slotId: 'live/1', leaseMs: 60_000 })).toEqual({ granted: false });
    await until(async () => (await store.acquireSlot({ ...req, instance: 'live', slotId: 'live/1', leaseMs: 60_000 })).granted, 'the dead slot to expire');
    // A renewed slot does not expire; a released one frees at once.
    await store.renewSlots('live', ['live/1'], 60_000);
    expect((await store.acquireSlot({ ...req, instance: 'x', slotId: 'x/1' })).granted).toBe(false);
    await store.releaseSlot('model', 'live/1');
    expect((await store.acquireSlot({ ...req, instance: 'x', slotId: 'x/1' })).granted).toBe(true);
  });

  it('the rate is one GCRA row per limit: a second start within the interval is told when to retry', async () => {
    const schema = uniqueSchema('turnlog_limits');
    cleanups.push(() => dropSchema(schema));
    const { store } = await open(schema, 0);
    const req = { limit: 'rate', instance: 'i', concurrency: Infinity, intervalMs: 60_000, toleranceMs: 0, leaseMs: 60_000 };
    expect(await store.acquireSlot({ ...req, slotId: 'a' })).toEqual({ granted: true });
    const second = await store.acquireSlot({ ...req, slotId: 'b' });
    expect(second.granted).toBe(false);
    expect((second as { retryInMs: number }).retryInMs).toBeGreaterThan(50_000);
  });

  it('two engines racing one schedule slot start its run once', async () => {
    const schema = uniqueSchema('turnlog_sched');
    cleanups.push(() => dropSchema(schema));
    const [a, b] = [await open(schema, 0), await open(schema, 1)];
    const id = 'race';
    // Both engines set the same schedule at once (a deploy starting two engines).
    await Promise.all([a.engine.schedule(id, { cron: '* * * * *', workflow: job, input: null }), b.engine.schedule(id, { cron: '* * * * *', workflow: job, input: null })]);
    const [info] = await a.engine.schedules();
    expect(info?.nextRunAt).toBeDefined();
    const slot = info!.nextRunAt!;
    // Both engines start the slot's run as a schedule turn would, at once: one task, one turn.
    const runId = runTaskId(id, slot);
    await Promise.all([a.engine.start(job, null, { taskId: runId, inputId: 'scheduled' }), b.engine.start(job, null, { taskId: runId, inputId: 'scheduled' })]);
    expect(await a.engine.task(runId).result()).toBe(runId);
    const h = await b.engine.history(runId);
    expect(h.filter((e) => e.type === 'InputQueued')).toHaveLength(1);
    expect(h.filter((e) => e.type === 'TurnStarted')).toHaveLength(1);
  });
});
