/**
 * The idle-lease path decides by the store's clock, never an engine's (DESIGN invariant 12): an
 * engine whose clock is ahead of the database must still queue a send to an idle task another
 * engine leases (not refuse it with LeaseHeldError); the holder hears it and runs the turn. One
 * whose clock is behind runs a stopped holder's queued input once the lease expires on the
 * database clock, not an hour of skew later.
 */
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { systemClock, type Clock } from '../../src/runtime/clock.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { silentLogger } from '../../src/logger.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema } from '../helpers/postgres.js';

const echo = defineWorkflow({
  name: 'pg-echo-clock',
  kind: 'multi-turn',
  turn: async (ctx, text: string) => ctx.step('echo', () => `${ctx.turn}:${text}`),
});

/** The system clock shifted by `offsetMs` (its timers are real durations). */
const skewed = (offsetMs: number): Clock => ({ now: () => Date.now() + offsetMs, setTimer: (fn, ms, o) => systemClock.setTimer(fn, ms, o) });

describePg('the idle-lease path with an engine clock off the database clock', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
  });

  const opener = (schema: string, leaseMs: number) => async (i: number, clock?: Clock) => {
    const store = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
    cleanups.push(() => store.close());
    const engine = await Engine.open({ store, workflows: [echo], logger: silentLogger, owner: `engine-${i}`, instance: `instance-${i}`, scanIntervalMs: 0, leaseMs, ...(clock ? { clock } : {}) });
    cleanups.push(() => engine.shutdown({ graceMs: 200 }));
    return { engine, store };
  };

  it('a sender whose clock is ahead queues the input; the holder runs the turn', async () => {
    const schema = uniqueSchema('turnlog_idle_ahead');
    cleanups.push(() => dropSchema(schema));
    const open = opener(schema, 60_000);
    const a = await open(0);
    const b = await open(1, skewed(10 * 60_000));
    const h = await a.engine.start(echo, 'one', { taskId: 'idle-ahead' });
    expect(await h.nextTurn()).toMatchObject({ status: 'completed', output: '1:one' });
    const inputId = await b.engine.task('idle-ahead').send('two');
    expect(await b.engine.task('idle-ahead').turnResult(inputId)).toMatchObject({ status: 'completed', output: '2:two' });
    const events = await b.engine.history('idle-ahead');
    expect(events.filter((e) => e.type === 'TurnStarted')).toHaveLength(2);
  }, 30_000);

  it('a sender whose clock is behind runs the input once the stopped holder\'s lease expires on the database clock', async () => {
    const schema = uniqueSchema('turnlog_idle_behind');
    cleanups.push(() => dropSchema(schema));
    const open = opener(schema, 1_500);
    const a = await open(0);
    const h = await a.engine.start(echo, 'one', { taskId: 'idle-behind' });
    expect(await h.nextTurn()).toMatchObject({ status: 'completed', output: '1:one' });
    await a.engine.shutdown({ graceMs: 0 }); // its lease outlives it (1.5 s on the database clock)
    const b = await open(1, skewed(-60 * 60_000));
    expect((await b.store.getLease('idle-behind'))?.instance).toBe('instance-0');
    const inputId = await b.engine.task('idle-behind').send('two');
    // Judged on its own clock, B would wait out the lease plus the hour of skew: a liveness
    // bound far below the skew, not a timing assertion.
    const late = new Promise<'late'>((r) => setTimeout(() => r('late'), 20_000).unref());
    expect(await Promise.race([b.engine.task('idle-behind').turnResult(inputId), late])).toMatchObject({ status: 'completed', output: '2:two' });
    const events = await b.engine.history('idle-behind');
    expect(events.filter((e) => e.type === 'TurnStarted')).toHaveLength(2);
  }, 30_000);
});
