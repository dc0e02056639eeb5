/**
 * Review: API calls racing the background recovery pass (docs/recovery.md). The pass's claim
 * is held on a gate, so the call provably lands while the pass has not reached the task.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import type { ClaimRequest, DueBatch, HistoryStore } from '../../src/store/history-store.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { crashedTasks as crashed } from '../helpers/histories.js';

const engines: Engine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
});

let runs: string[] = [];
const echo = defineWorkflow({ name: 'echo', turn: async (ctx, text: string) => ctx.step('echo', () => (runs.push(text), `echo ${text}`)) });
const chat = defineWorkflow({
  name: 'chat',
  kind: 'multi-turn',
  turn: async (ctx, text: string) => {
    const r = await ctx.step('reply', () => (runs.push(text), `re ${text}`));
    return ctx.suspend('waiting', r);
  },
});

function gatedClaims(inner: MemoryHistoryStore, gate: Promise<void>): HistoryStore {
  return new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop === 'claimDueWork') {
        return async (request: ClaimRequest): Promise<DueBatch> => {
          await gate;
          return target.claimDueWork(request);
        };
      }
      const v = Reflect.get(target, prop, receiver) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  }) as HistoryStore;
}

const starts = async (store: MemoryHistoryStore, id: string) =>
  (await store.readEvents(id)).filter((e) => e.type === 'TurnStarted').map((e) => (e.type === 'TurnStarted' ? `${e.turn}.${e.attempt}` : ''));

describe('API calls while background recovery has not reached the task', () => {
  it('cancel of a crashed one-shot task: it is cancelled and the pass never re-runs it', async () => {
    runs = [];
    const inner = await crashed(['old'], 'echo', 'one-shot');
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const engine = await Engine.open({ store: gatedClaims(inner, gate), workflows: [echo], logger: silentLogger, scanIntervalMs: 0 });
    engines.push(engine);
    await engine.cancel('old', 'stop');
    release();
    await engine.recovered();
    const d = await engine.describe('old');
    expect(d.status).toBe('completed');
    expect(d.outcome).toBe('cancelled');
    expect(runs).toEqual([]);
    expect(await starts(inner, 'old')).toEqual(['1.1']);
  });

  it('send to a crashed multi-turn task: the open turn is re-run once, then the new input runs once', async () => {
    runs = [];
    const inner = await crashed(['c'], 'chat', 'multi-turn');
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const engine = await Engine.open({ store: gatedClaims(inner, gate), workflows: [chat], logger: silentLogger, scanIntervalMs: 0 });
    engines.push(engine);
    const h = engine.task('c');
    await h.send('next');
    release();
    await engine.recovered();
    // Wait for the task to settle with both turns ended.
    for (let i = 0; i < 500 && ((await engine.describe('c')).status !== 'suspended' || (await starts(inner, 'c')).length < 3); i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(await starts(inner, 'c')).toEqual(['1.1', '1.2', '2.1']);
    expect(runs.sort()).toEqual(['before', 'next']);
    const events = await inner.readEvents('c');
    expect(events.filter((e) => e.type === 'TurnSuspended').map((e) => (e.type === 'TurnSuspended' ? e.turn : 0))).toEqual([1, 2]);
  });
});
