// ctx.waitFor in a process worker (docs/isolation.md#protocol): the engine records the wait, ends
// it (a signal, or its deadline on the engine's clock) and pushes the end in a Signals frame; a
// worker that dies mid-wait is replaced, and attempt 2 waits toward the recorded deadline.
// Workers import the compiled fixtures (dist/test/fixtures/workflows): run `npx tsc -p tsconfig.json` first.
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

async function open(): Promise<Engine> {
  const exec = new ProcessExecutor({ workflowsModule: MODULE, execArgv: [], logger: silentLogger });
  cleanups.push(async () => {
    const pids = exec.workerPids;
    await exec.close();
    for (const pid of pids) killQuietly(pid);
  });
  const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [fixtures.waitThenCrash, fixtures.waitForGo], executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0 });
  cleanups.push(() => engine.shutdown({ graceMs: 100 }));
  return engine;
}

it('a signal sent while the worker waits reaches it (Signals frame); the wait is recorded once', async () => {
  const engine = await open();
  const h = await engine.start(fixtures.waitForGo, null);
  await until(async () => (await h.history()).some((e) => e.type === 'WaitStarted'), 'the worker to wait');
  await h.signal('go', 'from outside');
  expect(await h.result()).toEqual({ attempt: 1, value: 'from outside' });
  const types = (await h.history()).map((e) => e.type);
  expect(types.filter((t) => t === 'WaitStarted' || t === 'SignalReceived' || t === 'WaitEnded')).toEqual(['WaitStarted', 'SignalReceived', 'WaitEnded']);
});

it('after the worker dies mid-wait, attempt 2 waits only toward the recorded deadline, then times out', async () => {
  const engine = await open();
  const h = await engine.start(fixtures.waitThenCrash, null);
  const out = (await h.result()) as { attempt: number; timedOut: boolean; endedAt: number };
  const events = await h.history();
  const started = events.filter((e) => e.type === 'WaitStarted');
  expect(started).toHaveLength(1);
  expect(events.some((e) => e.type === 'WorkerCrashed')).toBe(true);
  expect(out).toMatchObject({ attempt: 2, timedOut: true });
  const deadline = started[0]!.type === 'WaitStarted' ? started[0]!.deadline! : Infinity;
  const ended = events.find((e) => e.type === 'WaitEnded')!;
  expect(ended).toMatchObject({ timedOut: true });
  expect(ended.time).toBeGreaterThanOrEqual(deadline);
  expect(out.endedAt).toBeGreaterThanOrEqual(deadline);
});
