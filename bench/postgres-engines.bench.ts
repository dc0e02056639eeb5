/**
 * Many engine processes on one PostgreSQL schema (issue #11): one-step turns/s of 1, 2 and 3
 * engine processes (bench/pg-engine-worker.ts) sharing 60 concurrent tasks × 5 turns, in
 * alternating rounds of the same run, each ratio against the same round's one process (median of
 * the rounds). Each process warms up on the same load first. Also the processes' CPU per turn
 * (engine processes only; the server's CPU is not counted) and appends per commit (group commit is
 * per process: fewer tasks per process, smaller commits). Last, one process with a third of the
 * tasks, the load of each of the three. Skips when PostgreSQL is unreachable.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { connectPg } from './pg-probe.js';
import { createPostgresStore } from '../src/store/postgres-store.js';

const now = () => Number(process.hrtime.bigint()) / 1e6;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const WORKER = fileURLToPath(new URL('./pg-engine-worker.js', import.meta.url));
const TASKS = 60;
const TURNS = 5;
const ROUNDS = 3;

export async function run(): Promise<void> {
  const pgc = await connectPg('postgres engines benchmark');
  if (!pgc) return;
  const { url, probe } = pgc;
  const schema = `turnlog_bench_${randomBytes(4).toString('hex')}`;
  const store = createPostgresStore({ connectionString: url, schema });
  try {
    await store.open(); // migrates once, before the processes start
    await store.close();
    const perS = new Map<number, number[]>();
    const cpu = new Map<number, number[]>();
    const ratios = new Map<number, number[]>();
    const perCommit = new Map<number, number[]>();
    const third: Measure[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      let base = 0;
      for (const n of [1, 2, 3]) {
        const m = await processes(url, schema, n, TASKS);
        perCommit.set(n, [...(perCommit.get(n) ?? []), m.perCommit]);
        if (n === 1) base = m.perS;
        perS.set(n, [...(perS.get(n) ?? []), m.perS]);
        cpu.set(n, [...(cpu.get(n) ?? []), m.cpuMsPerTurn]);
        ratios.set(n, [...(ratios.get(n) ?? []), m.perS / base]);
      }
      third.push(await processes(url, schema, 1, TASKS / 3));
    }
    for (const n of [1, 2, 3]) {
      console.log(
        `${n} engine process${n > 1 ? 'es' : ' '} on one schema    ${Math.round(median(perS.get(n)!))} one-step turns/s, ` +
          `${median(cpu.get(n)!).toFixed(2)} ms engine CPU per turn, ${median(perCommit.get(n)!).toFixed(2)} appends per commit; median of ${ROUNDS} rounds ${median(ratios.get(n)!).toFixed(2)}× one process`,
      );
    }
    console.log(
      `1 engine process, ${TASKS / 3} tasks         ${Math.round(median(third.map((m) => m.perS)))} one-step turns/s, ` +
        `${median(third.map((m) => m.cpuMsPerTurn)).toFixed(2)} ms engine CPU per turn, ${median(third.map((m) => m.perCommit)).toFixed(2)} appends per commit (each of the 3 processes' load, alone)`,
    );
  } finally {
    await probe.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
    await probe.end();
  }
}

interface Measure {
  perS: number;
  cpuMsPerTurn: number;
  perCommit: number;
}

/** `n` engine processes running tasks/n concurrent tasks each (tasks × TURNS turns in all). */
async function processes(url: string, schema: string, n: number, tasks: number): Promise<Measure> {
  const tag = randomBytes(3).toString('hex');
  const children = Array.from({ length: n }, (_, i) =>
    spawn(process.execPath, [WORKER, url, schema, String(tasks / n), String(TURNS), `p${n}-${i}-${tag}`], { stdio: ['pipe', 'pipe', 'inherit'] }),
  );
  const readers = children.map((c) => {
    const lines = createInterface({ input: c.stdout! });
    return () =>
      new Promise<string>((resolve, reject) => {
        lines.once('line', resolve);
        c.once('exit', (code) => reject(new Error(`engine process exited (${code})`)));
      });
  });
  await Promise.all(readers.map((r) => r()));
  const t0 = now();
  for (const c of children) c.stdin!.write('go\n');
  const done = await Promise.all(readers.map((r) => r()));
  const perS = (tasks * TURNS) / ((now() - t0) / 1000);
  await Promise.all(children.map((c) => new Promise((r) => (c.exitCode !== null ? r(null) : c.once('exit', r)))));
  const sum = (k: number) => done.reduce((a, line) => a + Number(line.split(' ')[k]), 0);
  return { perS, cpuMsPerTurn: sum(1) / (tasks * TURNS), perCommit: sum(2) / Math.max(1, sum(3)) };
}
