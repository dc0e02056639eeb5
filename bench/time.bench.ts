/**
 * Durable time (issue #13). Printed, in one run:
 * - 10,000 tasks waiting between turns for a scheduled input (`send(input, { deliverAt })` an
 *   hour ahead): the engine's live clock timers and heap after recovery, against the same 10,000
 *   tasks merely suspended (no scheduled input) — goal: one timer, not one per task; with a
 *   periodic scan (horizon 2 × scanIntervalMs) the far-off tasks are not even loaded;
 * - how late a due scheduled input starts its turn (handler's Date.now() − deliverAt) over 200
 *   tasks, median and p99, against plain setTimeout lateness measured alongside — goal: < 50 ms.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Engine } from '../src/runtime/engine.js';
import { systemClock, type Clock } from '../src/runtime/clock.js';
import { silentLogger } from '../src/logger.js';
import { LevelHistoryStore } from '../src/store/level-store.js';
import { historyBuilder } from '../src/testing/history-builder.js';
import { defineWorkflow } from '../src/workflow/define-workflow.js';

const N = Number(process.env['TURNLOG_BENCH_TIME_TASKS'] ?? 10_000);
const HOUR = 3_600_000;

const assistant = defineWorkflow({
  name: 'assistant',
  kind: 'multi-turn',
  turn: async (ctx, input: { due?: number }) => {
    if (input.due !== undefined) lateness.push(Date.now() - input.due);
    return ctx.suspend('idle');
  },
});
const lateness: number[] = [];

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
function heapMb(): number {
  gc();
  gc();
  return process.memoryUsage().heapUsed / 1e6;
}

/** The system clock, counting its live timers. */
function countingClock(): Clock & { live: () => number } {
  let live = 0;
  return {
    now: () => systemClock.now(),
    setTimer(fn, ms, options) {
      live++;
      let done = false;
      const t = systemClock.setTimer(() => {
        if (!done) live--;
        done = true;
        fn();
      }, ms, options);
      return {
        cancel() {
          if (!done) live--;
          done = true;
          t.cancel();
        },
      };
    },
    live: () => live,
  };
}

/** N suspended tasks after one turn; with `scheduled`, each has an input due in an hour. */
async function store(scheduled: boolean): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'turnlog-time-bench-'));
  const s = new LevelHistoryStore(dir, { sync: false });
  await s.open();
  const start = Date.now();
  const writes: Promise<unknown>[] = [];
  for (let i = 0; i < N; i++) {
    const id = `task-${String(i).padStart(6, '0')}`;
    let b = historyBuilder(id, { start, tick: 1, owner: 'old', instance: 'old-1' }).created({ workflow: 'assistant', kind: 'multi-turn' }).input({}).turnStarted().suspended('idle');
    if (scheduled) b = b.input({ due: start + HOUR }, { deliverAt: start + HOUR });
    const events = b.build();
    writes.push(s.append(id, events, { expectedLastEventId: 0, generation: events[0]!.generation }));
    if (writes.length >= 500) await Promise.all(writes.splice(0));
  }
  await Promise.all(writes);
  await s.close();
  return dir;
}

async function waiting(scheduled: boolean, scanIntervalMs: number): Promise<{ heap: number; timers: number; ms: number }> {
  const dir = await store(scheduled);
  const clock = countingClock();
  const before = heapMb();
  const t0 = performance.now();
  const engine = await Engine.open({ store: dir, workflows: [assistant], logger: silentLogger, clock, scanIntervalMs });
  await engine.recover();
  const ms = performance.now() - t0;
  const heap = heapMb() - before;
  const timers = clock.live() - (scanIntervalMs > 0 ? 1 : 0); // the scanner's own timer
  await engine.shutdown({ graceMs: 0 });
  rmSync(dir, { recursive: true, force: true });
  return { heap, timers, ms };
}

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

async function precision(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'turnlog-time-bench-'));
  const engine = await Engine.open({ store: dir, workflows: [assistant], logger: silentLogger, scanIntervalMs: 60_000 });
  const M = 200;
  lateness.length = 0;
  // Far enough ahead that every start is written before the first is due (a 2-core CI box).
  const base = Date.now() + 8000;
  const results: Promise<unknown>[] = [];
  const plain: number[] = [];
  for (let i = 0; i < M; i++) {
    const due = base + (i % 50) * 20;
    const h = await engine.start(assistant, { due }, { taskId: `p-${i}`, deliverAt: due });
    results.push(h.result());
    setTimeout(() => plain.push(Date.now() - due), due - Date.now());
  }
  await Promise.all(results);
  await new Promise((r) => setTimeout(r, 50));
  await engine.shutdown({ graceMs: 0 });
  rmSync(dir, { recursive: true, force: true });
  console.log(`due scheduled input → turn start, ${M} tasks: median ${pct(lateness, 50)} ms, p99 ${pct(lateness, 99)} ms late (goal < 50 ms)`);
  console.log(`  baseline setTimeout at the same times: median ${pct(plain, 50)} ms, p99 ${pct(plain, 99)} ms late`);
}

export async function run(): Promise<void> {
  const base = await waiting(false, 0);
  const armed = await waiting(true, 0);
  const scanned = await waiting(true, 60_000);
  console.log(`${N} tasks suspended (baseline): heap +${base.heap.toFixed(1)} MB after recovery (${base.ms.toFixed(0)} ms), live timers ${base.timers}`);
  console.log(
    `${N} tasks waiting for an input due in 1 h, no periodic scan (all armed at open): heap +${armed.heap.toFixed(1)} MB (${(armed.heap / Math.max(base.heap, 0.1)).toFixed(2)}× baseline, ${((armed.heap * 1e6) / N).toFixed(0)} B/task), live timers ${armed.timers} (goal 1)`,
  );
  console.log(
    `${N} tasks waiting, scanIntervalMs 60 s (horizon 2 min, none loaded): heap +${scanned.heap.toFixed(1)} MB (${(scanned.heap / Math.max(base.heap, 0.1)).toFixed(2)}× baseline), live timers ${scanned.timers} (goal 0)`,
  );
  await precision();
}
