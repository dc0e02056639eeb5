/**
 * Two engines starting one task id at once on a shared PostgreSQL store (two engines racing a
 * schedule slot, or two callers with the same `taskId`), where the winner has already started
 * its turn under its lease when the loser's create (which carries the loser's own lease at the
 * same generation) lands: the loser's append is a lost race, it reloads the task and decides
 * again, finds its input id already queued, and its caller gets that input's handle and result.
 * A second case forces the torn read that made the loser's create a stale generation (review of
 * stop 24). Each race is forced by a store wrapper, once.
 */
import { afterEach, expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import { silentLogger } from '../../src/logger.js';
import { Engine } from '../../src/runtime/engine.js';
import type { HistoryStore } from '../../src/store/history-store.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { PG_URL, describePg, dropSchema, uniqueSchema } from '../helpers/postgres.js';

let release: (() => void) | undefined;
const job = defineWorkflow({
  name: 'pg-start-race',
  turn: async (ctx, n: number) => {
    await ctx.step('work', () => new Promise<void>((r) => (release = r)));
    return n * 2;
  },
});

/** `inner` with one append intercepted: before the first append that creates a task, `before` runs. */
function racing(inner: HistoryStore, before: () => Promise<void>): { store: HistoryStore; fired: () => number } {
  return intercept(inner, 'append', (args) => (args[1] as HistoryEvent[]).some((e) => e.type === 'TaskCreated'), before, 'before');
}

/** `inner` with the first call of `method` whose arguments `when` picks intercepted: `race` runs before (or after) it. */
function intercept(inner: HistoryStore, method: keyof HistoryStore, when: (args: unknown[]) => boolean, race: () => Promise<void>, at: 'before' | 'after'): { store: HistoryStore; fired: () => number } {
  let fired = 0;
  const store = new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop === method) {
        return async (...args: unknown[]) => {
          const fn = (target[method] as (...a: unknown[]) => Promise<unknown>).bind(target);
          if (fired > 0 || !when(args)) return fn(...args);
          fired++;
          if (at === 'before') await race();
          const out = await fn(...args);
          if (at === 'after') await race();
          return out;
        };
      }
      const v = Reflect.get(target, prop, receiver) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  }) as HistoryStore;
  return { store, fired: () => fired };
}

describePg('two engines starting one task id on PostgreSQL', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
  });

  type Rig = (storeB: HistoryStore, winnerStarts: () => Promise<void>) => { store: HistoryStore; fired: () => number };

  /**
   * Engine A starts `taskId` at the moment `rig` picks in engine B's store calls; then B starts
   * the same task with the same input id. B's caller must get that input, run once to its end.
   */
  async function startRace(taskId: string, rig: Rig): Promise<void> {
    const schema = uniqueSchema('turnlog_start_race');
    cleanups.push(() => dropSchema(schema));
    const storeA = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
    const storeB = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
    cleanups.push(() => storeA.close(), () => storeB.close());
    const a = await Engine.open({ store: storeA, workflows: [job], logger: silentLogger, instance: 'a', owner: 'engine-a', scanIntervalMs: 0 });
    cleanups.push(() => a.shutdown({ graceMs: 0 }));
    // Engine A creates the task and starts its turn (lease at generation 1).
    const race = rig(storeB, async () => {
      await a.start(job, 21, { taskId, inputId: 'scheduled' });
      const deadline = Date.now() + 10_000;
      while ((await storeA.getLease(taskId))?.generation !== 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    });
    const warnings: string[] = [];
    const logB = { ...silentLogger, warn: (message: string) => void warnings.push(message) };
    const b = await Engine.open({ store: race.store, workflows: [job], logger: logB, instance: 'b', owner: 'engine-b', scanIntervalMs: 0 });
    cleanups.push(() => b.shutdown({ graceMs: 0 }));

    release = undefined;
    const h = await b.start(job, 21, { taskId, inputId: 'scheduled' });
    expect(race.fired()).toBe(1);
    expect(h.inputId).toBe('scheduled');
    const deadline = Date.now() + 10_000;
    while (release === undefined && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    release!();
    expect(await b.turnResult(taskId, 'scheduled')).toMatchObject({ status: 'completed', output: 42 });
    const events = await storeA.readEvents(taskId);
    expect(events.filter((e) => e.type === 'TaskCreated')).toHaveLength(1);
    expect(events.filter((e) => e.type === 'InputQueued')).toHaveLength(1);
    expect(events.filter((e) => e.type === 'TurnCompleted')).toHaveLength(1);
    // A lost race is not a takeover: B never warns that the task was fenced.
    expect(warnings.filter((w) => w.includes('fenced'))).toEqual([]);
  }

  it('the loser of a start race whose winner already runs the turn gets the same input', async () => {
    // A's create and lease land just before B's create (which carries B's own lease): a lost race.
    await startRace('slot', (storeB, winnerStarts) => racing(storeB, winnerStarts));
  });

  it('a start whose load reads no events but the winner\'s lease (a torn read) is a lost race, not TURNLOG_STALE_GENERATION', async () => {
    // Review finding (postgres-limits "two engines racing one schedule slot", 1 in 8 under load):
    // the loser's cache read the events (none yet), then the winner committed its create and
    // lease, then the loser read that lease: a live foreign lease, so the loser appended its
    // create without a lease at generation 0, which the store refused as stale (fencing is
    // checked before the event id) and the caller got TURNLOG_STALE_GENERATION.
    // The PostgreSQL store's readTaskStart reads events and lease in one statement, which cannot
    // tear; without it (another store, or the fallback after a failed one-statement read) the
    // load makes the three reads, and the race is forced between them.
    const threeReads = (inner: HistoryStore) =>
      new Proxy(inner, {
        get(t, p) {
          if (p === 'readTaskStart') return undefined;
          const v = Reflect.get(t, p, t) as unknown;
          return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(t) : v;
        },
      });
    await startRace('torn', (storeB, winnerStarts) => intercept(threeReads(storeB), 'readEvents', (args) => args[0] === 'torn', winnerStarts, 'after'));
  });
});
