/**
 * Executor benchmark (issue 5): per-turn overhead of a cold spawned worker, a pre-warmed one
 * and a reused one, beside inline turns and a bare `node` spawn-to-first-message measured in
 * the same run; hard-kill precision and kill → terminal event in the store.
 * Targets: reused/pre-warmed ≤ 1 ms over inline (median); cold ≤ 1.3× bare spawn; kill precision ≤ 10 ms.
 * The pre-warmed row starts each turn after a quiet spell (the refill's boot): an inline one-shot
 * under the same conditions is printed beside it (docs/decisions.md, "What the pre-warmed turn waits for").
 * Workers load the compiled fixtures (dist/test/fixtures/workflows), so run after `npm run build`.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Engine } from '../src/runtime/engine.js';
import { silentLogger } from '../src/logger.js';
import { MemoryHistoryStore } from '../src/store/memory-store.js';
import { ProcessExecutor } from '../src/executor/process-executor.js';
import type { AttemptHandle, Executor } from '../src/executor/executor.js';
import { defineWorkflow } from '../src/workflow/define-workflow.js';
import type { HistoryEvent } from '../src/history/events.js';
import * as fixtures from '../test/fixtures/workflows/index.js';

const MODULE = fileURLToPath(new URL('../test/fixtures/workflows/index.js', import.meta.url));
const now = () => performance.now();
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const p90 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.9)]!;
const fmt = (ms: number) => `${ms.toFixed(3)} ms`;

const inlineEcho = defineWorkflow({ name: 'bench-inline-echo', turn: async (_ctx, input: unknown) => ({ echo: input, pid: process.pid }) });
const inlineChat = defineWorkflow({
  name: 'bench-inline-chat',
  kind: 'multi-turn',
  turn: async (ctx, input: string) => ctx.suspend('next', { pid: process.pid, input }),
});
const WORKFLOWS = [...Object.values(fixtures), inlineEcho, inlineChat];

async function open(exec: Executor): Promise<Engine> {
  return Engine.open({ store: new MemoryHistoryStore(), workflows: WORKFLOWS, executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0 });
}

/** One-shot turns, one task each: start → result. */
async function oneShots(engine: Engine, wf: typeof fixtures.echo, n: number, before?: () => Promise<void>): Promise<number[]> {
  const xs: number[] = [];
  for (let i = 0; i < n; i++) {
    await before?.();
    const t0 = now();
    await (await engine.start(wf, i)).result();
    xs.push(now() - t0);
  }
  return xs;
}

/** Turns of one multi-turn task: send → turnResult. */
async function chatTurns(engine: Engine, wf: typeof fixtures.pids, n: number): Promise<number[]> {
  const h = await engine.start(wf, 'warm-up');
  await h.nextTurn();
  const xs: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = now();
    const id = await h.send(`m${i}`);
    await h.turnResult(id);
    xs.push(now() - t0);
  }
  return xs;
}

/**
 * A bare `node` process writing one byte to fd 3: spawn → first message. Same stdio as a
 * worker (stdout, stderr and the protocol pipe all piped), so the baseline pays for the same
 * pipes. Resolves once the process has exited, so its teardown does not overlap what is
 * measured next.
 */
/** A bare child writing one byte to fd 3; `esm` boots Node's ES module loader first, as a worker must. */
function bareSpawn(esm = false): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = now();
    let ms = 0;
    const args = esm
      ? ['--input-type=module', '-e', "import { writeSync } from 'node:fs'; writeSync(3, 'x')"]
      : ['-e', "require('fs').writeSync(3, 'x')"];
    const c = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe', 'pipe'] });
    c.stdout!.resume();
    c.stderr!.resume();
    c.stdio[3]!.once('data', () => (ms = now() - t0));
    c.once('error', reject);
    c.once('exit', () => resolve(ms));
  });
}

async function waitFor(cond: () => boolean): Promise<void> {
  while (!cond()) await new Promise((r) => setTimeout(r, 1));
}

/** Wraps an executor to timestamp kill() calls (wall clock, like history times). */
function killTimer(inner: Executor): { exec: Executor; kills: number[] } {
  const kills: number[] = [];
  const exec: Executor = {
    kind: inner.kind,
    close: () => inner.close(),
    async start(spec, host) {
      const h = await inner.start(spec, host);
      const kill = h.kill;
      const wrapped: AttemptHandle = {
        get outcome() {
          return h.outcome;
        },
        get pid() {
          return h.pid;
        },
        cancel: (k, r) => h.cancel(k, r),
        fence: (d) => h.fence(d),
        kill: kill
          ? (reason) => {
              kills.push(Date.now());
              kill(reason);
            }
          : undefined,
      };
      return wrapped;
    },
  };
  return { exec, kills };
}

export async function run(): Promise<void> {
  // Inline baseline.
  const inline = await open(new ProcessExecutor({ workflowsModule: MODULE, execArgv: [], logger: silentLogger }));
  await oneShots(inline, inlineEcho as never, 50);
  const inlineOne = median(await oneShots(inline, inlineEcho as never, 300));
  const inlineChatMs = median(await chatTurns(inline, inlineChat as never, 300));
  await inline.shutdown();

  // Reused worker: one task's turns on one warm process.
  const reuseExec = new ProcessExecutor({ workflowsModule: MODULE, execArgv: [], reuseWorkers: true, logger: silentLogger });
  const reuse = await open(reuseExec);
  await chatTurns(reuse, fixtures.pids, 50);
  const reused = await chatTurns(reuse, fixtures.pids, 300);
  await reuse.shutdown();

  // Pre-warmed: each one-shot takes a worker that already loaded the module and finished warming
  // up (a warm-pool worker says Ready only then), after the previous one has exited.
  const warmExec = new ProcessExecutor({ workflowsModule: MODULE, execArgv: [], warmPool: 1, logger: silentLogger });
  const warm = await open(warmExec);
  const warmReady = () => waitFor(() => warmExec.readyWarmCount === 1 && warmExec.workerCount === 1);
  const warmed = await oneShots(warm, fixtures.echo, 40, warmReady);

  // The same two kinds of turn under the same conditions: each reused turn right after a pre-warmed
  // one, so both follow the warm pool's refill (a Node process booting beside the engine), where the
  // rows above run reused turns back to back (docs/isolation.md, "Measured").
  const pairExec = new ProcessExecutor({ workflowsModule: MODULE, execArgv: [], reuseWorkers: true, logger: silentLogger });
  const pair = await open(pairExec);
  const chat = await pair.start(fixtures.pids, 'warm-up');
  await chat.nextTurn();
  const warmedPaired: number[] = [];
  const reusedPaired: number[] = [];
  for (let i = 0; i < 43; i++) {
    const w = await oneShots(warm, fixtures.echo, 1, warmReady);
    const t0 = now();
    await chat.turnResult(await chat.send(`p${i}`));
    if (i >= 3) {
      warmedPaired.push(...w);
      reusedPaired.push(now() - t0);
    }
  }
  await pair.shutdown();
  // An inline one-shot after the pre-warmed row's quiet spell: each starts as a refill says Ready
  // (a pre-warmed one-shot, not timed, took the warm worker before it).
  const inlineMatched: number[] = [];
  for (let i = 0; i < 43; i++) {
    await oneShots(warm, fixtures.echo, 1, warmReady);
    const xs = await oneShots(warm, inlineEcho as never, 1, warmReady);
    if (i >= 3) inlineMatched.push(...xs);
  }
  await warm.shutdown();

  // Cold: one process start + its first turn, vs a bare node spawn, interleaved so both see the
  // same machine load; each starts once the previous process has exited.
  const coldExec = new ProcessExecutor({ workflowsModule: MODULE, execArgv: [], logger: silentLogger });
  const cold = await open(coldExec);
  const colds: number[] = [];
  const bares: number[] = [];
  const esmBares: number[] = [];
  const coldIdle = () => waitFor(() => coldExec.workerCount === 0 && coldExec.workerPids.length === 0);
  await bareSpawn();
  await oneShots(cold, fixtures.echo, 2, coldIdle);
  for (let i = 0; i < 20; i++) {
    bares.push(await bareSpawn());
    esmBares.push(await bareSpawn(true));
    colds.push(...(await oneShots(cold, fixtures.echo, 1, coldIdle)));
  }
  await cold.shutdown();

  // Hard-kill precision and kill → terminal event in the store.
  const { exec: killExec, kills } = killTimer(new ProcessExecutor({ workflowsModule: MODULE, execArgv: [], warmPool: 1, logger: silentLogger }));
  const store = new MemoryHistoryStore();
  const terminals: number[] = [];
  const append = store.append.bind(store);
  store.append = async (taskId, events, options) => {
    const r = await append(taskId, events, options);
    if (events.some((e: HistoryEvent) => e.type === 'TurnTimedOut')) terminals.push(Date.now());
    return r;
  };
  const killer = await Engine.open({ store, workflows: WORKFLOWS, executors: { process: killExec }, logger: silentLogger, scanIntervalMs: 0 });
  const precision: number[] = [];
  const killToTerminal: number[] = [];
  for (let i = 0; i < 10; i++) {
    const h = await killer.start(fixtures.runaway, null);
    await h.result().catch(() => undefined);
    const hist = await h.history();
    const started = hist.find((e) => e.type === 'TurnStarted') as Extract<HistoryEvent, { type: 'TurnStarted' }>;
    const hardCapAt = started.deadline + fixtures.runaway.policy.graceMs;
    precision.push(kills[i]! - hardCapAt);
    killToTerminal.push(terminals[i]! - kills[i]!);
  }
  await killer.shutdown();

  const reusedMs = median(reused);
  const warmMs = median(warmed);
  const coldMs = median(colds);
  const bareMs = median(bares);
  console.log(`inline one-shot turn          ${fmt(inlineOne)} (median of 300)`);
  console.log(`inline multi-turn turn        ${fmt(inlineChatMs)} (median of 300)`);
  console.log(`reused worker turn            ${fmt(reusedMs)}  → +${fmt(reusedMs - inlineChatMs)} over inline (target ≤ 1 ms), p90 ${fmt(p90(reused))}`);
  console.log(`pre-warmed worker turn        ${fmt(warmMs)}  → +${fmt(warmMs - inlineOne)} over inline (target ≤ 1 ms), p90 ${fmt(p90(warmed))}`);
  console.log(`  interleaved: pre-warmed ${fmt(median(warmedPaired))}, reused ${fmt(median(reusedPaired))} (medians of 40 pairs, each reused turn right after a pre-warmed one)`);
  const matched = median(inlineMatched);
  console.log(`  after the same quiet spell: inline one-shot ${fmt(matched)} (median of 40, each started as a refill said Ready) → pre-warmed +${fmt(warmMs - matched)} over it`);
  console.log(`cold worker turn              ${fmt(coldMs)}  → ${(coldMs / bareMs).toFixed(2)}× bare spawn (target ≤ 1.3×)`);
  console.log(`bare node spawn → 1st message ${fmt(bareMs)}`);
  const esmMs = median(esmBares);
  console.log(`bare ESM spawn → 1st message  ${fmt(esmMs)}  (the ES module loader a worker needs for an ESM workflows module; cold worker = ${(coldMs / esmMs).toFixed(2)}× this)`);
  console.log(`kill precision (kill − (deadline + grace))  median ${fmt(median(precision))}, max ${fmt(Math.max(...precision))} (target ≤ 10 ms)`);
  console.log(`kill → TurnTimedOut in store                median ${fmt(median(killToTerminal))}, max ${fmt(Math.max(...killToTerminal))}`);
}
