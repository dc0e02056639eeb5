/**
 * Recovery pass probe (issue #16; docs/performance.md, "Recovering 10,000 tasks: where the 224 µs a
 * task went"). Not a bench section: a measuring tool for A/B builds, run after `npm run build`.
 *
 *   node bench/recovery-probe.mjs [N] [--warm] [--hooks] [--never] [--prof=out.cpuprofile] [--sites=out.heapprofile] [--heap] [--conc=K]
 *
 * Writes N one-step tasks a SIGKILLed engine left mid-turn (as bench/recovery.bench.ts does), opens
 * a new engine on them (64 at once) and prints, from `Engine.open` to `recovered()`: wall time,
 * process CPU a task, KB allocated a task (v8.GCProfiler), event-loop utilization, GC pauses, group
 * commits, and CPU per thread (main, its run-queue wait, and each other thread by id: V8's platform
 * threads first, then libuv's pool, then LevelDB's compaction). --warm runs a sequential 1,000-task
 * pass first (as the bench does); --hooks counts promises a task (async_hooks), --psites also by
 * creation site; --never uses a handler that never returns (recovery proper, without the turn's
 * run); --prof and --sites write an inspector CPU profile or sampling heap profile of the pass;
 * --heap (with node --expose-gc) prints the heap after the pass and writes a heap snapshot;
 * --conc=K recovers K at once instead of 64; --make=DIR writes the N-task store to DIR (turns of a day, so
 * they rerun when recovered later, not time out) and exits,
 * --from=DIR / --warm-from=DIR recover a copy of such a store (the pass / the warm-up's 1,000) instead of
 * building one in the process (callgrind: the store's build is not counted with the pass).
 */
import { cpSync, mkdtempSync, rmSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance, PerformanceObserver } from 'node:perf_hooks';
import { createHook } from 'node:async_hooks';
import v8mod from 'node:v8';
import { Session } from 'node:inspector/promises';
import { writeFileSync } from 'node:fs';
const profOut = process.argv.find((a) => a.startsWith('--prof='))?.slice(7);
const sitesOut = process.argv.find((a) => a.startsWith('--sites='))?.slice(8);
let session;
if (sitesOut) { session = new Session(); session.connect(); await session.post('HeapProfiler.enable'); }
if (profOut) { session = new Session(); session.connect(); await session.post('Profiler.enable'); await session.post('Profiler.setSamplingInterval', { interval: 200 }); }
import { Engine } from '../dist/src/runtime/engine.js';
import { silentLogger } from '../dist/src/logger.js';
import { LevelHistoryStore } from '../dist/src/store/level-store.js';
import { historyBuilder } from '../dist/src/testing/history-builder.js';
import { defineWorkflow } from '../dist/src/workflow/define-workflow.js';

const args = process.argv.slice(2);
const N = Number(args.find((a) => /^\d+$/.test(a)) ?? 10000);
const never = args.includes('--never');
const oneStep = defineWorkflow({ name: 'one-step', turn: never ? async () => new Promise(() => {}) : async (ctx, n) => ctx.step('double', () => n * 2) });

async function crashedStore(n, into) {
  const copyOf = into === undefined ? storeArg(n) : undefined;
  if (copyOf !== undefined) {
    const dir = mkdtempSync(join(tmpdir(), 'turnlog-recprof-'));
    cpSync(copyOf, dir, { recursive: true });
    return dir;
  }
  const dir = into ?? mkdtempSync(join(tmpdir(), 'turnlog-recprof-'));
  const store = new LevelHistoryStore(dir, { sync: false });
  await store.open();
  const start = Date.now();
  const writes = [];
  for (let i = 0; i < n; i++) {
    const id = `task-${String(i).padStart(6, '0')}`;
    const events = historyBuilder(id, { start, tick: 1, owner: 'dead', instance: 'dead-1' }).created({ workflow: 'one-step', kind: 'one-shot', ...(into === undefined ? {} : { policy: { turnTimeoutMs: 86_400_000 } }) }).input(i).turnStarted().build();
    writes.push(store.append(id, events, { expectedLastEventId: 0, generation: events[0].generation }));
    if (writes.length >= 500) await Promise.all(writes.splice(0));
  }
  await Promise.all(writes);
  await store.close();
  return dir;
}
/** --from=DIR (the pass) and --warm-from=DIR (the warm-up): a copy of a store --make wrote, instead of building one in this process. */
function storeArg(n) {
  const flag = n === 1000 && args.includes('--warm') && !warmed ? '--warm-from=' : '--from=';
  return args.find((a) => a.startsWith(flag))?.slice(flag.length);
}
let warmed = false;
function threads() {
  const out = {};
  for (const tid of readdirSync('/proc/self/task')) {
    const comm = readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').trim();
    const [ns, wait] = readFileSync(`/proc/self/task/${tid}/schedstat`, 'utf8').split(' ').map(Number);
    const k = tid === String(process.pid) ? "main" : comm + ":" + tid;
    out[k] = (out[k] ?? 0) + ns / 1e6;
    if (k === 'main') out.mainWait = wait / 1e6;
  }
  return out;
}
const sitesP = args.includes('--psites') ? new Map() : undefined;
async function pass(n, concurrency, label) {
  sitesP?.clear();
  const dir = await crashedStore(n);
  let promises = 0;
  const hook = args.includes('--hooks') ? createHook({ init(id, type) { if (type === 'PROMISE') { promises++; if (sitesP) { const o = {}; Error.stackTraceLimit = 6; Error.captureStackTrace(o); const fr = o.stack.split('\n').slice(2).map((l) => l.trim().replace(/^at /, '').replace(/\(.*\/(dist|node_modules)\//, '(').replace(/file:\/\/\S*\//, '')).filter((l) => !l.includes('node:internal')).slice(0, 2).join(' < '); sitesP.set(fr, (sitesP.get(fr) ?? 0) + 1); } } } }) : undefined;
  const th0 = threads();
  const cpu0 = process.cpuUsage();
  const elu0 = performance.eventLoopUtilization();
  let gcMs = 0, gcN = 0;
  const obs = new PerformanceObserver((l) => { for (const e of l.getEntries()) { gcMs += e.duration; gcN++; } });
  obs.observe({ entryTypes: ['gc'] });
  if (profOut && label === 'pass') await session.post('Profiler.start');
  if (sitesOut && label === 'pass') await session.post('HeapProfiler.startSampling', { samplingInterval: 512, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
  const gcp = new v8mod.GCProfiler(); gcp.start(); const h0 = v8mod.getHeapStatistics().used_heap_size;
  const t0 = performance.now();
  hook?.enable();
  const engine = await Engine.open({ store: dir, workflows: [oneStep], logger: silentLogger, scanIntervalMs: 0, recoveryConcurrency: concurrency });
  const openMs = performance.now() - t0;
  await engine.recovered();
  hook?.disable();
  const ms = performance.now() - t0;
  const elu = performance.eventLoopUtilization(elu0);
  const h1 = v8mod.getHeapStatistics().used_heap_size; let freed = 0;
  for (const st of gcp.stop().statistics) freed += st.beforeGC.heapStatistics.usedHeapSize - st.afterGC.heapStatistics.usedHeapSize;
  const kb = (h1 - h0 + freed) / n / 1024;
  if (sitesOut && label === 'pass') { const { profile } = await session.post('HeapProfiler.stopSampling'); writeFileSync(sitesOut, JSON.stringify(profile)); }
  if (profOut && label === 'pass') { const { profile } = await session.post('Profiler.stop'); writeFileSync(profOut, JSON.stringify(profile)); }
  obs.disconnect();
  const cpu = process.cpuUsage(cpu0);
  const th1 = threads();
  const stats = engine.store.commitStats;
  if (args.includes('--heap') && label === 'pass') {
    await new Promise((r) => setTimeout(r, 200));
    globalThis.gc(); globalThis.gc();
    console.log('heap used after pass', (process.memoryUsage().heapUsed / 1e6).toFixed(1), 'MB');
    const v8 = await import('node:v8');
    console.log('snapshot', v8.writeHeapSnapshot());
  }
  await engine.shutdown({ graceMs: 1000 });
  rmSync(dir, { recursive: true, force: true });
  if (sitesP) for (const [k, v] of [...sitesP].sort((a, b) => b[1] - a[1]).slice(0, 40)) console.log((v / n).toFixed(2).padStart(6), k);
  const d = Object.fromEntries(Object.keys(th1).map((k) => [k, Math.round(th1[k] - (th0[k] ?? 0))]));
  console.log(`${label} n=${n}: open ${openMs.toFixed(0)} ms, recovered ${ms.toFixed(0)} ms, CPU ${((cpu.user + cpu.system) / 1000).toFixed(0)} ms (${((cpu.user + cpu.system) / n).toFixed(0)} µs/task)` +
    (hook ? `, promises/task ${(promises / n).toFixed(1)}` : '') + ` alloc ${kb.toFixed(1)} KB/task heap+${((h1-h0)/1e6).toFixed(1)}MB` + ` ELU ${elu.utilization.toFixed(2)} gc ${gcMs.toFixed(0)} ms/${gcN}` + ` commits ${JSON.stringify(stats)} threads ${JSON.stringify(d)}`);
}
const make = args.find((a) => a.startsWith('--make='))?.slice(7);
if (make !== undefined) {
  await crashedStore(N, make);
  process.exit(0);
}
if (args.includes('--warm')) await pass(1000, 1, 'warm');
warmed = true;
const conc = Number(args.find((a) => a.startsWith('--conc='))?.slice(7) ?? 64);
await pass(N, conc, 'pass');
