/**
 * Flow limits with the process executor: the worker asks the engine for a slot (Record.acquire,
 * answered by Ack.limit_grant), and a worker that dies inside a limited step frees its slot.
 * Workers import the compiled fixtures: run `npx tsc -p tsconfig.json` first.
 */
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { ProcessExecutor } from '../../src/executor/process-executor.js';
import { silentLogger } from '../../src/logger.js';
import { limitedCall } from '../fixtures/workflows/limited.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const MODULE = fileURLToPath(new URL('../../dist/test/fixtures/workflows/index.js', import.meta.url));
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe('flow limits in process workers', () => {
  it('a worker crash inside a limited step releases its slot: every task still completes under concurrency 1', async () => {
    const dir = await makeTmpDir();
    const exec = new ProcessExecutor({ workflowsModule: MODULE, execArgv: [], logger: silentLogger });
    const engine = await Engine.open({ store: dir.path, workflows: [limitedCall], executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0, inspect: false, flowLimits: { model: { concurrency: 1 } } });
    cleanups.push(async () => {
      await engine.shutdown({ graceMs: 100 });
      await exec.close();
      await dir.remove();
    });
    const crash = await engine.start(limitedCall, 'crash', { taskId: 'crash' });
    const ok = await engine.start(limitedCall, 'ok', { taskId: 'ok' });
    expect(await crash.result()).toBe('crash:2');
    expect(await ok.result()).toBe('ok:1');
    const history = await engine.history('crash');
    expect(history.map((e) => e.type)).toContain('WorkerCrashed');
    const step = history.find((e) => e.type === 'StepCompleted');
    expect(step).toMatchObject({ name: 'model', attempt: 2, limit: 'model' });
    expect(typeof (step as { waitedMs?: number }).waitedMs).toBe('number');
  });

  it('an unknown limit fails the step in the worker with TURNLOG_LIMIT_UNKNOWN', async () => {
    const dir = await makeTmpDir();
    const exec = new ProcessExecutor({ workflowsModule: MODULE, execArgv: [], logger: silentLogger });
    const engine = await Engine.open({ store: dir.path, workflows: [limitedCall], executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0, inspect: false, flowLimits: { other: { concurrency: 1 } } });
    cleanups.push(async () => {
      await engine.shutdown({ graceMs: 100 });
      await exec.close();
      await dir.remove();
    });
    const r = await (await engine.start(limitedCall, 'x', { taskId: 'x' })).nextTurn();
    expect(r.status).toBe('failed');
    expect(r.failure?.code).toBe('TURNLOG_LIMIT_UNKNOWN');
  });
});
