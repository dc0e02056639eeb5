// Turns that end badly on a pre-warmed worker (warmPool): a runaway killed at the hard cap, a
// cancelled turn, a worker that crashes mid-turn. Each ends as on a cold worker (one terminal,
// the killed or crashed pid named and never used again, a recorded step replayed, not re-run),
// and the next turn runs on a fresh worker. Workers import dist/test/fixtures: build first.
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { ProcessExecutor } from '../../src/executor/process-executor.js';
import { silentLogger } from '../../src/logger.js';
import type { HistoryEvent } from '../../src/history/events.js';
import * as fixtures from '../fixtures/workflows/index.js';
import { killQuietly, until } from '../helpers/processes.js';

const MODULE = fileURLToPath(new URL('../../dist/test/fixtures/workflows/index.js', import.meta.url));
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function warmEngine(): Promise<{ engine: Engine; exec: ProcessExecutor; warm: number[] }> {
  const exec = new ProcessExecutor({ workflowsModule: MODULE, execArgv: [], logger: silentLogger, warmPool: 1 });
  cleanups.push(async () => {
    const pids = exec.workerPids;
    await exec.close();
    for (const pid of pids) killQuietly(pid);
  });
  await until(() => exec.readyWarmCount === 1, 'a warm worker');
  const warm = exec.workerPids;
  const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: Object.values(fixtures), executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0 });
  cleanups.push(() => engine.shutdown({ graceMs: 100 }));
  return { engine, exec, warm };
}

const TERMINALS = ['TurnCompleted', 'TurnFailed', 'TurnSuspended', 'TurnCancelled', 'TurnTimedOut'];
const of = <T extends HistoryEvent['type']>(h: HistoryEvent[], type: T) => h.filter((e): e is Extract<HistoryEvent, { type: T }> => e.type === type);

/** The next turn after a bad ending runs on another worker than `gone`. */
async function nextRunsElsewhere(engine: Engine, gone: number): Promise<void> {
  const out = (await (await engine.start(fixtures.echo, 'after')).result()) as { pid: number };
  expect(out.pid).not.toBe(gone);
}

describe('ProcessExecutor: bad endings on a pre-warmed worker', () => {
  it('a runaway on the warm worker: marker, WorkerKilled naming it, TurnTimedOut(hard_cap), one terminal; the killed worker is never used again', async () => {
    const { engine, exec, warm } = await warmEngine();
    const h = await engine.start(fixtures.runaway, null);
    await expect(h.result()).rejects.toMatchObject({ code: 'TURNLOG_TURN_TIMED_OUT' });
    const hist = await h.history();
    expect(of(hist, 'TurnStarted')[0]!.pid).toBe(warm[0]);
    expect(hist.map((e) => e.type).slice(-4)).toEqual(['TimeoutCancelRequested', 'WorkerKilled', 'TurnTimedOut', 'TaskCompleted']);
    expect(of(hist, 'WorkerKilled')[0]!.pid).toBe(warm[0]);
    expect(hist.filter((e) => TERMINALS.includes(e.type))).toHaveLength(1);
    expect(exec.workerPids).not.toContain(warm[0]);
    await nextRunsElsewhere(engine, warm[0]!);
  });

  // `held` returns once its signal aborts: its own outcome is recorded (as in the grace of a timeout).
  it('a cancelled turn on the warm worker: one terminal, the handler\'s own, and the task completes', async () => {
    const { engine, warm } = await warmEngine();
    const h = await engine.start(fixtures.held, null);
    await until(async () => (await h.history()).some((e) => e.type === 'TurnStarted'), 'the turn started');
    expect(of(await h.history(), 'TurnStarted')[0]!.pid).toBe(warm[0]);
    await h.cancel('stop');
    await h.result().catch(() => undefined);
    const hist = await h.history();
    expect(hist.filter((e) => TERMINALS.includes(e.type)).map((e) => e.type)).toEqual(['TurnCompleted']);
    expect(of(hist, 'CancelRequested')).toHaveLength(1);
    expect(of(hist, 'TaskCompleted')).toHaveLength(1);
    expect((await (await engine.start(fixtures.echo, 'after')).result()) as { pid: number }).toMatchObject({ pid: expect.any(Number) });
  });

  it('a warm worker that crashes mid-turn: WorkerCrashed naming it, attempt 2 elsewhere replays the recorded step', async () => {
    const { engine, warm } = await warmEngine();
    const h = await engine.start(fixtures.stepThenCrash, null);
    const out = (await h.result()) as { charged: { by: number; attempt: number }; attempt: number; pid: number };
    expect(out).toMatchObject({ attempt: 2, charged: { by: warm[0], attempt: 1 } });
    expect(out.pid).not.toBe(warm[0]);
    const hist = await h.history();
    expect(of(hist, 'WorkerCrashed')).toMatchObject([{ attempt: 1, pid: warm[0], exitCode: 3 }]);
    expect(of(hist, 'StepCompleted')).toHaveLength(1);
    expect(hist.filter((e) => TERMINALS.includes(e.type))).toHaveLength(1);
  });
});
