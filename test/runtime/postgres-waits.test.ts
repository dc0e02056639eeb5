/**
 * Named waits on a shared PostgreSQL store (docs/time.md#waiting-for-an-event-approvals): a
 * signal sent through engine B (or the CLI's operator engine) is heard by engine A through the
 * store's notifications and ends the wait of the turn A runs; nothing polls (scans are off).
 */
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { silentLogger } from '../../src/logger.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema } from '../helpers/postgres.js';
import { until } from '../helpers/processes.js';

const approval = defineWorkflow({
  name: 'pg-approval',
  turnTimeoutMs: 120_000,
  turn: async (ctx, amount: number) => {
    const r = await ctx.waitFor<{ by: string }>('approval', { timeoutMs: 60_000 });
    return r.ok ? `approved ${amount} by ${r.value.by}` : 'expired';
  },
});

describePg('waits on a shared PostgreSQL store', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
  });

  async function open(schema: string, i: number, workflows = [approval]): Promise<Engine> {
    const store = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
    cleanups.push(() => store.close());
    const engine = await Engine.open({ store, workflows, logger: silentLogger, owner: `engine-${i}`, instance: `instance-${i}`, scanIntervalMs: 0, leaseMs: 60_000 });
    cleanups.push(() => engine.shutdown({ graceMs: 200 }));
    return engine;
  }

  it('a signal sent through engine B ends the wait of the turn engine A runs; B waits for the result', async () => {
    const schema = uniqueSchema('turnlog_waits');
    cleanups.push(() => dropSchema(schema));
    const a = await open(schema, 0);
    const b = await open(schema, 1, []); // B runs no workflow: it only signals and reads
    const h = await a.start(approval, 40, { taskId: 'w1' });
    await until(async () => (await a.history('w1')).some((e) => e.type === 'WaitStarted'), 'the turn to wait on A');
    await b.signal('w1', 'approval', { by: 'ana' });
    expect(await b.task('w1').turnResult(h.inputId!)).toMatchObject({ status: 'completed', output: 'approved 40 by ana' });
    expect(await h.result()).toBe('approved 40 by ana');
    const types = (await b.history('w1')).map((e) => e.type);
    expect(types.indexOf('SignalReceived')).toBeLessThan(types.indexOf('WaitEnded'));
    expect(types.filter((t) => t === 'WaitEnded')).toHaveLength(1);
  });

  it('a signal from an operator engine (what `turnlog signal` opens on PostgreSQL) reaches the running wait', async () => {
    const schema = uniqueSchema('turnlog_waits');
    cleanups.push(() => dropSchema(schema));
    const a = await open(schema, 0);
    const h = await a.start(approval, 7, { taskId: 'w2' });
    await until(async () => (await a.history('w2')).some((e) => e.type === 'WaitStarted'), 'the turn to wait on A');
    const store = createPostgresStore({ connectionString: PG_URL, schema, max: 2 });
    cleanups.push(() => store.close());
    const op = await Engine.openForOperator({ store, logger: silentLogger, owner: 'cli|turnlog-cli' });
    try {
      await op.signal('w2', 'approval', { by: 'bo' });
    } finally {
      await op.shutdown();
    }
    expect(await h.result()).toBe('approved 7 by bo');
  });
});
