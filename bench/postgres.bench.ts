/**
 * PostgreSQL store benchmark (issue #11): durable steps of an inline turn on the PostgreSQL
 * store, beside a raw `pg` autocommit INSERT of the same event bytes measured in the same run
 * (paired blocks, median ratio). Skips with one line when PostgreSQL is unreachable.
 * Measured warm: steps and raw INSERTs run first until the JIT has tiered them up (a process's
 * first thousands of steps cost 2-3x the CPU, docs/performance.md); the cold figures are printed beside.
 * TURNLOG_TEST_PG_URL picks the server (default postgres://postgres@127.0.0.1:5432/test).
 */
import { randomBytes } from 'node:crypto';
import { Engine } from '../src/runtime/engine.js';
import { silentLogger } from '../src/logger.js';
import { defineWorkflow } from '../src/workflow/define-workflow.js';
import { connectPg } from './pg-probe.js';
import { createPostgresStore } from '../src/store/postgres-store.js';

const now = () => Number(process.hrtime.bigint()) / 1e6;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
/** This process's CPU time (user + system) in ms since `from`. */
const cpuMs = (from: NodeJS.CpuUsage) => {
  const c = process.cpuUsage(from);
  return (c.user + c.system) / 1000;
};

export async function run(): Promise<void> {
  const pgc = await connectPg('postgres benchmark');
  if (!pgc) return;
  const { url, probe } = pgc;
  const schema = `turnlog_bench_${randomBytes(4).toString('hex')}`;
  const store = createPostgresStore({ connectionString: url, schema });
  try {
    const STEPS = 100;
    const many = defineWorkflow({
      name: 'many-steps',
      turn: async (ctx) => {
        const t = now();
        for (let i = 0; i < STEPS; i++) await ctx.step('s', () => i);
        return now() - t;
      },
    });
    const oneStep = defineWorkflow({ name: 'one-step', kind: 'multi-turn', turn: (ctx, x: number) => ctx.step('s', () => x + 1) });
    const engine = await Engine.open({ store, workflows: [many, oneStep], logger: silentLogger, scanIntervalMs: 0 });
    const warm = await engine.start(many, null);
    await warm.result();

    // The baseline writes the bytes of a real step event, one autocommit INSERT each.
    const sample = await probe.query(`SELECT data FROM "${schema}".events WHERE task_id = $1 AND event_id = 8`, [warm.taskId]);
    const bytes = sample.rows[0].data as Buffer;
    await probe.query(`CREATE TABLE "${schema}".raw (k bigint PRIMARY KEY, data bytea NOT NULL)`);
    let k = 0;
    const rawBlock = async (n: number) => {
      const c0 = process.cpuUsage();
      const t0 = now();
      for (let i = 0; i < n; i++) await probe.query(`INSERT INTO "${schema}".raw (k, data) VALUES ($1, $2)`, [k++, bytes]);
      return { ms: (now() - t0) / n, cpu: cpuMs(c0) / n };
    };

    // JIT warm-up (the same store and statements): 30 blocks of each, the first and last block's
    // process CPU printed. The nine paired blocks below are the figures of record.
    const WARM_BLOCKS = 30;
    const warmStep: number[] = [];
    const warmRaw: number[] = [];
    for (let r = 0; r < WARM_BLOCKS; r++) {
      warmRaw.push((await rawBlock(STEPS)).cpu);
      const c0 = process.cpuUsage();
      await (await engine.start(many, null)).result();
      warmStep.push(cpuMs(c0) / STEPS);
    }

    const ratios: number[] = [];
    const stepRuns: number[] = [];
    const rawRuns: number[] = [];
    const stepCpu: number[] = [];
    const rawCpu: number[] = [];
    const paths0 = { ...store.appendPaths };
    for (let r = 0; r < 9; r++) {
      const raw = await rawBlock(STEPS);
      const c0 = process.cpuUsage();
      const step = ((await (await engine.start(many, null)).result()) as number) / STEPS;
      stepCpu.push(cpuMs(c0) / STEPS);
      rawCpu.push(raw.cpu);
      rawRuns.push(raw.ms);
      stepRuns.push(step);
      ratios.push(step / raw.ms);
    }
    const oneStatement = store.appendPaths.oneStatement - paths0.oneStatement;
    const locked = store.appendPaths.locked - paths0.locked;

    const TASKS = 50;
    const PER_TASK = 10;
    const handles = await Promise.all(Array.from({ length: TASKS }, (_, i) => engine.start(oneStep, 0, { taskId: `c${i}` })));
    await Promise.all(handles.map((x) => x.nextTurn()));
    const t0 = now();
    await Promise.all(
      handles.map(async (x) => {
        for (let i = 0; i < PER_TASK; i++) {
          await x.send(i);
          await x.nextTurn();
        }
      }),
    );
    const concurrentPerS = (TASKS * PER_TASK) / ((now() - t0) / 1000);
    await engine.shutdown();

    console.log(`JIT warm-up                     process CPU per step ${warmStep[0]!.toFixed(3)} -> ${warmStep[WARM_BLOCKS - 1]!.toFixed(3)} ms, per raw INSERT ${warmRaw[0]!.toFixed(3)} -> ${warmRaw[WARM_BLOCKS - 1]!.toFixed(3)} ms (first / last block of ${STEPS}, after ${WARM_BLOCKS * STEPS})`);
    console.log(`raw pg INSERT + commit (${bytes.length} B)   ${median(rawRuns).toFixed(3)} ms`);
    console.log(`durable step on PostgreSQL      ${median(stepRuns).toFixed(3)} ms; median of 9 paired blocks ${median(ratios).toFixed(2)}× raw INSERT + commit`);
    console.log(`  process CPU per step ${median(stepCpu).toFixed(3)} ms vs ${median(rawCpu).toFixed(3)} ms per raw INSERT (medians of the same blocks); ${oneStatement} of ${oneStatement + locked} appends in one statement`);
    console.log(`${TASKS} concurrent tasks           ${Math.round(concurrentPerS)} one-step turns/s (pool of 10, group commit)`);

    // Group commit vs one transaction per append: 100 concurrent tasks, paired blocks in this run.
    const gc = await groupCommitBench(url, schema, [oneStep]);
    console.log(`100 concurrent tasks, group commit   ${Math.round(gc.on)} one-step turns/s (${gc.perBatch.toFixed(1)} appends per commit)`);
    console.log(`100 concurrent tasks, one commit per append ${Math.round(gc.off)} one-step turns/s; median of ${gc.ratios.length} paired blocks ${median(gc.ratios).toFixed(2)}× with group commit`);
    console.log(`  process CPU per turn ${gc.cpuOn.toFixed(3)} ms with group commit vs ${gc.cpuOff.toFixed(3)} ms without (medians)`);

  } finally {
    await store.close();
    await probe.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
    await probe.end();
  }
}

async function groupCommitBench(url: string, schema: string, wf: Parameters<typeof Engine.open>[0]['workflows'] & object): Promise<{ on: number; off: number; ratios: number[]; perBatch: number; cpuOn: number; cpuOff: number }> {
  const TASKS = 100;
  const TURNS = 5;
  const block = async (groupCommit: boolean, tag: string) => {
    const store = createPostgresStore({ connectionString: url, schema, groupCommit });
    const engine = await Engine.open({ store, workflows: wf, logger: silentLogger, scanIntervalMs: 0 });
    const c0 = process.cpuUsage();
    const t0 = now();
    await Promise.all(
      Array.from({ length: TASKS }, async (_, i) => {
        const h = await engine.start('one-step', 0, { taskId: `${tag}-${i}` });
        await h.nextTurn();
        for (let k = 1; k < TURNS; k++) {
          await h.send(k);
          await h.nextTurn();
        }
      }),
    );
    const perS = (TASKS * TURNS) / ((now() - t0) / 1000);
    const cpu = cpuMs(c0) / (TASKS * TURNS);
    const stats = store.groupCommitStats();
    await engine.shutdown();
    await store.close();
    return { perS, cpu, perBatch: stats.batches ? stats.appends / stats.batches : 1 };
  };
  const on: number[] = [];
  const off: number[] = [];
  const ratios: number[] = [];
  const perBatch: number[] = [];
  const cpuOn: number[] = [];
  const cpuOff: number[] = [];
  for (let r = 0; r < 5; r++) {
    const a = await block(true, `gc${r}`);
    const b = await block(false, `pa${r}`);
    on.push(a.perS);
    off.push(b.perS);
    perBatch.push(a.perBatch);
    cpuOn.push(a.cpu);
    cpuOff.push(b.cpu);
    ratios.push(a.perS / b.perS);
  }
  return { on: median(on), off: median(off), ratios, perBatch: median(perBatch), cpuOn: median(cpuOn), cpuOff: median(cpuOff) };
}
