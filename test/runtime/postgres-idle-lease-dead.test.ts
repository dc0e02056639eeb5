/**
 * The idle-lease path when the holder is gone: engine A ran a turn and stopped (its lease outlives
 * it); a send through engine B is queued, and B runs the turn once A's lease expires, with the
 * scanner off and with the default scan interval.
 */
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { silentLogger } from '../../src/logger.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema } from '../helpers/postgres.js';

const echo = defineWorkflow({
  name: 'pg-echo-dead',
  kind: 'multi-turn',
  turn: async (ctx, text: string) => ctx.step('echo', () => `${ctx.turn}:${text}`),
});

describePg('a send through another engine while a stopped engine still leases the idle task', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
  });

  /** Engine `i` on `schema`, with a short lease; closed after the test. */
  async function openEngine(schema: string, i: number, scanIntervalMs: number | undefined) {
    const store = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
    cleanups.push(() => store.close());
    const engine = await Engine.open({ store, workflows: [echo], logger: silentLogger, owner: `engine-${i}`, instance: `instance-${i}`, ...(scanIntervalMs === undefined ? {} : { scanIntervalMs }), leaseMs: 1_500 });
    cleanups.push(() => engine.shutdown({ graceMs: 200 }));
    return { engine, store };
  }

  for (const scanIntervalMs of [0, undefined]) {
    it(`runs once the lease expires (scanIntervalMs ${scanIntervalMs ?? 'default'})`, async () => {
      const schema = uniqueSchema('turnlog_idle_dead');
      cleanups.push(() => dropSchema(schema));
      const open = (i: number) => openEngine(schema, i, scanIntervalMs);
      const a = await open(0);
      const h = await a.engine.start(echo, 'one', { taskId: 'idle-dead' });
      expect(await h.nextTurn()).toMatchObject({ status: 'completed', output: '1:one' });
      await a.engine.shutdown({ graceMs: 0 });
      const b = await open(1);
      const lease = await b.store.getLease('idle-dead');
      expect(lease?.instance).toBe('instance-0');
      const inputId = await b.engine.task('idle-dead').send('two');
      const r = await b.engine.task('idle-dead').turnResult(inputId);
      expect(r).toMatchObject({ status: 'completed', output: '2:two' });
      const events = await b.engine.history('idle-dead');
      expect(events.filter((e) => e.type === 'TurnStarted')).toHaveLength(2);
      expect(events.filter((e) => e.type === 'TurnCompleted')).toHaveLength(2);
    }, 30_000);

    it(`a third engine runs it when the sender stopped too (scanIntervalMs ${scanIntervalMs ?? 'default'})`, async () => {
      const schema = uniqueSchema('turnlog_idle_dead3');
      cleanups.push(() => dropSchema(schema));
      const open = (i: number) => openEngine(schema, i, scanIntervalMs);
      const a = await open(0);
      const h = await a.engine.start(echo, 'one', { taskId: 'idle-dead3' });
      expect(await h.nextTurn()).toMatchObject({ status: 'completed', output: '1:one' });
      await a.engine.shutdown({ graceMs: 0 });
      const b = await open(1);
      const inputId = await b.engine.task('idle-dead3').send('two');
      await b.engine.shutdown({ graceMs: 0 });
      const c = await open(2);
      const r = await c.engine.task('idle-dead3').turnResult(inputId);
      expect(r).toMatchObject({ status: 'completed', output: '2:two' });
      const events = await c.engine.history('idle-dead3');
      expect(events.filter((e) => e.type === 'TurnStarted')).toHaveLength(2);
      expect(events.filter((e) => e.type === 'TurnCompleted')).toHaveLength(2);
    }, 30_000);
  }
});
