/**
 * `maxRunningTurns`: at most N turns run in one engine; the others wait with their inputs durably
 * queued (the task stays pending or suspended) and start, first come first served, as slots free.
 */
import { afterEach, expect, it } from 'vitest';
import { isTurnlogError } from '../../src/errors.js';
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
  let running = 0;
  let peak = 0;
  const order: string[] = [];
  const gates: (() => void)[] = [];
  const wf = defineWorkflow({
    name: 'gated',
    kind: 'multi-turn',
    turn: async (ctx, n: number) => {
      running++;
      peak = Math.max(peak, running);
      order.push(ctx.taskId);
      await new Promise<void>((r) => gates.push(r));
      running--;
      return n * 10;
    },
  });
  return { wf, gates, order, stats: () => ({ running, peak }) };
}

it('runs at most maxRunningTurns turns at once; the rest wait queued and start in arrival order as slots free', async () => {
  const g = gated();
  const store = new MemoryHistoryStore();
  const engine = await Engine.open({ store, workflows: [g.wf], logger: silentLogger, scanIntervalMs: 0, maxRunningTurns: 2 });
  engines.push(engine);
  const handles = [];
  for (let i = 0; i < 6; i++) handles.push(await engine.start(g.wf, i, { taskId: `t${i}` }));
  await until(() => g.gates.length === 2, 'two turns to start');
  // Waiting tasks are durably queued, no turn opened: another engine (or a restart) could run them.
  expect((await store.getSummary('t2'))).toMatchObject({ status: 'pending', queued: 1 });
  expect((await engine.describe('t5')).decision.kind).toBe('start-turn');
  for (let done = 0; done < 6; done++) {
    await until(() => g.gates.length > 0, 'a turn to wait at its gate');
    expect(g.stats().running).toBeLessThanOrEqual(2);
    g.gates.shift()!();
  }
  const results = await Promise.all(handles.map((h) => h.result()));
  expect(results).toEqual([0, 10, 20, 30, 40, 50]);
  expect(g.stats().peak).toBe(2);
  expect(g.order).toEqual(['t0', 't1', 't2', 't3', 't4', 't5']);
});

it('a recovery scan respects the cap too', async () => {
  const g = gated();
  const store = new MemoryHistoryStore();
  const seed = await Engine.open({ store, workflows: [g.wf], logger: silentLogger, scanIntervalMs: 0, maxRunningTurns: 1 });
  engines.push(seed);
  for (let i = 1; i <= 3; i++) await seed.start(g.wf, i, { taskId: `s${i}` });
  await until(() => g.gates.length === 1, 'one turn to start');
  await seed.recover();
  expect(g.stats().running).toBe(1);
  for (let i = 0; i < 3; i++) {
    await until(() => g.gates.length > 0, 'the next turn');
    g.gates.shift()!();
  }
  await until(() => g.order.length === 3 && g.stats().running === 0, 'all turns');
  expect(g.stats().peak).toBe(1);
});

it('maxRunningTurns must be a positive integer', () => {
  const g = gated();
  for (const bad of [0, -1, 1.5, Number.NaN]) {
    let err: unknown;
    try {
      Engine.create({ workflows: [g.wf], maxRunningTurns: bad });
    } catch (e) {
      err = e;
    }
    expect(isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT'), String(bad)).toBe(true);
    expect(String((err as Error).message)).toContain('maxRunningTurns');
  }
});
