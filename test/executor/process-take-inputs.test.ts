// ctx.takeInputs({ wait: true }) in a process worker (docs/steering.md, docs/isolation.md): an
// input sent while the worker waits reaches it, as inline, instead of waiting out the timeout.
// Workers import the compiled fixtures (dist/test/fixtures/workflows): run `npm run build` first.
import { fileURLToPath } from 'node:url';
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { ProcessExecutor } from '../../src/executor/process-executor.js';
import { silentLogger } from '../../src/logger.js';
import * as fixtures from '../fixtures/workflows/index.js';
import { until, killQuietly } from '../helpers/processes.js';

const MODULE = fileURLToPath(new URL('../../dist/test/fixtures/workflows/index.js', import.meta.url));
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

it('an input sent while a worker waits in takeInputs({ wait: true }) is taken by that turn', async () => {
  const exec = new ProcessExecutor({ workflowsModule: MODULE, execArgv: [], logger: silentLogger });
  cleanups.push(async () => {
    const pids = exec.workerPids;
    await exec.close();
    for (const pid of pids) killQuietly(pid);
  });
  const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [fixtures.waitForInput], executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0 });
  cleanups.push(() => engine.shutdown({ graceMs: 100 }));
  const h = await engine.start(fixtures.waitForInput, 'confirm?', { taskId: 'ask' });
  await until(async () => (await engine.describe('ask')).openTurn?.running === true, 'the worker to run the turn');
  await new Promise((r) => setTimeout(r, 200)); // the worker is inside its wait
  const answer = await h.send('yes');
  const timeout = new Promise((r) => setTimeout(() => r('not taken within 8 s'), 8_000).unref());
  expect(await Promise.race([engine.turnResult('ask', answer), timeout])).toMatchObject({ turn: 1, status: 'suspended', output: ['yes'] });
  expect((await engine.history('ask')).find((e) => e.type === 'InputsTaken')).toMatchObject({ inputIds: [answer] });
}, 30_000);
