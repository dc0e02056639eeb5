/**
 * A task whose turn ended on engine A keeps A's lease until it expires or a scan frees it. A new
 * input sent through engine B in that window must be queued and run (by A, which hears it, or by B
 * once the lease is free), not refused with A's LeaseHeldError.
 */
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { silentLogger } from '../../src/logger.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema } from '../helpers/postgres.js';

const echo = defineWorkflow({
  name: 'pg-echo',
  kind: 'multi-turn',
  turn: async (ctx, text: string) => ctx.step('echo', () => `${ctx.turn}:${text}`),
});

describePg('a send through another engine while the idle task is still leased', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
  });

  it('is queued and its turn runs; the caller sees no LeaseHeldError', async () => {
    const schema = uniqueSchema('turnlog_idle_lease');
    cleanups.push(() => dropSchema(schema));
    const open = async (i: number) => {
      const store = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
      cleanups.push(() => store.close());
      const engine = await Engine.open({ store, workflows: [echo], logger: silentLogger, owner: `engine-${i}`, instance: `instance-${i}`, scanIntervalMs: 0, leaseMs: 60_000 });
      cleanups.push(() => engine.shutdown({ graceMs: 200 }));
      return { engine, store };
    };
    const a = await open(0);
    const b = await open(1);
    const h = await a.engine.start(echo, 'one', { taskId: 'idle-1' });
    expect(await h.nextTurn()).toMatchObject({ status: 'completed', output: '1:one' });
    // A's lease outlives its turn (60 s here): B's view of the task names it.
    const lease = await b.store.getLease('idle-1');
    expect(lease?.instance).toBe('instance-0');
    expect(lease!.expiresAt).toBeGreaterThan(Date.now());
    for (let i = 2; i <= 4; i++) {
      const inputId = await b.engine.task('idle-1').send(`n${i}`);
      const r = await b.engine.task('idle-1').turnResult(inputId);
      expect(r).toMatchObject({ status: 'completed', output: `${i}:n${i}` });
    }
    const events = await b.engine.history('idle-1');
    expect(events.filter((e) => e.type === 'TurnStarted')).toHaveLength(4);
    expect(events.filter((e) => e.type === 'TurnCompleted')).toHaveLength(4);
  });
});
