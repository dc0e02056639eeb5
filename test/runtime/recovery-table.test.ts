/**
 * One recovery pass over many tasks, a few in every state of the decision table (DESIGN.md,
 * "Recovery decisions"), on LevelDB with a tiny cache and several tasks at once: each is driven
 * by its rule, a timed-out turn (marker or backstop) is finalized and its handler never runs, a
 * cancelled one never runs, a re-run replays its recorded step; a second engine finds nothing
 * left to do (nothing resurrected, no handler runs, no event appended).
 */
import { afterEach, expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import { silentLogger } from '../../src/logger.js';
import { Engine } from '../../src/runtime/engine.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { historyBuilder, type HistoryBuilder } from '../../src/testing/history-builder.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const MIN = 60_000;
const LONG = { turnTimeoutMs: 1e9 };
type State = { name: string; build: (id: string) => HistoryBuilder; runs: number; terminal: string | undefined; status: string; outcome?: string };

// `terminal`: the open turn's terminal that recovery writes (undefined: none written).
const STATES: State[] = [
  { name: 'completed', build: (id) => one(id, LONG).input('hi').turnStarted().step('llm', 'x').completed('done').taskCompleted('succeeded'), runs: 0, terminal: undefined, status: 'completed', outcome: 'succeeded' },
  { name: 'cancel-pending', build: (id) => multi(id, LONG).cancel('task', 'closed'), runs: 0, terminal: undefined, status: 'completed', outcome: 'cancelled' },
  { name: 'cancel-turn', build: (id) => multi(id, LONG).input('q1').turnStarted().step('llm', 'partial').cancel('turn', 'stop'), runs: 0, terminal: 'TurnCancelled', status: 'suspended' },
  { name: 'marker', build: (id) => one(id, {}, 10_000).input('hi').turnStarted().step('llm', 'x').marker(), runs: 0, terminal: 'TurnTimedOut', status: 'completed', outcome: 'timed_out' },
  { name: 'marker-multi', build: (id) => multi(id, {}, 10_000).input('q1').turnStarted().marker(), runs: 0, terminal: 'TurnTimedOut', status: 'suspended' },
  { name: 'backstop', build: (id) => multi(id, {}, 2 * MIN).input('q1').turnStarted().step('llm', 'x'), runs: 0, terminal: 'TurnTimedOut', status: 'suspended' },
  { name: 'backstop-one-shot', build: (id) => one(id, {}, 2 * MIN).input('hi').turnStarted(), runs: 0, terminal: 'TurnTimedOut', status: 'completed', outcome: 'timed_out' },
  { name: 'worker-crashes-exhausted', build: (id) => one(id, LONG).input('hi').turnStarted({ executor: 'process' }).crashed().recovered({ executor: 'process' }).crashed().recovered({ executor: 'process' }).crashed(), runs: 0, terminal: 'TurnFailed', status: 'completed', outcome: 'failed' },
  { name: 'recoveries-exhausted', build: (id) => multi(id, LONG).input('q1').turnStarted().exitedForRecovery().recovered().exitedForRecovery().recovered().recovered(), runs: 0, terminal: 'TurnFailed', status: 'suspended' },
  { name: 'recover', build: (id) => multi(id, LONG).input('q1').turnStarted().step('search', 'recorded').exitedForRecovery('shutdown'), runs: 1, terminal: 'TurnCompleted', status: 'suspended' },
  { name: 'recover-one-shot', build: (id) => one(id, LONG).input('hi').turnStarted(), runs: 1, terminal: 'TurnCompleted', status: 'completed', outcome: 'succeeded' },
  { name: 'queued-input', build: (id) => multi(id, LONG).input('q1'), runs: 1, terminal: 'TurnCompleted', status: 'suspended' },
  { name: 'suspended', build: (id) => multi(id, LONG).input('q1').turnStarted().suspended('waiting'), runs: 0, terminal: undefined, status: 'suspended' },
  { name: 'pending', build: (id) => multi(id, LONG), runs: 0, terminal: undefined, status: 'pending' },
];
const one = (id: string, policy: object, ago = 10_000) => historyBuilder(id, { start: Date.now() - ago, tick: 1 }).created({ workflow: 'one', kind: 'one-shot', policy });
const multi = (id: string, policy: object, ago = 10_000) => historyBuilder(id, { start: Date.now() - ago, tick: 1 }).created({ workflow: 'multi', kind: 'multi-turn', policy });

const COPIES = 4;

it('one pass recovers tasks in every state of the decision table, each by its rule; a second engine has nothing to do', async () => {
  const dir = await makeTmpDir();
  cleanups.push(dir.remove);
  const seed = new LevelHistoryStore(dir.path);
  await seed.open();
  const tasks: { id: string; state: State; before: number }[] = [];
  for (let c = 0; c < COPIES; c++) {
    for (const state of STATES) {
      const id = `${state.name}-${c}`;
      const events = state.build(id).build();
      await seed.append(id, events, { expectedLastEventId: 0, generation: events[0]!.generation });
      tasks.push({ id, state, before: events.length });
    }
  }
  await seed.close();

  const runs = new Map<string, number>();
  const replayed = new Map<string, unknown>();
  const handler = async (ctx: { taskId: string; step: (n: string, f: () => string) => Promise<string> }): Promise<string> => {
    runs.set(ctx.taskId, (runs.get(ctx.taskId) ?? 0) + 1);
    replayed.set(ctx.taskId, await ctx.step('search', () => 'fresh'));
    return 'ok';
  };
  const workflows = [defineWorkflow({ name: 'one', turn: handler as never }), defineWorkflow({ name: 'multi', kind: 'multi-turn', turn: handler as never })];
  // An engine does not close a store it was given: each one's is closed after its shutdown.
  const stores: LevelHistoryStore[] = [];
  const open = (): Promise<Engine> => Engine.open({ store: stores[stores.push(new LevelHistoryStore(dir.path)) - 1]!, workflows, logger: silentLogger, scanIntervalMs: 0, maxCachedTasks: 3, recoveryConcurrency: 4 });

  const engine = await open();
  await engine.recovered();
  const settled = async (id: string): Promise<HistoryEvent[]> => {
    for (let i = 0; ; i++) {
      const d = await engine.describe(id);
      if (d.status !== 'in_progress') return engine.task(id).history();
      if (i > 500) throw new Error(`task ${id} still in progress`);
      await new Promise((r) => setTimeout(r, 5));
    }
  };
  const after = new Map<string, number>();
  for (const { id, state, before } of tasks) {
    const events = await settled(id);
    const d = await engine.describe(id);
    expect({ id, status: d.status, outcome: d.outcome }).toEqual({ id, status: state.status, outcome: state.outcome });
    expect({ id, runs: runs.get(id) ?? 0 }).toEqual({ id, runs: state.runs });
    const written = events.slice(before).filter((e) => e.type.startsWith('Turn') && e.type !== 'TurnStarted').map((e) => e.type);
    expect({ id, written }).toEqual({ id, written: state.terminal ? [state.terminal] : [] });
    // Exactly one terminal per turn, over the whole history.
    const turns = new Set(events.flatMap((e) => (e.type === 'TurnStarted' ? [e.turn] : [])));
    for (const t of turns) {
      const terminals = events.filter((e) => ['TurnCompleted', 'TurnFailed', 'TurnSuspended', 'TurnCancelled', 'TurnTimedOut'].includes(e.type) && (e as { turn: number }).turn === t);
      expect({ id, t, n: terminals.length }).toEqual({ id, t, n: 1 });
    }
    if (state.name === 'recover') expect(replayed.get(id)).toBe('recorded');
    after.set(id, events.length);
  }
  await engine.shutdown({ graceMs: 0 });
  await stores[0]!.close();

  runs.clear();
  const again = await open();
  cleanups.push(async () => {
    await again.shutdown({ graceMs: 0 });
    await stores[1]!.close();
  });
  await again.recovered();
  for (const { id } of tasks) {
    const events = await again.task(id).history();
    // The second engine's lease claim may be written; nothing else.
    expect({ id, rest: events.slice(after.get(id)).map((e) => e.type).filter((t) => t !== 'LeaseClaimed') }).toEqual({ id, rest: [] });
  }
  expect([...runs]).toEqual([]);
});
