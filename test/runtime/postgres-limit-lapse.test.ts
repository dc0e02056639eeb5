/**
 * A flow-limit slot on PostgreSQL whose renewals fail (docs/time.md#flow-limits): the slot's lease
 * expires on the database clock while its step still runs, and another engine may take it. The
 * step's attempt stops first, as on a lapsed task lease: its ctx.signal aborts and nothing it does
 * is recorded, so the cap is not exceeded by a step the engine still counts as running; the turn
 * is re-run by recovery.
 */
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { silentLogger } from '../../src/logger.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema } from '../helpers/postgres.js';
import { until } from '../helpers/processes.js';

/** What the step bodies did, in order: `<engine> start`, `<engine> aborted`, `<engine> done`. */
const log: string[] = [];
const limited = defineWorkflow({
  name: 'pg-limit-lapse',
  turn: async (ctx, who: string) =>
    ctx.step(
      'model',
      async () => {
        log.push(`${who} start`);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, who === 'a' ? 20_000 : 10);
          ctx.signal.addEventListener('abort', () => (clearTimeout(timer), log.push(`${who} aborted`), resolve()), { once: true });
        });
        log.push(`${who} done`);
        return who;
      },
      { limit: 'model' },
    ),
});

describePg('a flow-limit slot whose renewals fail', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
  });

  async function open(schema: string, i: number, renewalsFail: boolean) {
    const store = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
    cleanups.push(() => store.close());
    if (renewalsFail) store.renewSlots = async () => Promise.reject(new Error('renewal lost (test)'));
    const engine = await Engine.open({ store, workflows: [limited], logger: silentLogger, instance: `instance-${i}`, owner: `engine-${i}`, scanIntervalMs: 0, leaseMs: 1_200, flowLimits: { model: { concurrency: 1 } } });
    cleanups.push(() => engine.shutdown({ graceMs: 0 }));
    return engine;
  }

  it('stops the step\'s attempt before another engine can hold the slot: never two at once', async () => {
    const schema = uniqueSchema('turnlog_limit_lapse');
    cleanups.push(() => dropSchema(schema));
    log.length = 0;
    const a = await open(schema, 0, true);
    const b = await open(schema, 1, false);
    await a.start(limited, 'a', { taskId: 'lapse-a' });
    await until(() => log.includes('a start'), 'engine a to hold the slot');
    const hb = await b.start(limited, 'b', { taskId: 'lapse-b' });
    expect(await hb.result()).toBe('b');
    // Engine a's step was stopped (its slot lapsed unrenewed) before b's step took the slot.
    expect(log.indexOf('a aborted')).toBeGreaterThan(-1);
    expect(log.indexOf('a aborted')).toBeLessThan(log.indexOf('b start'));
    // Nothing of a's stopped attempt is recorded: the turn is still open for recovery.
    const events = await b.history('lapse-a');
    expect(events.filter((e) => e.type === 'StepCompleted')).toHaveLength(0);
  }, 30_000);
});
