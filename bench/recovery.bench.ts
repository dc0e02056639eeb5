/**
 * Recovery at scale (issue #16 item 3). A LevelDB store holds what an engine SIGKILLed mid-turn
 * leaves: N one-step tasks, each with its turn started (lease claimed, TurnStarted) and nothing
 * after. A new engine opens it. Printed, in one run:
 * - how long `Engine.open` takes to return, and how long until every task is decided and its turn
 *   running again (`engine.recovered()`), against the same engine recovering one task at a time
 *   (`recoveryConcurrency: 1`, the old sequential pass) on the same store — goal: all 10,000
 *   within 1 s of open;
 * - one task of 100,000 events (snapshot at the engine's cadence + tail) against one of 100
 *   events — goal: ≤ 2×.
 */
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { HistoryEvent } from '../src/history/events.js';
import type { TaskState } from '../src/history/state.js';
import { encodeState } from '../src/history/state-codec.js';
import { fold } from '../src/replay/fold.js';
import { snapshotDue } from '../src/runtime/appender.js';
import { Engine } from '../src/runtime/engine.js';
import { silentLogger } from '../src/logger.js';
import { LevelHistoryStore } from '../src/store/level-store.js';
import { historyBuilder } from '../src/testing/history-builder.js';
import { defineWorkflow } from '../src/workflow/define-workflow.js';
import { benchHistory } from './replay.bench.js';

const oneStep = defineWorkflow({
  name: 'one-step',
  turn: async (ctx, n: number) => ctx.step('double', () => n * 2),
});
const bench = defineWorkflow({
  name: 'bench',
  kind: 'multi-turn',
  turn: async (ctx, _q: unknown) => ctx.suspend('waiting', await ctx.step('answer', () => 42)),
});

/** Writes N one-step tasks left mid-turn by a dead engine (TurnStarted, no outcome). */
async function crashedStore(n: number): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'turnlog-recovery-bench-'));
  const store = new LevelHistoryStore(dir, { sync: false });
  await store.open();
  const start = Date.now();
  const writes: Promise<unknown>[] = [];
  for (let i = 0; i < n; i++) {
    const id = `task-${String(i).padStart(6, '0')}`;
    const events = historyBuilder(id, { start, tick: 1, owner: 'dead', instance: 'dead-1' })
      .created({ workflow: 'one-step', kind: 'one-shot' })
      .input(i)
      .turnStarted()
      .build();
    writes.push(store.append(id, events, { expectedLastEventId: 0, generation: events[0]!.generation }));
    if (writes.length >= 500) await Promise.all(writes.splice(0));
  }
  await Promise.all(writes);
  await store.close();
  return dir;
}

/** The engine's default `snapshotEvery`. */
const SNAPSHOT_EVERY = 1_000;

/** One `bench` task of `n` events, its last turn open; its latest snapshot where the engine's cadence (snapshotDue, default `snapshotEvery`) puts it. */
async function longTaskStore(n: number): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'turnlog-recovery-bench-'));
  const store = new LevelHistoryStore(dir, { sync: false });
  await store.open();
  // benchHistory ends turns with TurnCompleted; cut it at a turn start so the last turn is open.
  const all = benchHistory(n + 200);
  let end = n;
  while (all[end - 1]!.type !== 'TurnStarted') end--;
  const events: HistoryEvent[] = all.slice(0, end + 3); // the open turn's first steps
  // Recent times and a one-hour turn timeout: the open turn reruns, it does not time out.
  const shift = Date.now() - events[events.length - 1]!.time;
  for (const e of events) {
    e.time += shift;
    if (e.type === 'TaskCreated') e.policy = { ...e.policy, turnTimeoutMs: 3_600_000 };
    if (e.type === 'TurnStarted') e.deadline = e.turnStartedAt + shift + 3_600_000;
  }
  for (let i = 0; i < events.length; i += 5_000) {
    await store.append('long', events.slice(i, i + 5_000), { expectedLastEventId: i, generation: events[0]!.generation });
  }
  // The engine's cadence, event by event (its appends here are one to three events each).
  let at = 0;
  let data: Uint8Array | undefined;
  let state: TaskState | undefined;
  for (let id = 1; id <= events.length; id++) {
    if (!snapshotDue(id - at, data?.length, SNAPSHOT_EVERY)) continue;
    state = fold('long', events.slice(at, id), state);
    [at, data] = [id, encodeState(state)];
  }
  if (data) await store.putSnapshot('long', { eventId: at, data });
  await store.close();
  return dir;
}

/** Wall time to open's return and to `recovered()`, and this process's CPU time to `recovered()` (the machine is shared: CPU time is the steadier figure). */
async function recoverAll(dir: string, concurrency: number): Promise<{ openMs: number; decidedMs: number; cpuMs: number; passCpuMs: number }> {
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const engine = await Engine.open({ store: dir, workflows: [oneStep, bench], logger: silentLogger, scanIntervalMs: 0, recoveryConcurrency: concurrency });
  const openMs = performance.now() - t0;
  const cpuOpen = process.cpuUsage();
  await engine.recovered();
  const decidedMs = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  const pass = process.cpuUsage(cpuOpen);
  await engine.shutdown({ graceMs: 1_000 });
  return { openMs, decidedMs, cpuMs: (cpu.user + cpu.system) / 1000, passCpuMs: (pass.user + pass.system) / 1000 };
}

export async function run(): Promise<void> {
  const N = Number(process.env['TURNLOG_BENCH_RECOVERY_TASKS'] ?? 10_000);
  const SEQ = Math.min(N, Number(process.env['TURNLOG_BENCH_RECOVERY_SEQ'] ?? 1_000));
  const fmt = (ms: number) => `${ms.toFixed(0).padStart(6)} ms`;

  const seqDir = await crashedStore(Math.max(SEQ, 1));
  const seq = await recoverAll(seqDir, 1);
  rmSync(seqDir, { recursive: true, force: true });
  const perTaskSeq = seq.decidedMs / SEQ;
  console.log(`recovery, one task at a time (recoveryConcurrency 1), ${SEQ.toLocaleString('en-US')} tasks: open returned after ${fmt(seq.openMs)}, all decided after ${fmt(seq.decidedMs)} (${(perTaskSeq * 1000).toFixed(0)} µs a task; CPU ${fmt(seq.cpuMs)})`);

  const dir = await crashedStore(N);
  const par = await recoverAll(dir, 64);
  rmSync(dir, { recursive: true, force: true });
  console.log(
    `recovery, 64 at once, ${N.toLocaleString('en-US')} tasks: open returned after ${fmt(par.openMs)}, all decided and running again after ${fmt(par.decidedMs)} ` +
      `(goal ≤ 1,000 ms; ${(par.decidedMs / N * 1000).toFixed(0)} µs a task, ${(perTaskSeq / (par.decidedMs / N)).toFixed(1)}× the sequential rate; CPU ${fmt(par.cpuMs)}, ${(par.cpuMs / N * 1000).toFixed(0)} µs a task)`,
  );

  // Both sizes alternate round by round (the first rounds of a process run colder code: the size
  // measured first would pay it), 9 rounds each; printed to 0.01 ms (a short task recovers in ~2 ms).
  const SIZES = [100, 100_000] as const;
  const ROUNDS = 9;
  const dirs = new Map<number, string>();
  for (const size of SIZES) dirs.set(size, await longTaskStore(size));
  const times = new Map<number, number[]>(SIZES.map((s) => [s, []]));
  const cpus = new Map<number, number[]>(SIZES.map((s) => [s, []]));
  for (let i = 0; i < ROUNDS; i++) {
    for (const size of i % 2 === 0 ? SIZES : [...SIZES].reverse()) {
      // A fresh copy each round: a recovered task has nothing left to recover.
      const copy = `${dirs.get(size)!}-${i}`;
      cpSync(dirs.get(size)!, copy, { recursive: true });
      const r = await recoverAll(copy, 64);
      times.get(size)!.push(r.decidedMs - r.openMs);
      cpus.get(size)!.push(r.passCpuMs);
      rmSync(copy, { recursive: true, force: true });
    }
  }
  for (const dir of dirs.values()) rmSync(dir, { recursive: true, force: true });
  const best = (xs: number[]) => Math.min(...xs);
  const mid = (xs: number[]) => [...xs].sort((a, b) => a - b)[ROUNDS >> 1]!;
  const ms = (x: number) => `${x.toFixed(2)} ms`;
  const [short, long] = [times.get(100)!, times.get(100_000)!];
  const [shortCpu, longCpu] = [cpus.get(100)!, cpus.get(100_000)!];
  console.log(
    `recovery of one task: 100 events best ${ms(best(short))} (median ${ms(mid(short))}), 100,000 events best ${ms(best(long))} (median ${ms(mid(long))}) (snapshot + tail) ` +
      `→ ${(best(long) / best(short)).toFixed(2)}× best, ${(mid(long) / mid(short)).toFixed(2)}× median (goal ≤ 2×; from open's return to recovered(), ${ROUNDS} rounds each, sizes alternating); ` +
      `process CPU over the same span, medians ${ms(mid(shortCpu))} and ${ms(mid(longCpu))}: ${(mid(longCpu) / mid(shortCpu)).toFixed(2)}×`,
  );
}
