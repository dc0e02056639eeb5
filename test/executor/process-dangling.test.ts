// Review probe: a reused worker must not carry a previous turn's records into the next turn.
// Workers import the compiled fixture (dist/test/fixtures/workflows): run `npx tsc -p tsconfig.json` first.
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { ProcessExecutor } from '../../src/executor/process-executor.js';
import { silentLogger } from '../../src/logger.js';
import { dangling, reviewEcho } from '../fixtures/workflows/dangling.js';

const MODULE = fileURLToPath(new URL('../../dist/test/fixtures/workflows/dangling.js', import.meta.url));

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe('review: process executor with reused workers', () => {
  // Regression (fixed; was src/executor/child-main.ts runTurn/request): when a turn ends, its context is not fenced
  // and `request()` sends through the *global* current turn. A step the handler left running
  // (not awaited) records after the terminal; on a reused worker that record is sent as a frame of
  // the NEXT turn, and ProcessAttempt accepts it (seq 1 is new for that turn): turn 2 gets a
  // StepCompleted "late" it never made, and its own step 1 is then a protocol violation.
  // Inline turns fence such zombies (FencedError); the worker should too.
  it('a step left running by turn 1 never lands in turn 2', async () => {
    const exec = new ProcessExecutor({ workflowsModule: MODULE, execArgv: [], logger: silentLogger, reuseWorkers: true });
    cleanups.push(() => exec.close());
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [dangling], executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0 });
    cleanups.push(() => engine.shutdown({ graceMs: 100 }));
    const h = await engine.start(dangling, 'leave', { taskId: 'd1' });
    expect((await h.nextTurn()).status).toBe('completed');
    await h.send('work');
    const second = await h.nextTurn();
    const steps = (await h.history()).filter((e) => e.type === 'StepCompleted').map((e) => e.type === 'StepCompleted' && `${e.turn}:${e.name}`);
    expect(steps).toEqual(['2:real']);
    expect(second).toMatchObject({ status: 'completed', output: 'fresh' });
  }, 20_000);
});

describe('review: process executor across deactivate/activate (snapshot lifecycle)', () => {
  // Regression (fixed; was src/runtime/engine.ts #quiesce + src/executor/worker-pool.ts close/acquire): deactivate()
  // closes every executor, and a closed WorkerPool stays closed (`acquire` throws "worker pool
  // closed"). After the next activate() (afterRestore) every process turn fails at once:
  // TurnFailed { message: 'worker pool closed', code: 'TURNLOG_WORKER_START' }.
  // docs/snapshots.md says workers simply do not run while inactive.
  // Fix: let Executor.close() leave the executor re-openable (reset #closed / new pool on the
  // next start), or add an Executor.open() the engine calls on activation.
  it('runs process turns again after deactivate() then activate()', async () => {
    const exec = new ProcessExecutor({ workflowsModule: MODULE, execArgv: [], logger: silentLogger });
    cleanups.push(() => exec.close());
    const engine = Engine.create({ store: new MemoryHistoryStore(), workflows: [reviewEcho], executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0 });
    cleanups.push(() => engine.shutdown({ graceMs: 100 }));
    await engine.activate();
    const h = await engine.start(reviewEcho, 'one', { taskId: 'p1' });
    expect(await h.nextTurn()).toMatchObject({ status: 'suspended', output: 'one' });
    await engine.deactivate({ graceMs: 100 });
    await engine.activate();
    const again = engine.task('p1');
    await again.send('two');
    expect(await again.nextTurn()).toMatchObject({ status: 'suspended', output: 'two' });
  }, 20_000);
});
