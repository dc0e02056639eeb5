// Worker processes as process groups (issue 10.8): whatever a handler starts dies with its worker.
// Real workers, real `sleep` children, /proc scans by process group; bounded waits, no timing asserts.
// Workers import the compiled fixtures (dist/test/fixtures/workflows): build first.
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { ProcessExecutor, type ProcessExecutorOptions } from '../../src/executor/process-executor.js';
import { silentLogger, type Logger } from '../../src/logger.js';
import type { HistoryEvent } from '../../src/history/events.js';
import * as fixtures from '../fixtures/workflows/index.js';
import { burstLine } from '../fixtures/workflows/burst.js';
import { groupMembers, killQuietly, running, until } from '../helpers/processes.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const DIST = fileURLToPath(new URL('../../dist/test/fixtures/', import.meta.url));
const MODULE = `${DIST}workflows/index.js`;
const ALL = Object.values(fixtures);
const LINUX = process.platform === 'linux';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Kids announced by `spawned <pid> <pid>` on a worker's stderr, by worker pid. */
function kidsLogger(): { logger: Logger; kids: Map<number, number[]> } {
  const kids = new Map<number, number[]>();
  const logger: Logger = {
    ...silentLogger,
    warn: (_m, f) => {
      const m = /^spawned (\d+) (\d+)$/.exec(String(f?.['line'] ?? ''));
      if (m) {
        const both = [Number(m[1]), Number(m[2])];
        kids.set(Number(f!['pid']), both);
        cleanups.push(() => both.forEach(killQuietly));
      }
    },
  };
  return { logger, kids };
}

function executor(options: Partial<ProcessExecutorOptions> = {}): ProcessExecutor {
  const exec = new ProcessExecutor({ workflowsModule: MODULE, execArgv: [], logger: silentLogger, ...options });
  cleanups.push(async () => {
    const pids = exec.workerPids;
    await exec.close();
    for (const pid of pids) killQuietly(pid);
  });
  return exec;
}

async function open(exec: ProcessExecutor): Promise<Engine> {
  const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: ALL, executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0 });
  cleanups.push(() => engine.shutdown({ graceMs: 100 }));
  return engine;
}

const of = <T extends HistoryEvent['type']>(h: HistoryEvent[], type: T) => h.filter((e): e is Extract<HistoryEvent, { type: T }> => e.type === type);

/** The worker's group (pgid = worker pid) and the kids it announced are all gone, in a bounded wait. */
async function expectGroupGone(workerPid: number, kids: number[] | undefined): Promise<void> {
  expect(kids).toHaveLength(2);
  await until(() => groupMembers(workerPid).length === 0 && !kids!.some(running), `group ${workerPid} to be empty`, 10_000);
}

describe.runIf(LINUX)('worker process groups: a handler\'s children die with the worker', () => {
  it('hard cap: the SIGKILL takes the whole group', async () => {
    const { logger, kids } = kidsLogger();
    const engine = await open(executor({ logger }));
    const h = await engine.start(fixtures.spawner, null);
    await expect(h.result()).rejects.toMatchObject({ code: 'TURNLOG_TURN_TIMED_OUT' });
    const pid = of(await h.history(), 'WorkerKilled')[0]!.pid;
    await expectGroupGone(pid, kids.get(pid));
  });

  it('crash: a worker that exits leaves no children behind (each attempt)', async () => {
    const { logger, kids } = kidsLogger();
    const engine = await open(executor({ logger }));
    const h = await engine.start(fixtures.spawnerCrash, null);
    await expect(h.result()).rejects.toMatchObject({ code: 'TURNLOG_TURN_FAILED' });
    const crashes = of(await h.history(), 'WorkerCrashed');
    expect(crashes).toHaveLength(2);
    for (const c of crashes) await expectGroupGone(c.pid, kids.get(c.pid));
  });

  it('idle eviction: a parked worker and its children go at the idle TTL', async () => {
    const { logger, kids } = kidsLogger();
    const exec = executor({ logger, reuseWorkers: true, idleTtlMs: 50 });
    const engine = await open(exec);
    const h = await engine.start(fixtures.spawnerChat, 'suspend', { taskId: 'idle' });
    const pid = ((await h.nextTurn()).output as { pid: number }).pid;
    await expectGroupGone(pid, kids.get(pid));
  });

  it('shutdown: a busy worker and its children are gone once the executor closed', async () => {
    const { logger, kids } = kidsLogger();
    const exec = executor({ logger });
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: ALL, executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0 });
    await engine.start(fixtures.spawnerChat, 'hang', { taskId: 'busy' });
    await until(() => kids.size === 1, 'the handler to start its children');
    const [pid, both] = [...kids][0]!;
    await engine.shutdown({ graceMs: 100 });
    await exec.close();
    await expectGroupGone(pid, both);
  });
});

describe.runIf(LINUX).each(['auto', 'thread'])('worker process groups: engine SIGKILLed (orphan watch: %s)', (watch) => {
  let host: ChildProcess | undefined;
  afterEach(() => {
    if (host?.pid) killQuietly(host.pid);
    host = undefined;
  });

  it('kills the busy worker\'s children too', async () => {
    const dir = await makeTmpDir('turnlog-pg-');
    cleanups.push(dir.remove);
    const env = watch === 'thread' ? { ...process.env, TURNLOG_ORPHAN_WATCH: 'thread' } : process.env;
    host = spawn(process.execPath, [`${DIST}children/engine-host.js`, dir.path, 'spawner'], { stdio: ['ignore', 'pipe', 'inherit'], env });
    const line = await new Promise<string>((resolve, reject) => {
      createInterface({ input: host!.stdout! }).once('line', resolve);
      host!.once('exit', (code) => reject(new Error(`engine host exited (${code}) before its line`)));
    });
    const { workerPids, kids } = JSON.parse(line) as { workerPids: number[]; kids: number[] };
    cleanups.push(() => [...workerPids, ...kids].forEach(killQuietly));
    expect(kids.every(running)).toBe(true);
    host.kill('SIGKILL');
    await new Promise((r) => host!.once('exit', r));
    for (const pid of workerPids) await until(() => groupMembers(pid).length === 0, `group ${pid} to be empty`, 10_000);
    expect(kids.some(running)).toBe(false);
  });
});

describe('worker output is drained before the worker counts as gone (issue 10.10)', () => {
  it('forwards every line of an 8 MiB stdout and a 1 MiB stderr burst written just before the turn ends', async () => {
    const got = { stdout: [] as string[], stderr: [] as string[] };
    const logger: Logger = {
      ...silentLogger,
      info: (_m, f) => void got.stdout.push(String(f?.['line'])),
      warn: (_m, f) => void got.stderr.push(String(f?.['line'])),
    };
    const exec = executor({ logger });
    const engine = await open(exec);
    const lines = { stdout: 8192, stderr: 1024 };
    const h = await engine.start(fixtures.burst, lines);
    const { pid } = (await h.result()) as { pid: number };
    // close() resolves once every worker exited and its pipes reached EOF.
    await exec.close();
    expect(running(pid)).toBe(false);
    expect(got.stdout).toHaveLength(lines.stdout);
    expect(got.stderr).toHaveLength(lines.stderr);
    expect(got.stdout.every((l, i) => l === burstLine('out', i))).toBe(true);
    expect(got.stderr.every((l, i) => l === burstLine('err', i))).toBe(true);
  });
});
