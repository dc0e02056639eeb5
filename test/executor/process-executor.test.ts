// ProcessExecutor against real worker processes and real SIGKILLs (issue 5, docs/isolation.md).
// Workers import the compiled fixtures (dist/test/fixtures/workflows): run `npx tsc -p tsconfig.json` first.
// Timeouts are small (300 ms + 300 ms grace) on the real clock; tests assert on history, never on elapsed time.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, relative } from 'node:path';
import { promisify } from 'node:util';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { ProcessExecutor, type ProcessExecutorOptions } from '../../src/executor/process-executor.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { silentLogger, type Logger } from '../../src/logger.js';
import type { HistoryEvent } from '../../src/history/events.js';
import * as fixtures from '../fixtures/workflows/index.js';
import * as burstModule from '../fixtures/workflows/burst.js';
import { createTestEngine } from '../../src/testing/test-engine.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const DIST = fileURLToPath(new URL('../../dist/test/fixtures/', import.meta.url));
const MODULE = `${DIST}workflows/index.js`;

const inlineSlow = defineWorkflow({
  name: 'inline-slow',
  executor: 'inline',
  turn: async (_ctx, ms: number) => {
    await new Promise((r) => setTimeout(r, ms));
    return 'inline-ok';
  },
});
const ALL = [...Object.values(fixtures), inlineSlow];

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function executor(options: Partial<ProcessExecutorOptions> = {}): ProcessExecutor {
  const exec = new ProcessExecutor({ workflowsModule: MODULE, execArgv: [], logger: silentLogger, ...options });
  cleanups.push(async () => {
    const pids = exec.workerPids;
    await exec.close();
    for (const pid of pids) killQuietly(pid);
  });
  return exec;
}

async function open(exec: ProcessExecutor, store = new MemoryHistoryStore()): Promise<Engine> {
  const engine = await Engine.open({ store, workflows: ALL, executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0 });
  cleanups.push(() => engine.shutdown({ graceMs: 100 }));
  return engine;
}

function killQuietly(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Polls `cond` until true (bounded); a wait, not a timing assertion. */
async function until(cond: () => boolean | Promise<boolean>, what: string, limitMs = 15_000): Promise<void> {
  const end = Date.now() + limitMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const types = (h: HistoryEvent[]) => h.map((e) => e.type);
const of = <T extends HistoryEvent['type']>(h: HistoryEvent[], type: T) => h.filter((e): e is Extract<HistoryEvent, { type: T }> => e.type === type);
const expectBefore = (h: HistoryEvent[], a: HistoryEvent['type'], b: HistoryEvent['type']) =>
  expect(types(h).indexOf(a)).toBeLessThan(types(h).lastIndexOf(b));

describe('ProcessExecutor: basics', () => {
  it('runs an isolated echo in another process', async () => {
    const engine = await open(executor());
    const h = await engine.start(fixtures.echo, { hi: 1 });
    const out = (await h.result()) as { echo: unknown; pid: number };
    expect(out.echo).toEqual({ hi: 1 });
    expect(out.pid).not.toBe(process.pid);
    expect(types(await h.history())).toEqual(['TaskCreated', 'InputQueued', 'LeaseClaimed', 'TurnStarted', 'TurnCompleted', 'TaskCompleted']);
  });

  // Issue 18.5: TurnStarted.pid was 0 for every process turn.
  it('names the worker pid in TurnStarted: warm pool and reused worker', async () => {
    const exec = executor({ warmPool: 1, reuseWorkers: true });
    const engine = await open(exec);
    const cold = await engine.start(fixtures.echo, 'a');
    const coldPid = ((await cold.result()) as { pid: number }).pid;
    expect(of(await cold.history(), 'TurnStarted').map((e) => e.pid)).toEqual([coldPid]);
    const chat = await engine.start(fixtures.pids, 'a', { taskId: 'pid-reuse' });
    const first = ((await chat.nextTurn()).output as { pid: number }).pid;
    const next = await chat.send('b');
    expect(((await chat.turnResult(next)).output as { pid: number }).pid).toBe(first);
    expect(of(await chat.history(), 'TurnStarted').map((e) => e.pid)).toEqual([first, first]);
  });

  it('leaves TurnStarted.pid 0 for an attempt that waited for a free worker', async () => {
    const engine = await open(executor({ maxWorkers: 1 }));
    const [a, b] = await Promise.all([engine.start(fixtures.slow, 300), engine.start(fixtures.echo, 'queued')]);
    const aPid = ((await a.result()) as { pid: number }).pid;
    await b.result();
    expect(of(await a.history(), 'TurnStarted')[0]!.pid).toBe(aPid);
    expect(of(await b.history(), 'TurnStarted')[0]!.pid).toBe(0);
  });

  it('gives a released reservation back: parked for a reused multi-turn task, else closed', async () => {
    const exec = executor({ reuseWorkers: true });
    const parked = exec.reserve('res-multi', 'multi-turn');
    expect(parked.pid).toBeGreaterThan(0);
    parked.release();
    parked.release(); // a no-op the second time
    expect(exec.parkedWorkers.get('res-multi')).toBe(parked.pid);
    const closed = exec.reserve('res-one', 'one-shot');
    closed.release();
    await until(() => !exec.workerPids.includes(closed.pid), 'the released worker to exit');
    expect(exec.parkedWorkers.has('res-one')).toBe(false);
  });

  it('gives a handler that calls Engine.open inside a worker an IsolationBoundaryError', async () => {
    const exec = executor({ workflowsModule: `${DIST}workflows/boundary.js` });
    const { boundary } = await import('../fixtures/workflows/boundary.js');
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [boundary], executors: { process: exec }, logger: silentLogger });
    cleanups.push(() => engine.shutdown({ graceMs: 100 }));
    const out = (await (await engine.start(boundary, null)).result()) as { name: string; code: string; message: string };
    expect(out.name).toBe('IsolationBoundaryError');
    expect(out.code).toBe('TURNLOG_ISOLATION_BOUNDARY');
    expect(out.message).toContain('Engine.open()');
  });

  it('queues turns FIFO behind maxWorkers and runs them all', async () => {
    const exec = executor({ maxWorkers: 1 });
    const engine = await open(exec);
    const hs = await Promise.all([1, 2, 3].map((i) => engine.start(fixtures.echo, i)));
    const outs = (await Promise.all(hs.map((h) => h.result()))) as { echo: number }[];
    expect(outs.map((o) => o.echo)).toEqual([1, 2, 3]);
  });

  it('runs a turn on a pre-warmed worker and refills the pool', async () => {
    const exec = executor({ warmPool: 2 });
    await until(() => exec.warmCount === 2, 'two warm workers');
    const warm = exec.workerPids;
    const engine = await open(exec);
    const out = (await (await engine.start(fixtures.echo, 'x')).result()) as { pid: number };
    expect(warm).toContain(out.pid);
    await until(() => exec.warmCount === 2, 'the pool refilled');
  });

  // The refill's spawn blocks the engine thread for ms and boots a process beside the turns:
  // it waits until no turn is in flight (docs/decisions.md, "When the warm pool refills").
  it('refills a taken warm worker only once no turn is in flight', async () => {
    const exec = executor({ warmPool: 1, refillMaxDeferMs: 600_000 });
    await until(() => exec.readyWarmCount === 1, 'a warm worker');
    const engine = await open(exec);
    const h = await engine.start(fixtures.held, null);
    const pid = exec.workerPids[0];
    // Well past the refill's earliest time (50 ms after the take): the turn still holds.
    await new Promise((r) => setTimeout(r, 400));
    expect(exec.workerPids).toEqual([pid]);
    expect(exec.warmCount).toBe(0);
    await h.cancel('done');
    await h.result().catch(() => undefined);
    await until(() => exec.readyWarmCount === 1 && exec.workerCount === 1, 'the pool refilled after the turn');
    expect(exec.workerPids).not.toContain(pid);
  });

  it('refills at once when a turn found the warm pool empty, and by the deadline while turns hold', async () => {
    const exec = executor({ warmPool: 1, refillMaxDeferMs: 600_000 });
    await until(() => exec.readyWarmCount === 1, 'a warm worker');
    const engine = await open(exec);
    const first = await engine.start(fixtures.held, null);
    const second = await engine.start(fixtures.held, null); // no warm worker left: a cold start
    await until(() => exec.readyWarmCount === 1, 'the refill while both turns hold');
    expect(exec.workerCount).toBe(3);
    const deadline = executor({ warmPool: 2, refillMaxDeferMs: 100 });
    await until(() => deadline.readyWarmCount === 2, 'two warm workers');
    const other = await open(deadline);
    const third = await other.start(fixtures.held, null);
    await until(() => deadline.readyWarmCount === 2 && deadline.workerCount === 3, 'the refill at its deadline while the turn holds');
    for (const h of [first, second, third]) await h.cancel('done');
  });

  it('closed while a refill waits for a turn: no worker spawns after the close', async () => {
    const exec = executor({ warmPool: 1, refillMaxDeferMs: 300 });
    await until(() => exec.readyWarmCount === 1, 'a warm worker');
    const engine = await open(exec);
    await engine.start(fixtures.held, null);
    await until(() => exec.warmCount === 0, 'the warm worker taken');
    await new Promise((r) => setTimeout(r, 100)); // past the refill's earliest time: it waits for the turn
    expect(exec.workerCount).toBe(1);
    await engine.shutdown({ graceMs: 0 });
    await exec.close();
    // Well past the refill's deadline (300 ms): the closed pool spawned nothing.
    await new Promise((r) => setTimeout(r, 600));
    expect(exec.workerCount).toBe(0);
    expect(exec.warmCount).toBe(0);
    expect(exec.workerPids).toEqual([]);
  });

  it('a warm worker that dies while a turn holds is replaced by the deadline: the pool does not stay short', async () => {
    const exec = executor({ warmPool: 2, refillMaxDeferMs: 200 });
    await until(() => exec.readyWarmCount === 2, 'two warm workers');
    const before = exec.workerPids;
    const engine = await open(exec);
    const h = await engine.start(fixtures.held, null);
    await until(() => exec.readyWarmCount === 2 && exec.workerCount === 3, 'the refill of the taken worker by its deadline');
    // The refill's worker is warm for sure (the turn holds one of the first two).
    const victim = exec.workerPids.find((pid) => !before.includes(pid))!;
    killQuietly(victim);
    await until(() => exec.readyWarmCount === 2 && exec.workerCount === 3 && !exec.workerPids.includes(victim), 'the dead warm worker replaced while the turn holds');
    await h.cancel('done');
  });

  it('restores the warm pool after a burst that took every warm worker', async () => {
    const exec = executor({ warmPool: 3 });
    await until(() => exec.readyWarmCount === 3, 'three warm workers');
    const warm = exec.workerPids;
    const engine = await open(exec);
    const hs = await Promise.all([1, 2, 3].map((i) => engine.start(fixtures.echo, i)));
    const outs = (await Promise.all(hs.map((h) => h.result()))) as { pid: number }[];
    expect(outs.map((o) => o.pid).sort()).toEqual([...warm].sort());
    await until(() => exec.readyWarmCount === 3 && exec.workerCount === 3, 'the pool restored');
    expect(exec.workerPids.some((p) => warm.includes(p))).toBe(false);
  });

  it('forwards worker stderr tagged with the task id, and re-runs a crashed worker up to the limit', async () => {
    const lines: Record<string, unknown>[] = [];
    const logger: Logger = { ...silentLogger, warn: (_m, f) => lines.push(f ?? {}) };
    const engine = await open(executor({ logger }));
    const h = await engine.start(fixtures.crash, null, { taskId: 'crashy' });
    await expect(h.result()).rejects.toMatchObject({ code: 'TURNLOG_TURN_FAILED' });
    const hist = await h.history();
    const crashes = of(hist, 'WorkerCrashed');
    expect(crashes).toHaveLength(2); // first attempt + maxWorkerCrashes (1) re-run
    expect(crashes.every((c) => c.exitCode === 3 && c.signal === null && c.pid > 0)).toBe(true);
    expect(of(hist, 'TurnStarted').map((e) => e.entryMode)).toEqual(['fresh', 'recovered']);
    expect(of(hist, 'TurnFailed')[0]!.failure.code).toBe('TURNLOG_WORKER_CRASHED');
    expect(lines).toContainEqual(expect.objectContaining({ taskId: 'crashy', stream: 'stderr', line: 'about to crash' }));
  });
});

describe('ProcessExecutor: timeout tiers', () => {
  it('lets a cooperative handler wind down within the grace; it is not killed', async () => {
    const engine = await open(executor());
    const h = await engine.start(fixtures.cooperative, null);
    expect(await h.result()).toMatchObject({ woundDown: true, timeoutExceeded: true });
    const hist = await h.history();
    expect(types(hist)).toContain('TimeoutCancelRequested');
    expect(types(hist)).not.toContain('WorkerKilled');
    expectBefore(hist, 'TimeoutCancelRequested', 'TurnCompleted');
  });

  it('SIGKILLs a runaway one-shot after the grace: WorkerKilled + TurnTimedOut(hard_cap), task timed_out', async () => {
    const engine = await open(executor());
    const h = await engine.start(fixtures.runaway, null);
    await expect(h.result()).rejects.toMatchObject({ code: 'TURNLOG_TURN_TIMED_OUT' });
    const hist = await h.history();
    expect(types(hist).slice(-4)).toEqual(['TimeoutCancelRequested', 'WorkerKilled', 'TurnTimedOut', 'TaskCompleted']);
    const killed = of(hist, 'WorkerKilled')[0]!;
    expect(killed.signal).toBe('SIGKILL');
    expect(alive(killed.pid)).toBe(false);
    expect(of(hist, 'TurnTimedOut')[0]!.cause).toBe('hard_cap');
    expect(of(hist, 'TaskCompleted')[0]!.outcome).toBe('timed_out');
  });

  it('has the marker in the history during the grace, with the worker still running', async () => {
    const exec = executor();
    const engine = await open(exec);
    const h = await engine.start(fixtures.runawayLongGrace, null);
    await until(async () => types(await h.history()).includes('TimeoutCancelRequested'), 'the marker');
    const hist = await h.history();
    expect(types(hist)).not.toContain('WorkerKilled');
    expect(types(hist)).not.toContain('TurnTimedOut');
    expect((await h.describe()).status).toBe('in_progress');
    expect(exec.workerPids).toHaveLength(1);
    expect(alive(exec.workerPids[0]!)).toBe(true);
  });

  it('drains a multi-turn runaway to the queued next input', async () => {
    const engine = await open(executor());
    const h = await engine.start(fixtures.runawayChat, 'hang', { taskId: 'chat-drain' });
    const b = await h.send('B');
    const r = await engine.task('chat-drain').turnResult(b);
    expect(r).toMatchObject({ turn: 2, status: 'suspended', output: { seen: 'B' } });
    const hist = await h.history();
    expect(of(hist, 'TurnTimedOut')).toMatchObject([{ turn: 1, cause: 'hard_cap' }]);
    expect(of(hist, 'WorkerKilled')).toMatchObject([{ turn: 1, signal: 'SIGKILL' }]);
    expect(of(hist, 'TurnStarted').map((e) => [e.turn, e.entryMode, e.inputIds.length])).toEqual([
      [1, 'fresh', 1],
      [2, 'resumed', 1],
    ]);
  });

  it('suspends a multi-turn runaway with no queued input', async () => {
    const engine = await open(executor());
    const h = await engine.start(fixtures.runawayChat, 'hang', { taskId: 'chat-suspend' });
    expect(await h.nextTurn()).toMatchObject({ turn: 1, status: 'timed_out' });
    expect((await h.describe()).status).toBe('suspended');
    expect(types(await h.history()).slice(-2)).toEqual(['WorkerKilled', 'TurnTimedOut']);
  });

  it('keeps an inline task and another worker running through a kill', async () => {
    const exec = executor();
    const engine = await open(exec);
    const runaway = await engine.start(fixtures.runaway, null);
    const slow = await engine.start(fixtures.slow, 1500);
    const inline = await engine.start(inlineSlow, 1500);
    await expect(runaway.result()).rejects.toMatchObject({ code: 'TURNLOG_TURN_TIMED_OUT' });
    expect(await slow.result()).toMatchObject({ done: true });
    expect(await inline.result()).toBe('inline-ok');
    expect(types(await slow.history())).not.toContain('WorkerKilled');
    expect(types(await runaway.history())).toContain('WorkerKilled');
    // The engine still takes new work.
    expect(await (await engine.start(fixtures.echo, 'after')).result()).toMatchObject({ echo: 'after' });
  });
});

describe('ProcessExecutor: worker reuse', () => {
  it('keeps one pid across the turns of a task', async () => {
    const exec = executor({ reuseWorkers: true });
    const engine = await open(exec);
    const h = await engine.start(fixtures.pids, 'a', { taskId: 'reuse-1' });
    const pids: number[] = [];
    pids.push(((await h.nextTurn()).output as { pid: number }).pid);
    for (const input of ['b', 'c']) {
      const id = await h.send(input);
      pids.push(((await h.turnResult(id)).output as { pid: number }).pid);
    }
    expect(new Set(pids).size).toBe(1);
    expect(exec.parkedWorkers.get('reuse-1')).toBe(pids[0]);
  });

  it('respawns a new pid after a kill and never reuses the killed worker', async () => {
    const exec = executor({ reuseWorkers: true });
    const engine = await open(exec);
    const h = await engine.start(fixtures.pids, 'a', { taskId: 'reuse-kill' });
    const first = ((await h.nextTurn()).output as { pid: number }).pid;
    const hang = await h.send('hang');
    expect(await h.turnResult(hang)).toMatchObject({ status: 'timed_out' });
    expect(of(await h.history(), 'WorkerKilled')[0]!.pid).toBe(first);
    const next = await h.send('b');
    const second = ((await h.turnResult(next)).output as { pid: number }).pid;
    expect(second).not.toBe(first);
    expect(alive(first)).toBe(false);
  });

  it('evicts an idle reused worker after the idle TTL', async () => {
    const exec = executor({ reuseWorkers: true, idleTtlMs: 50 });
    const engine = await open(exec);
    const h = await engine.start(fixtures.pids, 'a', { taskId: 'reuse-ttl' });
    const first = ((await h.nextTurn()).output as { pid: number }).pid;
    await until(() => !exec.parkedWorkers.has('reuse-ttl') && !alive(first), 'the idle worker to exit');
    const next = await h.send('b');
    expect(((await h.turnResult(next)).output as { pid: number }).pid).not.toBe(first);
  });
});

describe('ProcessExecutor: broken workers', () => {
  it.each(['oversized', 'undecodable', 'unexpected'])('kills a worker that writes a %s frame; the turn fails with TURNLOG_WORKER_PROTOCOL', async (mode) => {
    const exec = executor();
    const engine = await open(exec);
    const h = await engine.start(fixtures.garbage, mode);
    await expect(h.result()).rejects.toMatchObject({ code: 'TURNLOG_TURN_FAILED' });
    const failed = of(await h.history(), 'TurnFailed')[0]!;
    expect(failed.failure.code).toBe('TURNLOG_WORKER_PROTOCOL');
    expect(failed.failure.message).toMatch(/Worker protocol violation/);
    await until(() => exec.workerCount === 0 && exec.workerPids.length === 0, 'the broken worker to be gone');
    expect(await (await engine.start(fixtures.echo, mode)).result()).toMatchObject({ echo: mode });
  });

  // Issue 10.9: text on fd 3 used to hang the turn until its timeout (1 h by default).
  it.each([
    ['text', /not a frame \(as text: "hello\\n"/],
    ['text-tag', /no complete frame for \d+ ms/],
    ['spin', /no complete frame for \d+ ms/],
  ])('kills a worker that writes %s long before the turn timeout: TURNLOG_WORKER_PROTOCOL', async (mode, message) => {
    const exec = executor();
    const engine = await open(exec);
    const h = await engine.start(fixtures.garbage, mode);
    await expect(h.result()).rejects.toMatchObject({ code: 'TURNLOG_TURN_FAILED' });
    const hist = await h.history();
    expect(types(hist)).not.toContain('TurnTimedOut');
    const failed = of(hist, 'TurnFailed')[0]!;
    expect(failed.failure.code).toBe('TURNLOG_WORKER_PROTOCOL');
    expect(failed.failure.message).toMatch(message);
    await until(() => exec.workerCount === 0, 'the broken worker to be gone');
  });

  it('keeps a quiet but healthy worker: heartbeats count as frames', async () => {
    const engine = await open(executor({ heartbeatTimeoutMs: 2000 }));
    expect(await (await engine.start(fixtures.slow, 4500)).result()).toMatchObject({ done: true });
  });

  it('does not kill a healthy worker when only a ManualClock jumps past the heartbeat timeout', async () => {
    const exec = executor({ warmPool: 1 });
    await until(() => exec.readyWarmCount === 1, 'a ready warm worker');
    const t = await createTestEngine({ workflows: ALL, executors: { process: exec } });
    cleanups.push(() => t.close());
    const h = await t.engine.start(fixtures.slow, 2500);
    // A real heartbeat has come in by now, so the liveness check is armed on the manual clock.
    await new Promise((r) => setTimeout(r, 1200));
    await t.advance(10_000);
    expect(await h.result()).toMatchObject({ done: true });
  });

  it('refuses a heartbeat timeout shorter than two heartbeats', () => {
    expect(() => new ProcessExecutor({ workflowsModule: MODULE, heartbeatTimeoutMs: 500 })).toThrow(/heartbeatTimeoutMs must be 0 \(off\) or ≥ 2000/);
  });

  it('ctx.sleep in a worker is recorded; after the worker dies mid-sleep, attempt 2 wakes at the recorded fire time', async () => {
    const engine = await open(executor());
    const h = await engine.start(fixtures.sleepThenCrash, null);
    const out = (await h.result()) as { attempt: number; wokeAt: number };
    const events = await engine.history(h.taskId);
    const timers = events.filter((e) => e.type === 'TimerStarted');
    expect(timers).toHaveLength(1);
    expect(events.some((e) => e.type === 'WorkerCrashed')).toBe(true);
    expect(out.attempt).toBe(2);
    expect(out.wokeAt).toBeGreaterThanOrEqual(timers[0]!.type === 'TimerStarted' ? timers[0]!.fireAt : Infinity);
  });

  it('ctx.startChild and child.result() in a worker: after the worker dies mid-await, attempt 2 finds the same children and records each outcome once', async () => {
    const engine = await open(executor());
    const h = await engine.start(fixtures.childParentThenCrash, null, { taskId: 'iso-parent' });
    expect(await h.result()).toEqual({ attempt: 2, notes: ['notes on wind', 'notes on solar'] });
    const events = await engine.history('iso-parent');
    expect(of(events, 'WorkerCrashed')).toMatchObject([{ attempt: 1, exitCode: 3 }]);
    expect(of(events, 'ChildStarted')).toMatchObject([
      { seq: 1, childId: 'iso-parent/c1.1', workflow: 'iso-child-researcher', detached: false },
      { seq: 2, childId: 'iso-parent/c1.2', workflow: 'iso-child-researcher', detached: true },
    ]);
    expect(of(events, 'ChildEnded')).toMatchObject([
      { seq: 3, childId: 'iso-parent/c1.1', status: 'completed' },
      { seq: 4, childId: 'iso-parent/c1.2', status: 'completed' },
    ]);
    expect((await engine.history('iso-parent/c1.2'))[0]).toMatchObject({ type: 'TaskCreated', parent: { taskId: 'iso-parent', turn: 1, seq: 2, detached: true } });
    expect((await engine.list()).tasks.map((t) => t.taskId).sort()).toEqual(['iso-parent', 'iso-parent/c1.1', 'iso-parent/c1.2']);
  });

  it('replays a step recorded before a crash instead of running it again', async () => {
    const engine = await open(executor());
    const h = await engine.start(fixtures.stepThenCrash, null);
    const out = (await h.result()) as { charged: { by: number; attempt: number }; attempt: number; pid: number };
    expect(out.attempt).toBe(2);
    expect(out.charged.attempt).toBe(1);
    expect(out.charged.by).not.toBe(out.pid);
    const hist = await h.history();
    expect(of(hist, 'StepCompleted')).toHaveLength(1);
    expect(of(hist, 'WorkerCrashed')).toMatchObject([{ attempt: 1, exitCode: 3 }]);
  });

  it('records a patch marker from a worker; the attempt after a crash replays it (new branch, one marker)', async () => {
    const engine = await open(executor());
    const h = await engine.start(fixtures.patchThenCrash, null);
    expect(await h.result()).toEqual({ v2: true, charged: { attempt: 2 }, again: true });
    const hist = await h.history();
    expect(of(hist, 'PatchMarked')).toMatchObject([{ turn: 1, seq: 1, patchId: 'charge-v2', deprecated: false }]);
    expect(of(hist, 'StepCompleted')).toMatchObject([{ seq: 2, name: 'charge-v2', attempt: 2 }]);
    expectBefore(hist, 'PatchMarked', 'WorkerCrashed');
  });

  it('keeps a step recorded before a kill', async () => {
    const engine = await open(executor());
    const h = await engine.start(fixtures.stepThenHang, null);
    await expect(h.result()).rejects.toMatchObject({ code: 'TURNLOG_TURN_TIMED_OUT' });
    const hist = await h.history();
    expectBefore(hist, 'StepCompleted', 'WorkerKilled');
    const step = of(hist, 'StepCompleted')[0]!;
    const by = (JSON.parse(new TextDecoder().decode(step.result!.data)) as { by: number }).by;
    expect(by).toBe(of(hist, 'WorkerKilled')[0]!.pid);
  });
});

// auto: on Linux with util-linux setpriv, workers get a parent-death signal from the kernel;
// thread: the watchdog thread every worker runs elsewhere (forced here so both stay tested).
describe.each(['auto', 'thread'])('ProcessExecutor: engine crash (orphan watch: %s)', (watch) => {
  let host: ChildProcess | undefined;
  afterEach(() => {
    if (host?.pid) killQuietly(host.pid);
    host = undefined;
  });

  it('finalizes a turn whose engine died in the grace (not re-run); its orphaned workers exit', async () => {
    const dir = await makeTmpDir('turnlog-iso-');
    cleanups.push(dir.remove);
    const env = watch === 'thread' ? { ...process.env, TURNLOG_ORPHAN_WATCH: 'thread' } : process.env;
    host = spawn(process.execPath, [`${DIST}children/engine-host.js`, dir.path], { stdio: ['ignore', 'pipe', 'inherit'], env });
    const line = await new Promise<string>((resolve, reject) => {
      createInterface({ input: host!.stdout! }).once('line', resolve);
      host!.once('exit', (code) => reject(new Error(`engine host exited (${code}) before the marker`)));
    });
    const { workerPids } = JSON.parse(line) as { workerPids: number[] };
    cleanups.push(() => workerPids.forEach(killQuietly));
    expect(workerPids.length).toBeGreaterThanOrEqual(2); // the runaway and a warm one
    expect(workerPids.every(alive)).toBe(true);
    host.kill('SIGKILL');
    await new Promise((r) => host!.once('exit', r));
    // The busy orphan (event loop blocked) and the idle warm one both go away on their own.
    await until(() => !workerPids.some(alive), 'orphaned workers to exit');

    // Reopen the store: recovery finds the marker and finalizes the turn instead of re-running it.
    const engine = await Engine.open({ store: dir.path, workflows: ALL, executors: { process: executor() }, logger: silentLogger, scanIntervalMs: 0 });
    cleanups.push(() => engine.shutdown({ graceMs: 100 }));
    await until(async () => types(await engine.history('t1')).includes('TaskCompleted'), 'recovery to finalize t1');
    const hist = await engine.history('t1');
    expect(of(hist, 'TurnStarted')).toHaveLength(1);
    expect(of(hist, 'TurnTimedOut')).toMatchObject([{ turn: 1, cause: 'recovery_marker' }]);
    expect(of(hist, 'TaskCompleted')).toMatchObject([{ outcome: 'timed_out' }]);
    expect(types(hist)).not.toContain('WorkerKilled');
  });
});

describe('ProcessExecutor: set-up checked at Engine.open (issue 10.11)', () => {
  async function refused(options: Partial<ProcessExecutorOptions>): Promise<{ err: unknown; dir: string }> {
    const dir = await makeTmpDir('turnlog-setup-');
    cleanups.push(dir.remove);
    const store = join(dir.path, 'store');
    const err = await Engine.open({ store, workflows: ALL, executors: { process: executor(options) }, logger: silentLogger }).then(
      async (e) => {
        await e.shutdown({ graceMs: 0 });
        return undefined;
      },
      (e: unknown) => e,
    );
    // Nothing written: the store was never opened.
    expect(existsSync(store)).toBe(false);
    return { err, dir: store };
  }

  it('refuses a relative path that does not resolve against the working directory, naming it', async () => {
    const { err } = await refused({ workflowsModule: 'no/such/workflows.js' });
    expect(err).toMatchObject({ code: 'TURNLOG_WORKFLOWS_MODULE' });
    expect((err as Error).message).toContain(join(process.cwd(), 'no/such/workflows.js'));
    expect((err as Error).message).toMatch(/resolved against the working directory.*import\.meta\.url/s);
  });

  it('accepts a relative path, resolved against the working directory', async () => {
    const engine = await open(executor({ workflowsModule: relative(process.cwd(), MODULE) }));
    expect(await (await engine.start(fixtures.echo, 'rel')).result()).toMatchObject({ echo: 'rel' });
  });

  it('refuses a module that does not export a workflow the engine runs on it', async () => {
    const { err } = await refused({ workflowsModule: `${DIST}workflows/boundary.js` });
    expect(err).toMatchObject({ code: 'TURNLOG_WORKFLOWS_MODULE' });
    expect((err as Error).message).toMatch(/does not export .*iso-echo.*\(it exports iso-boundary\)/);
    expect((err as Error).message).toContain('boundary.js');
  });

  it('refuses a module that cannot be imported', async () => {
    const { err } = await refused({ workflowsModule: `${DIST}children/hold-store-lock.mjs.missing` });
    expect(err).toMatchObject({ code: 'TURNLOG_WORKFLOWS_MODULE' });
  });

  it('refuses a single-file app (the module is the entry script) before importing it', async () => {
    const dir = await makeTmpDir('turnlog-single-');
    cleanups.push(dir.remove);
    const store = join(dir.path, 'store');
    const { stdout } = await promisify(execFile)(process.execPath, [`${DIST}children/single-file-app.js`, store], { timeout: 30_000 });
    const [code, message] = stdout.split('\n');
    expect(code).toBe('TURNLOG_WORKFLOWS_MODULE');
    expect(message).toMatch(/single-file-hello .*entry script.*Move the workflows into a module of their own/);
    expect(existsSync(store)).toBe(false);
  });

  it('accepts a module namespace as the workflow list (Engine.open and createTestEngine)', async () => {
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: fixtures, executors: { process: executor() }, logger: silentLogger, scanIntervalMs: 0 });
    cleanups.push(() => engine.shutdown({ graceMs: 100 }));
    expect(engine.workflows.get('iso-echo')).toBe(fixtures.echo);
    expect(await (await engine.start(fixtures.echo, 'ns')).result()).toMatchObject({ echo: 'ns' });
    // Non-workflow exports (burstLine) are ignored.
    const t = await createTestEngine({ workflows: burstModule, executors: { process: executor() } });
    cleanups.push(() => t.close());
    expect([...t.engine.workflows.keys()]).toEqual(['iso-burst']);
  });

  it('refuses a namespace without workflows, and a list item that is not a workflow', async () => {
    await expect(Engine.open({ store: new MemoryHistoryStore(), workflows: { helper: () => 1 }, logger: silentLogger })).rejects.toMatchObject({
      code: 'TURNLOG_INVALID_ARGUMENT',
      message: expect.stringMatching(/exports no workflows \(exports: helper\)/),
    });
    await expect(Engine.open({ store: new MemoryHistoryStore(), workflows: [fixtures.echo, undefined as never], logger: silentLogger })).rejects.toMatchObject({
      code: 'TURNLOG_INVALID_ARGUMENT',
      message: expect.stringMatching(/workflows\[1\] is not a workflow/),
    });
  });
});
