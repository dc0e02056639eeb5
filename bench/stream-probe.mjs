// Streaming overhead, one process: a 100-step turn streamed (5 tokens a step, one reader) vs not.
// After `npm run build`: node bench/stream-probe.mjs promises | main | alloc | time:ROUNDS | fixed:N | plain:N [dist dir]
// (STORE=memory for the memory store; default LevelDB with sync writes.) docs/performance.md.
//   promises: async_hooks inits per step, streamed minus not streamed (÷5: per token)
//   main:     main-thread CPU per step (Linux schedstat, coarse: tick-granular), streamed and not
//   alloc:    bytes allocated per step (v8.GCProfiler), streamed and not
//   time:N    the bench's overhead measure alone: N alternating rounds, medians
//   fixed:N   N streamed turns (plain:N not streamed), for --cpu-prof, or callgrind: N=30 minus N=10
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createHook } from 'node:async_hooks';
import { readFileSync } from 'node:fs';
const mode = process.argv[2] ?? 'promises';
const root = resolve(process.argv[3] ?? 'dist');
const { Engine } = await import(join(root, 'src/runtime/engine.js'));
const { silentLogger } = await import(join(root, 'src/logger.js'));
const { defineWorkflow } = await import(join(root, 'src/workflow/define-workflow.js'));
const { LevelHistoryStore } = await import(join(root, 'src/store/level-store.js'));
const { MemoryHistoryStore } = await import(join(root, 'src/store/memory-store.js'));
let steps = 100;
const TOKENS = 5;
const hundred = defineWorkflow({
  name: 'hundred',
  turn: async (ctx, stream) => {
    for (let i = 0; i < steps; i++) {
      await ctx.step('tool', () => i);
      if (stream) for (let k = 0; k < TOKENS; k++) ctx.emit(`token ${i}.${k} `);
    }
    return 'done';
  },
});
const dir = await mkdtemp(join(tmpdir(), 'stream-probe-'));
const store = process.env.STORE === 'memory' ? new MemoryHistoryStore() : new LevelHistoryStore(join(dir, 'db'));
const engine = await Engine.open({ store, workflows: [hundred], logger: silentLogger, scanIntervalMs: 0 });
async function turn(stream, n = 100) {
  steps = n;
  const h = await engine.start(hundred, stream);
  if (!stream || process.env.NO_READER === '1') return h.result();
  let items = 0;
  const reading = (async () => { for await (const _ of h.stream()) items++; })();
  await h.result();
  await reading;
  return items;
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
for (let i = 0; i < 10; i++) { await turn(true); await turn(false); }
if (mode === 'promises') {
  const counts = new Map();
  let on = false;
  createHook({ init(_id, type) { if (on) counts.set(type, (counts.get(type) ?? 0) + 1); } }).enable();
  const per = async (stream) => {
    counts.clear(); on = true; await turn(stream, 100); on = false; const a = new Map(counts);
    counts.clear(); on = true; await turn(stream, 600); on = false; const b = new Map(counts);
    const out = {};
    for (const [k, v] of b) out[k] = +((v - (a.get(k) ?? 0)) / 500).toFixed(2);
    return out;
  };
  const plain = await per(false);
  const streamed = await per(true);
  const diff = {};
  for (const k of new Set([...Object.keys(plain), ...Object.keys(streamed)])) diff[k] = +(((streamed[k] ?? 0) - (plain[k] ?? 0)) / TOKENS).toFixed(2);
  console.log(`per step, not streamed ${JSON.stringify(plain)}; streamed ${JSON.stringify(streamed)}; per token ${JSON.stringify(diff)}`);
} else if (mode === 'main') {
  // Pairs of 200-step turns, alternating; the lower quartile of each side (other processes only add).
  const run = () => Number(readFileSync('/proc/thread-self/schedstat', 'utf8').split(' ')[0]) / 1000;
  const q1 = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 4)];
  const p = [], s = [];
  for (let i = 0; i < 40; i++) {
    let c = run(); await turn(false, 200); p.push((run() - c) / 200);
    c = run(); await turn(true, 200); s.push((run() - c) / 200);
  }
  console.log(`main-thread cpu/step (lower quartile): not streamed ${q1(p).toFixed(1)} µs, streamed ${q1(s).toFixed(1)} µs (+${((q1(s) - q1(p)) / TOKENS).toFixed(2)} µs a token; medians ${median(p).toFixed(1)}, ${median(s).toFixed(1)})`);
} else if (mode === 'alloc') {
  // Bytes allocated (v8.GCProfiler: heap growth plus what each collection freed), 20 turns a side.
  const { default: v8 } = await import('node:v8');
  const bytes = async (stream) => {
    const prof = new v8.GCProfiler();
    prof.start();
    const h0 = v8.getHeapStatistics().used_heap_size;
    for (let i = 0; i < 20; i++) await turn(stream, 100);
    const h1 = v8.getHeapStatistics().used_heap_size;
    let freed = 0;
    for (const g of prof.stop().statistics) freed += g.beforeGC.heapStatistics.usedHeapSize - g.afterGC.heapStatistics.usedHeapSize;
    return (h1 - h0 + freed) / 2000;
  };
  const p = [], s = [];
  for (let i = 0; i < 5; i++) { p.push(await bytes(false)); s.push(await bytes(true)); }
  console.log(`allocated a step (median of 5 × 20 turns): not streamed ${(median(p) / 1024).toFixed(2)} KB, streamed ${(median(s) / 1024).toFixed(2)} KB (+${((median(s) - median(p)) / TOKENS).toFixed(0)} bytes a token)`);
} else if (mode.startsWith('time:')) {
  const rounds = Number(mode.slice(5));
  const p = [], s = [];
  for (let r = 0; r < rounds; r++) {
    let t0 = performance.now(); await turn(false); p.push(performance.now() - t0);
    t0 = performance.now(); await turn(true); s.push(performance.now() - t0);
  }
  console.log(`${process.env.STORE ?? 'level'}: not streamed ${median(p).toFixed(2)} ms, streamed ${median(s).toFixed(2)} ms → ${(median(s) / median(p)).toFixed(2)}×`);
} else if (mode.startsWith('fixed:')) {
  // SITES=file.json: V8's sampling heap profile of these turns, collected objects included.
  const { Session } = await import('node:inspector/promises');
  const session = process.env.SITES ? new Session() : undefined;
  session?.connect();
  await session?.post('HeapProfiler.startSampling', { samplingInterval: 512, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
  for (let i = 0; i < Number(mode.slice(6)); i++) await turn(true);
  if (session) (await import('node:fs')).writeFileSync(process.env.SITES, JSON.stringify((await session.post('HeapProfiler.stopSampling')).profile));
} else if (mode.startsWith('plain:')) {
  for (let i = 0; i < Number(mode.slice(6)); i++) await turn(false);
}
await engine.shutdown();
await rm(dir, { recursive: true, force: true });
