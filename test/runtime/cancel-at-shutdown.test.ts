/**
 * A task cancel that lands while its engine shuts down, on a task with no open turn: the cancel
 * resolved, so the task must end cancelled. Before, only CancelRequested was written (the driver
 * appends a closing engine's drafts without deciding), and a suspended task is not due work: no
 * later recovery pass completed it, and it stayed suspended with its cancel acknowledged.
 */
import { afterEach, expect, it } from 'vitest';
import { silentLogger } from '../../src/logger.js';
import { Engine } from '../../src/runtime/engine.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

it('a task cancel during shutdown of a suspended multi-turn task: the task ends cancelled, and a new engine finds it so', async () => {
  const dir = await makeTmpDir();
  cleanups.push(dir.remove);
  let runs = 0;
  const wf = defineWorkflow({ name: 'chat', kind: 'multi-turn', turn: async () => (runs++, 'a') });
  const stores: LevelHistoryStore[] = [];
  const open = (): Promise<Engine> => Engine.open({ store: stores[stores.push(new LevelHistoryStore(dir.path)) - 1]!, workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
  const first = await open();
  await first.start(wf, 'q1', { taskId: 'c' });
  for (let i = 0; (await first.describe('c')).status !== 'suspended'; i++) {
    if (i > 500) throw new Error('turn 1 did not end');
    await new Promise((r) => setTimeout(r, 5));
  }
  const cancelled = first.cancel('c', 'closed by the user');
  const down = first.shutdown({ graceMs: 0 });
  await cancelled;
  await down;
  await stores[0]!.close();

  const second = await open();
  cleanups.push(async () => {
    await second.shutdown({ graceMs: 0 });
    await stores[1]!.close();
  });
  await second.recovered();
  const d = await second.describe('c');
  expect({ status: d.status, outcome: d.outcome }).toEqual({ status: 'completed', outcome: 'cancelled' });
  const types = (await second.task('c').history()).map((e) => e.type);
  expect(types.slice(types.indexOf('CancelRequested'))).toEqual(['CancelRequested', 'TaskCompleted']);
  expect(runs).toBe(1);
});
