/**
 * New one-step tasks, one after another (issue #16: "a new task start → result"). A measuring
 * tool for A/B builds, not a bench section; run after `npm run build`.
 *
 *   node bench/newtask-probe.mjs promises        async resources a new task makes, by type
 *   node bench/newtask-probe.mjs cpu [blocks]    process CPU per new task, blocks of PROBE_N
 *   node bench/newtask-probe.mjs path [blocks]   the critical path: medians (µs) of engine.start to
 *                                                the start's write, each write's completion to the
 *                                                next write, the last one's to result(), each write
 *   node bench/newtask-probe.mjs phases          async resources made in each of those seven spans
 *                                                (PROBE_STACKS=1: where each of one task's was made)
 *   node bench/newtask-probe.mjs run             PROBE_WARM then PROBE_N tasks, nothing printed
 *                                                (under callgrind: the difference of two N)
 *
 * PROBE_ROOT another build's repository root; PROBE_SYNC=1 sync LevelDB writes (default off:
 * the CPU, not the disk); PROBE_WARM warm-up tasks (3,000); PROBE_N tasks a block (1,000).
 */
import { createHook } from 'node:async_hooks';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const mode = process.argv[2] ?? 'cpu';
const blocks = Number(process.argv[3] ?? 5);
const root = resolve(process.env.PROBE_ROOT ?? join(fileURLToPath(import.meta.url), '../..'));
const WARM = Number(process.env.PROBE_WARM ?? 3000);
const N = Number(process.env.PROBE_N ?? 1000);

const { Engine, silentLogger, defineWorkflow } = await import(pathToFileURL(join(root, 'dist/src/index.js')).href);
const { LevelHistoryStore } = await import(pathToFileURL(join(root, 'dist/src/store/level-store.js')).href);

const one = defineWorkflow({ name: 'one-step', turn: (ctx, x) => ctx.step('s', () => x + 1) });
const dir = mkdtempSync(join(tmpdir(), 'turnlog-newtask-'));
const store = new LevelHistoryStore(join(dir, 'store'), { sync: process.env.PROBE_SYNC === '1' });
const engine = await Engine.open({ store, workflows: [one], logger: silentLogger, scanIntervalMs: 0 });

let i = 0;
async function run(n) {
  for (let k = 0; k < n; k++) {
    const x = i++;
    const r = await (await engine.start(one, x)).result();
    if (r !== x + 1) throw new Error(`task ${x}: result ${JSON.stringify(r)}`);
  }
}

await run(WARM);
const out = { mode, root, sync: process.env.PROBE_SYNC === '1', warm: WARM, n: N };
if (mode === 'promises') {
  const counts = {};
  const hook = createHook({ init(_id, type) { counts[type] = (counts[type] ?? 0) + 1; } });
  hook.enable();
  await run(N);
  hook.disable();
  out.perTask = Object.fromEntries(Object.entries(counts).map(([k, v]) => [k, v / N]));
} else if (mode === 'cpu') {
  out.cpuUs = [];
  out.wallUs = [];
  for (let b = 0; b < blocks; b++) {
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    await run(N);
    const c = process.cpuUsage(c0);
    out.cpuUs.push(Math.round((c.user + c.system) / N));
    out.wallUs.push(Math.round(((performance.now() - t0) * 1000) / N));
  }
} else if (mode === 'path' || mode === 'phases') {
  // classic-level's chained batch write, timed at its call and its completion.
  const { createRequire } = await import('node:module');
  const req = createRequire(join(root, 'package.json'));
  const ChainedBatch = req(req.resolve('classic-level/chained-batch.js', { paths: [req.resolve('level')] })).ChainedBatch;
  const marks = [];
  const orig = ChainedBatch.prototype._write;
  ChainedBatch.prototype._write = function (options) {
    marks.push(performance.now());
    return orig.call(this, options).then((v) => (marks.push(performance.now()), v));
  };
  // phases: async resources made in each of the seven phases (as in path), by type.
  const stacks = process.env.PROBE_STACKS ? [] : undefined;
  const byPhase = Array.from({ length: 7 }, () => ({}));
  const hook = createHook({
    init(_id, type) {
      const ph = byPhase[Math.min(marks.length, 6)];
      if (stacks) {
        const st = new Error().stack.split('\n').slice(2).filter((l) => !l.includes('node:internal') && !l.includes('newtask-probe')).slice(0, 3).map((l) => l.trim().replace(/^at /, '').replace(/\(?file:\/\/[^ ]*\/(dist\/src|node_modules)\//, '(')).join(' < ');
        stacks.push(`${Math.min(marks.length, 6)} ${type} ${st}`);
      }
      ph[type] = (ph[type] ?? 0) + 1;
    },
  });
  if (mode === 'phases') hook.enable();
  const rows = [];
  for (let b = 0; b < blocks; b++) {
    for (let k = 0; k < N; k++) {
      marks.length = 0;
      const x = i++;
      const t0 = performance.now();
      const r = await (await engine.start(one, x)).result();
      const t1 = performance.now();
      if (r !== x + 1 || marks.length !== 6) throw new Error(`task ${x}: result ${r}, ${marks.length} write marks`);
      const m = marks;
      rows.push([m[0] - t0, m[1] - m[0], m[2] - m[1], m[3] - m[2], m[4] - m[3], m[5] - m[4], t1 - m[5], t1 - t0]);
    }
  }
  ChainedBatch.prototype._write = orig;
  hook.disable();
  if (mode === 'phases') {
    const names = ['toStartWrite', 'startWrite', 'toStepWrite', 'stepWrite', 'toResultWrite', 'resultWrite', 'toResult'];
    if (stacks) console.log(stacks.slice(-Math.round(stacks.length / rows.length)).join('\n'));
    out.perTask = Object.fromEntries(byPhase.map((ph, j) => [names[j], Object.fromEntries(Object.entries(ph).map(([k, v]) => [k, v / rows.length]))]));
  }
  const med = (j) => {
    const xs = rows.map((r) => r[j]).sort((a, b) => a - b);
    return Math.round(xs[xs.length >> 1] * 1000);
  };
  out.medianUs = { toStartWrite: med(0), startWrite: med(1), toStepWrite: med(2), stepWrite: med(3), toResultWrite: med(4), resultWrite: med(5), toResult: med(6), total: med(7) };
  out.mainUs = out.medianUs.toStartWrite + out.medianUs.toStepWrite + out.medianUs.toResultWrite + out.medianUs.toResult;
} else if (mode === 'run') {
  await run(N);
}
await engine.shutdown();
rmSync(dir, { recursive: true, force: true });
if (mode !== 'run') console.log(JSON.stringify(out));
