/**
 * Engine benchmark (issue 4): inline one-step turns on LevelDB with sync writes, beside a bare
 * function call and raw `level` sync writes measured in the same run.
 * Targets: a sequential durable step ≤ 1.2× one raw sync put; ≤ 1 sync write per step plus
 * 2 per turn; ≥ 8,000 one-step turns/s across 100 concurrent tasks with group commit.
 * Measured warm: the step and turn paths run first on a non-durable store until the JIT has
 * tiered them up (the cold figures are printed beside).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Level } from 'level';
import { Engine } from '../src/runtime/engine.js';
import { silentLogger } from '../src/logger.js';
import { defineWorkflow } from '../src/workflow/define-workflow.js';
import { LevelHistoryStore } from '../src/store/level-store.js';
import type { HistoryStore } from '../src/store/history-store.js';

const now = () => Number(process.hrtime.bigint()) / 1e6;
/** Process CPU (user + system, every thread) in ms: beside wall time, it survives a loaded machine better. */
const cpu = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** Counts appends (each one is one sync batch unless group commit merged it with others). */
function counting(store: HistoryStore): { store: HistoryStore; appends: () => number } {
  let n = 0;
  const proxy = new Proxy(store, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (prop === 'append') return (...args: Parameters<HistoryStore['append']>) => (n++, target.append(...args));
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  return { store: proxy, appends: () => n };
}

/** A raw `level` database for the baseline: sync puts of the same size as a step event. */
async function openRaw(dir: string): Promise<{ put(n: number): Promise<number>; close(): Promise<void> }> {
  const db = new Level<string, Uint8Array>(join(dir, 'raw'), { valueEncoding: 'view' });
  await db.open();
  const value = new Uint8Array(80).fill(7);
  let k = 0;
  return {
    async put(n) {
      const t0 = now();
      for (let i = 0; i < n; i++) await db.put(`k${String(k++).padStart(8, '0')}`, value, { sync: true });
      return (now() - t0) / n;
    },
    close: () => db.close(),
  };
}

export async function run(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'turnlog-bench-engine-'));
  try {
    // Bare function call: the handler's own cost with no engine.
    const handler = async (x: number) => x + 1;
    let t0 = now();
    for (let i = 0; i < 100_000; i++) await handler(i);
    const bareUs = ((now() - t0) / 100_000) * 1000;

    // Sequential durable steps inside one turn, alternating with raw sync puts: the disk's
    // speed drifts on shared machines, so each step block is compared with the raw block
    // measured right before it, and the median of those ratios is reported.
    const STEPS = 100;
    const WARM_STEP_BLOCKS = 30; // of STEPS steps
    const WARM_TURN_BLOCKS = 30; // of 100 one-step turns
    const many = defineWorkflow({
      name: 'many-steps',
      turn: async (ctx) => {
        const t = now();
        for (let i = 0; i < STEPS; i++) await ctx.step('s', () => i);
        return now() - t;
      },
    });
    // Sequential one-step turns on one multi-turn task.
    const oneStep = defineWorkflow({ name: 'one-step', kind: 'multi-turn', turn: (ctx, x: number) => ctx.step('s', () => x + 1) });

    // JIT warm-up on a non-durable store (the same code, no fsync): TurboFan tiers the step and
    // turn paths up over ~2,500 steps and ~2,500 turns, and until then they cost 2-3x the
    // CPU (docs/performance.md, "Where the time goes"). The cold and warm figures are printed.
    const warm = await Engine.open({ store: new LevelHistoryStore(join(dir, 'warm'), { sync: false }), workflows: [many, oneStep], logger: silentLogger, scanIntervalMs: 0 });
    const warmStepCpu: number[] = [];
    for (let i = 0; i < WARM_STEP_BLOCKS; i++) {
      const c = cpu();
      await (await warm.start(many, null)).result();
      warmStepCpu.push(((cpu() - c) * 1000) / STEPS);
    }
    const warmTurnCpu: number[] = [];
    const wh = await warm.start(oneStep, 0, { taskId: 'warm' });
    await wh.nextTurn();
    for (let b = 0; b < WARM_TURN_BLOCKS; b++) {
      const c = cpu();
      for (let i = 0; i < 100; i++) {
        await wh.send(i);
        await wh.nextTurn();
      }
      warmTurnCpu.push(((cpu() - c) * 1000) / 100);
    }
    await warm.shutdown();

    const raw = await openRaw(dir);
    const level = new LevelHistoryStore(join(dir, 'engine'));
    const { store, appends } = counting(level);
    const engine = await Engine.open({ store, workflows: [many, oneStep], logger: silentLogger, scanIntervalMs: 0 });
    await (await engine.start(many, null)).result(); // warm-up
    const ratios: number[] = [];
    const stepRuns: number[] = [];
    const rawRuns: number[] = [];
    const stepCpu: number[] = [];
    const rawCpu: number[] = [];
    for (let r = 0; r < 9; r++) {
      let c0 = cpu();
      const rawBlock = await raw.put(STEPS);
      rawCpu.push((cpu() - c0) / STEPS);
      c0 = cpu();
      const stepBlock = ((await (await engine.start(many, null)).result()) as number) / STEPS;
      stepCpu.push((cpu() - c0) / STEPS);
      rawRuns.push(rawBlock);
      stepRuns.push(stepBlock);
      ratios.push(stepBlock / rawBlock);
    }
    const rawMs = median(rawRuns);
    const stepMs = median(stepRuns);
    const stepRatio = median(ratios);

    const TURNS = 300;
    const h = await engine.start(oneStep, 0, { taskId: 'seq' });
    await h.nextTurn();
    const a0 = appends();
    let c0 = cpu();
    t0 = now();
    for (let i = 0; i < TURNS; i++) {
      await h.send(i);
      await h.nextTurn();
    }
    const turnMs = (now() - t0) / TURNS;
    const turnCpuUs = ((cpu() - c0) * 1000) / TURNS;
    const writesPerTurn = (appends() - a0) / TURNS;

    // 100 concurrent multi-turn tasks, each running one-step turns back to back.
    const TASKS = 100;
    const PER_TASK = 40;
    const handles = await Promise.all(Array.from({ length: TASKS }, (_, i) => engine.start(oneStep, 0, { taskId: `c${i}` })));
    await Promise.all(handles.map((x) => x.nextTurn()));
    c0 = cpu();
    t0 = now();
    await Promise.all(
      handles.map(async (x) => {
        for (let i = 0; i < PER_TASK; i++) {
          await x.send(i);
          await x.nextTurn();
        }
      }),
    );
    const concurrentPerS = (TASKS * PER_TASK) / ((now() - t0) / 1000);
    const concurrentCpuUs = ((cpu() - c0) * 1000) / (TASKS * PER_TASK);
    await engine.shutdown();
    await raw.close();

    const f0 = (xs: number[]) => xs[0]!.toFixed(0);
    const fN = (xs: number[]) => xs[xs.length - 1]!.toFixed(0);
    console.log(`JIT warm-up, non-durable store     process CPU per step ${f0(warmStepCpu)} µs (first ${STEPS}) -> ${fN(warmStepCpu)} µs (after ${WARM_STEP_BLOCKS * STEPS}); per one-step turn ${f0(warmTurnCpu)} -> ${fN(warmTurnCpu)} µs (first / last 100 of ${WARM_TURN_BLOCKS * 100})`);
    console.log(`raw level sync put                 ${rawMs.toFixed(3)} ms`);
    console.log(`bare async function call           ${bareUs.toFixed(3)} µs`);
    console.log(`durable step (sequential)          ${stepMs.toFixed(3)} ms; median of 9 paired blocks ${stepRatio.toFixed(2)}× raw sync put (target ≤ 1.2×)`);
    console.log(`  process CPU per step / raw put   ${(median(stepCpu) * 1000).toFixed(0)} µs / ${(median(rawCpu) * 1000).toFixed(0)} µs (medians of the same blocks)`);
    console.log(`one-step turn (sequential)         ${turnMs.toFixed(3)} ms = ${(turnMs / rawMs).toFixed(2)}× raw sync put; ${writesPerTurn.toFixed(2)} appends/turn (target ≤ 3: 1 step + 2 turn); process CPU ${turnCpuUs.toFixed(0)} µs/turn`);
    console.log(`100 concurrent tasks, group commit ${Math.round(concurrentPerS)} one-step turns/s (target ≥ 8,000); sequential ${Math.round(1000 / turnMs)} turns/s; process CPU ${concurrentCpuUs.toFixed(0)} µs/turn`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
