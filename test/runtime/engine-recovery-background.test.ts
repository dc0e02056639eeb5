/**
 * `Engine.open` returns without waiting for recovery (docs/recovery.md "What Engine.open waits
 * for"): new work is served while the pass runs, `engine.recovered()` waits for the pass, and a
 * failed pass rejects it (and is logged). The store's claim is held on a gate, so the pass is
 * provably still running when the test acts.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import type { Logger } from '../../src/logger.js';
import { silentLogger } from '../../src/logger.js';
import type { ClaimRequest, DueBatch, HistoryStore } from '../../src/store/history-store.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { crashedTasks as crashed } from '../helpers/histories.js';

const engines: Engine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
});

const echo = defineWorkflow({ name: 'echo', turn: async (ctx, text: string) => ctx.step('echo', () => `echo ${text}`) });

/** The store with its claim waiting for `gate` (or failing with `fail`). */
function gatedClaims(inner: MemoryHistoryStore, gate: Promise<void>, fail?: Error): HistoryStore {
  return new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop === 'claimDueWork') {
        return async (request: ClaimRequest): Promise<DueBatch> => {
          await gate;
          if (fail) throw fail;
          return target.claimDueWork(request);
        };
      }
      const v = Reflect.get(target, prop, receiver) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  }) as HistoryStore;
}

describe('recovery runs after Engine.open returns', () => {
  it('open returns and serves a new task while the pass is held; recovered() resolves once the old tasks run again', async () => {
    const inner = await crashed(['old-1', 'old-2']);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const engine = await Engine.open({ store: gatedClaims(inner, gate), workflows: [echo], logger: silentLogger, scanIntervalMs: 0 });
    engines.push(engine);
    let recovered = false;
    const waiting = engine.recovered().then(() => (recovered = true));

    // The pass is held at its first claim: nothing of the old tasks was touched, new work runs.
    expect(await (await engine.start(echo, 'new', { taskId: 'fresh' })).result()).toBe('echo new');
    expect(recovered).toBe(false);
    expect((await inner.readEvents('old-1')).map((e) => e.type)).toEqual(['TaskCreated', 'InputQueued', 'TurnStarted']);

    release();
    await waiting;
    expect(recovered).toBe(true);
    for (const id of ['old-1', 'old-2']) {
      // Decided and running again: the turn's second attempt started (its end is not awaited by recovered()).
      expect((await inner.readEvents(id)).filter((e) => e.type === 'TurnStarted').map((e) => (e.type === 'TurnStarted' ? e.attempt : 0))).toEqual([1, 2]);
      expect(await engine.task(id).result()).toBe('echo before');
    }
  });

  it('a waiter on a task the pass has not reached gets the turn the pass reruns', async () => {
    const inner = await crashed(['old']);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const engine = await Engine.open({ store: gatedClaims(inner, gate), workflows: [echo], logger: silentLogger, scanIntervalMs: 0 });
    engines.push(engine);
    const result = engine.task('old').result();
    release();
    expect(await result).toBe('echo before');
    await engine.recovered();
    // Recovered once: the pass found the task already running or done and started nothing more.
    expect((await inner.readEvents('old')).filter((e) => e.type === 'TurnStarted')).toHaveLength(2);
  });

  it('recover() during the open\'s pass runs another pass after it, which sees a task left running since the first read', async () => {
    const inner = await crashed(['old']);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    // The open's pass reads the due tasks, then waits: it has provably read the store before 'late' existed.
    let first = true;
    const store = new Proxy(inner, {
      get(target, prop, receiver) {
        if (prop === 'claimDueWork') {
          return async (request: ClaimRequest): Promise<DueBatch> => {
            const batch = await target.claimDueWork(request);
            if (first) {
              first = false;
              await gate;
            }
            return batch;
          };
        }
        const v = Reflect.get(target, prop, receiver) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    }) as HistoryStore;
    const engine = await Engine.open({ store, workflows: [echo], logger: silentLogger, scanIntervalMs: 0 });
    engines.push(engine);
    const late = historyBuilder('late', { start: Date.now() }).created({ workflow: 'echo', kind: 'one-shot' }).input('later').turnStarted().build();
    await inner.append('late', late, { expectedLastEventId: 0, generation: late[0]!.generation });
    const pass = engine.recover();
    release();
    await pass;
    // Joining the open's pass would have returned with 'late' untouched (one attempt).
    expect((await inner.readEvents('late')).filter((e) => e.type === 'TurnStarted')).toHaveLength(2);
    expect(await engine.task('late').result()).toBe('echo later');
    expect(await engine.task('old').result()).toBe('echo before');
  });

  it('a failed pass: open still returned, recovered() rejects with the error, and it is logged', async () => {
    const inner = await crashed(['old']);
    const errors: string[] = [];
    const logger: Logger = { ...silentLogger, error: (message) => void errors.push(message) };
    const broken = new Error('claim failed');
    const engine = await Engine.open({ store: gatedClaims(inner, Promise.resolve(), broken), workflows: [echo], logger, scanIntervalMs: 0 });
    engines.push(engine);
    await expect(engine.recovered()).rejects.toBe(broken);
    expect(errors).toContain('recovery at open failed; the periodic scan retries');
    // The engine is open and serves work.
    expect(await (await engine.start(echo, 'still', { taskId: 'fresh' })).result()).toBe('echo still');
  });
});
