/**
 * PostgreSQL store benchmark (issue #11): durable steps of an inline turn on the PostgreSQL
 * store, beside a raw `pg` autocommit INSERT of the same event bytes measured in the same run
 * (paired blocks, median ratio). Skips with one line when PostgreSQL is unreachable.
 * TURNLOG_TEST_PG_URL picks the server (default postgres://postgres@127.0.0.1:5432/test).
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Engine } from '../src/runtime/engine.js';
import { silentLogger } from '../src/logger.js';
import { defineWorkflow } from '../src/workflow/define-workflow.js';
import { createPostgresStore } from '../src/store/postgres-store.js';

const now = () => Number(process.hrtime.bigint()) / 1e6;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

export async function run(): Promise<void> {
  const url = process.env['TURNLOG_TEST_PG_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';
  const probe = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  try {
    await probe.connect();
  } catch {
    console.log(`PostgreSQL not reachable at ${url}: postgres benchmark skipped`);
    return;
  }
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
      const t0 = now();
      for (let i = 0; i < n; i++) await probe.query(`INSERT INTO "${schema}".raw (k, data) VALUES ($1, $2)`, [k++, bytes]);
      return (now() - t0) / n;
    };

    const ratios: number[] = [];
    const stepRuns: number[] = [];
    const rawRuns: number[] = [];
    for (let r = 0; r < 9; r++) {
      const raw = await rawBlock(STEPS);
      const step = ((await (await engine.start(many, null)).result()) as number) / STEPS;
      rawRuns.push(raw);
      stepRuns.push(step);
      ratios.push(step / raw);
    }

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

    console.log(`raw pg INSERT + commit (${bytes.length} B)   ${median(rawRuns).toFixed(3)} ms`);
    console.log(`durable step on PostgreSQL      ${median(stepRuns).toFixed(3)} ms; median of 9 paired blocks ${median(ratios).toFixed(2)}× raw INSERT + commit`);
    console.log(`${TASKS} concurrent tasks           ${Math.round(concurrentPerS)} one-step turns/s (pool of 10, one transaction per append)`);
  } finally {
    await store.close();
    await probe.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
    await probe.end();
  }
}
