/**
 * The scanner's `recover()` (a pass that starts no earlier than the call; with one in flight, one
 * more after it, shared) against shutdown, failures and storms. The store's claim is held on a
 * gate, so the open's pass is provably in flight when the test acts.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import type { ClaimRequest, DueBatch, HistoryStore } from '../../src/store/history-store.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { crashedTasks, crashedTasks as crashed } from '../helpers/histories.js';

const engines: Engine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
});

const echo = defineWorkflow({ name: 'echo', turn: async (ctx, text: string) => ctx.step('echo', () => `echo ${text}`) });

/** Every claim is counted; the first waits for `gate`; `fail(n)` makes claim n (1-based) throw. */
function counted(inner: MemoryHistoryStore, gate: Promise<void>, fail: (n: number) => Error | undefined = () => undefined) {
  const claims = { count: 0 };
  const store = new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop === 'claimDueWork') {
        return async (request: ClaimRequest): Promise<DueBatch> => {
          const n = ++claims.count;
          if (n === 1) await gate;
          const err = fail(n);
          if (err) throw err;
          return target.claimDueWork(request);
        };
      }
      const v = Reflect.get(target, prop, receiver) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  }) as HistoryStore;
  return { store, claims };
}

describe('scanner.recover()', () => {
  it('shutdown while recover() waits for the pass in flight: the follow-up pass never starts, recover() resolves', async () => {
    const inner = await crashed(['old']);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const { store, claims } = counted(inner, gate);
    const engine = await Engine.open({ store, workflows: [echo], logger: silentLogger, scanIntervalMs: 0 });
    const recovering = engine.recover();
    const down = engine.shutdown({ graceMs: 0 });
    release();
    await down;
    const claimsAtShutdown = claims.count;
    await expect(recovering).resolves.toBeUndefined();
    // One claim: the open's pass. A follow-up would have read the store of an engine shut down
    // (a LevelDB store it closed meanwhile), after stop() said no pass was in flight.
    expect(claimsAtShutdown).toBe(1);
    expect(claims.count).toBe(1);
  });

  it('the same on a LevelDB store the engine opened by path: recover() then shutdown() resolves, not LEVEL_DATABASE_NOT_OPEN', async () => {
    const dir = await makeTmpDir('turnlog-scanner-');
    try {
      const level = new LevelHistoryStore(dir.path);
      await level.open();
      for (let i = 0; i < 50; i++) {
        const events = historyBuilder(`t${i}`, { start: Date.now() }).created({ workflow: 'echo', kind: 'one-shot' }).input('before').turnStarted().build();
        await level.append(`t${i}`, events, { expectedLastEventId: 0, generation: events[0]!.generation });
      }
      await level.close();
      const engine = await Engine.open({ store: dir.path, workflows: [echo], logger: silentLogger, scanIntervalMs: 0 });
      // The open's pass is in flight (it has 50 tasks to read and drive): this call waits for it.
      const recovering = engine.recover();
      await engine.shutdown({ graceMs: 0 });
      await expect(recovering).resolves.toBeUndefined();
    } finally {
      await dir.remove();
    }
  });

  it('a failing pass in flight: recover() runs its own pass after it and resolves with that one', async () => {
    const inner = await crashed(['old']);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const { store, claims } = counted(inner, gate, (n) => (n === 1 ? new Error('first claim failed') : undefined));
    const engine = await Engine.open({ store, workflows: [echo], logger: silentLogger, scanIntervalMs: 0 });
    engines.push(engine);
    const opened = engine.recovered();
    const recovering = engine.recover();
    release();
    await expect(opened).rejects.toThrow('first claim failed');
    await expect(recovering).resolves.toBeUndefined();
    expect(claims.count).toBe(2);
    expect(await engine.task('old').result()).toBe('echo before');
  });

  it('a storm of recover() calls during one pass shares one follow-up pass; a call after it starts gets another', async () => {
    const inner = await crashed(['old']);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const { store, claims } = counted(inner, gate);
    const engine = await Engine.open({ store, workflows: [echo], logger: silentLogger, scanIntervalMs: 0 });
    engines.push(engine);
    const storm = Array.from({ length: 50 }, () => engine.recover());
    release();
    await Promise.all(storm);
    expect(claims.count).toBe(2);
    await engine.recover();
    expect(claims.count).toBe(3);
    expect(await engine.task('old').result()).toBe('echo before');
  });

  it('reentrant: a turn the open\'s pass restarted calls engine.recover() in a step; it resolves (after one more pass) and the turn ends', async () => {
    const inner = await crashed(['old']);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const { store, claims } = counted(inner, gate);
    let engine!: Engine;
    const reentrant = defineWorkflow({
      name: 'echo',
      turn: async (ctx, text: string) => {
        await ctx.step('recover', async () => {
          await engine.recover();
          return true;
        });
        return `echo ${text}`;
      },
    });
    engine = await Engine.open({ store, workflows: [reentrant], logger: silentLogger, scanIntervalMs: 0 });
    engines.push(engine);
    release();
    expect(await engine.task('old').result()).toBe('echo before');
    await engine.recovered();
    expect(claims.count).toBeGreaterThanOrEqual(2);
  });
});

describe('recoveryConcurrency', () => {
  it('bounds the tasks a pass recovers at once, and every task is recovered', async () => {
    const ids = Array.from({ length: 40 }, (_, i) => `t${i}`);
    const inner = await crashedTasks(ids);
    // A recovery holds its slot until its TurnStarted is appended: those appends are held a while.
    const flight = { now: 0, max: 0 };
    const store = new Proxy(inner, {
      get(target, prop, receiver) {
        if (prop === 'append') {
          return async (...a: Parameters<MemoryHistoryStore['append']>) => {
            if (!a[1].some((e) => e.type === 'TurnStarted')) return target.append(...a);
            flight.max = Math.max(flight.max, ++flight.now);
            await new Promise((r) => setTimeout(r, 2));
            try {
              return await target.append(...a);
            } finally {
              flight.now--;
            }
          };
        }
        const v = Reflect.get(target, prop, receiver) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    }) as HistoryStore;
    const engine = await Engine.open({ store, workflows: [echo], logger: silentLogger, scanIntervalMs: 0, recoveryConcurrency: 3 });
    engines.push(engine);
    await engine.recovered();
    expect(flight.max).toBe(3);
    for (const id of ids) expect(await engine.task(id).result()).toBe('echo before');
  });
});
