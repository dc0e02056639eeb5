/**
 * A network partition between one engine and PostgreSQL (docs/scale-out.md#failures): a TCP
 * proxy carries engine A's connections and is cut mid-turn. A cannot renew, so its attempt
 * stops once its lease may have expired (`leaseMs` after the last renewal it sent), before
 * engine B, on a direct connection, claims the turn after the lease expired on the database
 * clock and finishes it. When the partition heals nothing of A reaches the history: one
 * terminal event per turn, each step recorded once.
 */
import { afterEach, expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import { isTurnTerminal } from '../../src/history/events.js';
import { Engine } from '../../src/runtime/engine.js';
import type { Logger } from '../../src/logger.js';
import { silentLogger } from '../../src/logger.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { PG_URL, describePg, dropSchema, uniqueSchema } from '../helpers/postgres.js';
import { until } from '../helpers/processes.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';

const of = <T extends HistoryEvent['type']>(h: HistoryEvent[], type: T) => h.filter((e): e is Extract<HistoryEvent, { type: T }> => e.type === type);

describePg('a network partition between an engine and PostgreSQL', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
  });

  it('the cut engine’s attempts stop after leaseMs, another engine takes the turns over after expiry, nothing is doubled', async () => {
    const schema = uniqueSchema('turnlog_partition');
    cleanups.push(() => dropSchema(schema));
    const target = new URL(PG_URL);
    const proxy = await TcpProxy.start({ host: target.hostname, port: Number(target.port || 5432) });
    cleanups.push(() => proxy.close());

    // What happened, in order, across both engines (one process, so the order is real).
    const timeline: string[] = [];
    const STEPS = 40;
    const work = defineWorkflow({
      name: 'pg-partition',
      turn: async (ctx, n: number) => {
        const who = ctx.attempt === 1 ? 'A' : 'B';
        timeline.push(`${ctx.taskId} ${who} started`);
        ctx.signal.addEventListener('abort', () => timeline.push(`${ctx.taskId} ${who} stopped: ${String((ctx.signal.reason as Error)?.message ?? ctx.signal.reason)}`), { once: true });
        let sum = n;
        for (let i = 0; i < STEPS; i++) {
          sum = await ctx.step(`s${i}`, () => sum + i);
          // Paced on real time so the cut lands mid-turn; an abort ends the wait at once.
          await new Promise<void>((resolve) => {
            const done = () => {
              clearTimeout(timer);
              ctx.signal.removeEventListener('abort', done);
              resolve();
            };
            const timer = setTimeout(done, 25);
            ctx.signal.addEventListener('abort', done, { once: true });
          });
          if (ctx.signal.aborted) throw new Error('stopped');
        }
        return { sum, attempt: ctx.attempt };
      },
    });

    const warnings: string[] = [];
    const logA: Logger = { ...silentLogger, warn: (m) => warnings.push(m) };
    const storeA = createPostgresStore({ connectionString: proxy.url(PG_URL), schema, max: 4 });
    cleanups.push(() => storeA.close());
    // Long enough that a renewal slowed by a loaded machine does not lapse before the cut.
    const leaseMs = 3_000;
    const a = await Engine.open({ store: storeA, workflows: [work], logger: logA, owner: 'a', instance: 'a-1', leaseMs, scanIntervalMs: 0 });
    cleanups.push(() => a.shutdown({ graceMs: 0 }));
    const ids = ['p1', 'p2', 'p3'];
    for (const id of ids) await a.start(work, 1, { taskId: id });
    await until(async () => {
      for (const id of ids) if (of(await storeA.readEvents(id), 'StepCompleted').length < 3) return false;
      return true;
    }, 'A to record three steps of every turn');

    proxy.cut();
    timeline.push('cut');

    const storeB = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
    cleanups.push(() => storeB.close());
    const b = await Engine.open({ store: storeB, workflows: [work], logger: silentLogger, owner: 'b', instance: 'b-1', leaseMs: 60_000, scanIntervalMs: 200 });
    cleanups.push(() => b.shutdown({ graceMs: 0 }));
    const results = await Promise.all(ids.map((id) => b.task(id).result()));
    expect(results.every((r) => (r as { attempt: number }).attempt === 2)).toBe(true);

    for (const id of ids) {
      const events = timeline.filter((l) => l.startsWith(`${id} `) || l === 'cut');
      const stopped = events.findIndex((l) => l.startsWith(`${id} A stopped`));
      // A's attempt was told to stop because its lease was not renewed, after the cut and before B started.
      expect(stopped, events.join('\n')).toBeGreaterThan(events.indexOf('cut'));
      expect(events[stopped]).toContain('not renewed within leaseMs');
      expect(stopped).toBeLessThan(events.indexOf(`${id} B started`));
    }
    expect(warnings).toContain('lease lapsed: the attempt is stopped; the turn is left for recovery');

    // The partition heals: A's hung writes fail or are refused; none reaches the history.
    proxy.heal();
    await a.shutdown({ graceMs: 0 });
    for (const id of ids) {
      const h = await storeB.readEvents(id);
      expect(h.filter(isTurnTerminal).map((e) => e.type)).toEqual(['TurnCompleted']);
      expect(of(h, 'TurnStarted').map((e) => [e.attempt, e.instance])).toEqual([[1, 'a-1'], [2, 'b-1']]);
      const steps = of(h, 'StepCompleted').map((e) => e.seq);
      expect(steps).toEqual(Array.from({ length: STEPS }, (_, i) => i + 1));
      const takeover = of(h, 'LeaseClaimed').at(-1)!;
      expect(takeover).toMatchObject({ owner: 'b', previousGeneration: 1 });
      expect(h.filter((e) => e.eventId > takeover.eventId).every((e) => e.generation === takeover.generation)).toBe(true);
    }
  });
});
