// Sequential durable steps, one process: async_hooks init counts a step, process CPU a step, or a
// fixed run for callgrind (docs/performance.md, "Promise layers on a step's path, counted").
// After `npm run build`: node bench/step-probe.mjs promises | cpu | main | fixed:WARM:MEASURED [dist dir]
// (SYNC=1 for sync writes; callgrind: valgrind --tool=callgrind --separate-threads=yes, main thread).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createHook } from 'node:async_hooks';
const mode = process.argv[2] ?? 'promises';
const root = resolve(process.argv[3] ?? 'dist');
const { Engine } = await import(join(root, 'src/runtime/engine.js'));
const { silentLogger } = await import(join(root, 'src/logger.js'));
const { defineWorkflow } = await import(join(root, 'src/workflow/define-workflow.js'));
const { LevelHistoryStore } = await import(join(root, 'src/store/level-store.js'));
const sync = process.env.SYNC === '1';
let steps = 100;
const many = defineWorkflow({ name: 'many', turn: async (ctx) => { for (let i = 0; i < steps; i++) await ctx.step('s', () => i); return 0; } });
const dir = await mkdtemp(join(tmpdir(), 'probe-'));
const engine = await Engine.open({ store: new LevelHistoryStore(join(dir, 'db'), { sync }), workflows: [many], logger: silentLogger, scanIntervalMs: 0 });
const block = async (n) => { steps = n; await (await engine.start(many, null)).result(); };
const cpu = () => { const u = process.cpuUsage(); return u.user + u.system; };
if (mode === 'promises') {
  for (let i = 0; i < 30; i++) await block(100);
  const counts = new Map();
  let on = false;
  createHook({ init(id, type) { if (on) counts.set(type, (counts.get(type) ?? 0) + 1); } }).enable();
  // difference between 1100-step and 100-step turns: per-step, without the turn's own cost
  on = true; await block(100); on = false; const a = new Map(counts); counts.clear();
  on = true; await block(1100); on = false; const b = new Map(counts);
  const out = {};
  for (const [k, v] of b) out[k] = (v - (a.get(k) ?? 0)) / 1000;
  console.log(JSON.stringify(out));
} else if (mode === 'cpu') {
  for (let i = 0; i < 30; i++) await block(100);
  const xs = [];
  for (let i = 0; i < 20; i++) { const c = cpu(); await block(500); xs.push((cpu() - c) / 500); }
  xs.sort((a, b) => a - b);
  console.log(`cpu/step median ${xs[10].toFixed(1)} µs min ${xs[0].toFixed(1)}`);
} else if (mode === 'main') {
  // The main thread's CPU alone (Linux schedstat, ns): not V8's compiler and GC threads nor libuv's pool.
  const { readFileSync } = await import('node:fs');
  const run = () => Number(readFileSync('/proc/thread-self/schedstat', 'utf8').split(' ')[0]) / 1000;
  for (let i = 0; i < 30; i++) await block(100);
  const xs = [];
  for (let i = 0; i < 20; i++) { const c = run(); await block(500); xs.push((run() - c) / 500); }
  xs.sort((a, b) => a - b);
  console.log(`main-thread cpu/step median ${xs[10].toFixed(1)} µs min ${xs[0].toFixed(1)}`);
} else if (mode.startsWith('fixed:')) {
  const [, w, m] = mode.split(':').map(Number);
  for (let i = 0; i < w / 100; i++) await block(100);
  for (let i = 0; i < m / 100; i++) await block(100);
}
await engine.shutdown();
await rm(dir, { recursive: true, force: true });
