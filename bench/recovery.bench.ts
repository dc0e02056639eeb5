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
import { encodeState } from '../src/history/state-codec.js';
import { fold } from '../src/replay/fold.js';
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

/** One `bench` task of `n` events, its last turn open; a snapshot where the engine's cadence (every 1,000 events) puts it. */
async function longTaskStore(n: number): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'turnlog-recovery-bench-'));
  const store = new LevelHistoryStore(dir, { sync: false });
  await store.open();
  // benchHistory ends turns with TurnCompleted; cut it at a turn start so the last turn is open.
  const all = benchHistory(n + 200);
  let end = n;
  while (all[end - 1]!.type !== 'TurnStarted') end--;
  const events: HistoryEvent[] = all.slice(0, end + 3); // the open turn's first steps
  // Far-future deadline (benchHistory's policy), recent times: the turn reruns, it does not time out.
  const shift = Date.now() - events[events.length - 1]!.time;
  for (const e of events) e.time += shift;
  for (const e of events) if (e.type === 'TurnStarted') (e as { deadline: number }).deadline += shift;
  for (let i = 0; i < events.length; i += 5_000) {
    await store.append('long', events.slice(i, i + 5_000), { expectedLastEventId: i, generation: events[0]!.generation });
  }
  const at = Math.floor(events.length / 1000) * 1000;
  if (at > 0) await store.putSnapshot('long', { eventId: at, data: encodeState(fold('long', events.slice(0, at))) });
  await store.close();
  return dir;
}

async function recoverAll(dir: string, concurrency: number): Promise<{ openMs: number; decidedMs: number }> {
  const t0 = performance.now();
  const engine = await Engine.open({ store: dir, workflows: [oneStep, bench], logger: silentLogger, scanIntervalMs: 0, recoveryConcurrency: concurrency });
  const openMs = performance.now() - t0;
  await engine.recovered();
  const decidedMs = performance.now() - t0;
  await engine.shutdown({ graceMs: 1_000 });
  return { openMs, decidedMs };
}

export async function run(): Promise<void> {
  const N = Number(process.env['TURNLOG_BENCH_RECOVERY_TASKS'] ?? 10_000);
  const SEQ = Math.min(N, 1_000);
  const fmt = (ms: number) => `${ms.toFixed(0).padStart(6)} ms`;

  const seqDir = await crashedStore(SEQ);
  const seq = await recoverAll(seqDir, 1);
  rmSync(seqDir, { recursive: true, force: true });
  const perTaskSeq = seq.decidedMs / SEQ;
  console.log(`recovery, one task at a time (recoveryConcurrency 1), ${SEQ.toLocaleString('en-US')} tasks: open returned after ${fmt(seq.openMs)}, all decided after ${fmt(seq.decidedMs)} (${(perTaskSeq * 1000).toFixed(0)} µs a task)`);

  const dir = await crashedStore(N);
  const par = await recoverAll(dir, 64);
  rmSync(dir, { recursive: true, force: true });
  console.log(
    `recovery, 64 at once, ${N.toLocaleString('en-US')} tasks: open returned after ${fmt(par.openMs)}, all decided and running again after ${fmt(par.decidedMs)} ` +
      `(goal ≤ 1,000 ms; ${(par.decidedMs / N * 1000).toFixed(0)} µs a task, ${(perTaskSeq / (par.decidedMs / N)).toFixed(1)}× the sequential rate)`,
  );

  const times: Record<number, number> = {};
  for (const size of [100, 100_000]) {
    const longDir = await longTaskStore(size);
    let best = Infinity;
    for (let i = 0; i < 5; i++) {
      // A fresh copy each round: a recovered task has nothing left to recover.
      const copy = `${longDir}-${i}`;
      cpSync(longDir, copy, { recursive: true });
      const r = await recoverAll(copy, 64);
      best = Math.min(best, r.decidedMs - r.openMs);
      rmSync(copy, { recursive: true, force: true });
    }
    rmSync(longDir, { recursive: true, force: true });
    times[size] = best;
  }
  console.log(
    `recovery of one task: 100 events ${fmt(times[100]!)}, 100,000 events ${fmt(times[100_000]!)} (snapshot + tail) → ${(times[100_000]! / times[100]!).toFixed(2)}× (goal ≤ 2×; from open's return to recovered(), best of 5)`,
  );
}
