/**
 * Review: maxRunningTurns with operator-style calls on a task waiting for a slot. A cancelled
 * task never runs (invariant 7); a withdrawn input never runs; a fork / send while waiting keeps order.
 */
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { until } from '../helpers/processes.js';

const engines: Engine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
});

function gated() {
  const ran: string[] = [];
  const gates: (() => void)[] = [];
  const wf = defineWorkflow({
    name: 'gated',
    kind: 'multi-turn',
    turn: async (ctx, n: number) => {
      ran.push(`${ctx.taskId}:${n}`);
      await new Promise<void>((r) => gates.push(r));
      return n * 10;
    },
  });
  return { wf, gates, ran };
}

it('a task cancelled while it waits for a slot never runs; a withdrawn waiting input never runs', async () => {
  const g = gated();
  const store = new MemoryHistoryStore();
  const engine = await Engine.open({ store, workflows: [g.wf], logger: silentLogger, scanIntervalMs: 0, maxRunningTurns: 1 });
  engines.push(engine);
  const a = await engine.start(g.wf, 1, { taskId: 'a' });
  await until(() => g.gates.length === 1, 'a to run');
  const b = await engine.start(g.wf, 2, { taskId: 'b' });
  const c = await engine.start(g.wf, 3, { taskId: 'c' });
  const later = await engine.sendInput('c', 4);
  await engine.cancel('b', 'stop');
  await engine.withdraw('c', later);
  g.gates.shift()!();
  await a.nextTurn();
  await until(() => g.gates.length === 1, 'c to run');
  g.gates.shift()!();
  await c.nextTurn();
  // Give the engine every chance to (wrongly) start something more.
  await engine.recovered();
  await new Promise((r) => setTimeout(r, 50));
  expect(g.ran).toEqual(['a:1', 'c:3']);
  expect((await engine.describe('b')).status).toBe('completed');
  expect((await engine.describe('b')).outcome).toBe('cancelled');
  expect((await store.readEvents('b')).some((e) => e.type === 'TurnStarted')).toBe(false);
  void b;
});

it('recovery at open with maxRunningTurns 1 and two crashed open turns: recovered() resolves while the first re-run holds the slot, each re-runs once', async () => {
  const g = gated();
  const { historyBuilder } = await import('../../src/testing/history-builder.js');
  const store = new MemoryHistoryStore();
  await store.open();
  for (const id of ['x', 'y']) {
    const events = historyBuilder(id, { start: Date.now() }).created({ workflow: 'gated', kind: 'multi-turn' }).input(id === 'x' ? 1 : 2).turnStarted().build();
    await store.append(id, events, { expectedLastEventId: 0, generation: events[0]!.generation });
  }
  const engine = await Engine.open({ store, workflows: [g.wf], logger: silentLogger, scanIntervalMs: 0, maxRunningTurns: 1 });
  engines.push(engine);
  await until(() => g.gates.length === 1, 'one re-run to start');
  await engine.recovered();
  expect(g.ran).toHaveLength(1);
  g.gates.shift()!();
  await until(() => g.gates.length === 1 && g.ran.length === 2, 'the other re-run');
  g.gates.shift()!();
  for (const id of ['x', 'y']) await until(async () => (await engine.describe(id)).status === 'suspended', `${id} to end`);
  expect(g.ran.sort()).toEqual(['x:1', 'y:2']);
  for (const id of ['x', 'y']) {
    const starts = (await store.readEvents(id)).filter((e) => e.type === 'TurnStarted').map((e) => (e.type === 'TurnStarted' ? e.attempt : 0));
    expect(starts).toEqual([1, 2]);
  }
});
