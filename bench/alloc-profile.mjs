/**
 * Allocation and GC per unit of work (issue #16; docs/performance.md, "Allocation and GC per turn").
 * Not a bench section: a measuring tool for A/B builds, run after `npm run build`.
 *
 *   node bench/alloc-profile.mjs [mode] [rounds]
 *
 * mode: `turns` (one-step turns over 100 existing conversations, 100 in flight; default),
 * `new` (new one-step tasks, 100 in flight), `seq` (one-step turns on one conversation, one
 * after another), `step` (durable steps of 100-step workflows). It warms up first (6,000 units;
 * 3,000 for `seq`), then prints one JSON line with, per round of ALLOC_N units (4,000; 1,000 for
 * `seq`): KB allocated per unit (v8.GCProfiler: heap growth plus what each collection freed;
 * deterministic under load), process CPU per unit, CPU per unit of the main thread, of V8's
 * platform workers (the parallel GC, TurboFan) and of libuv's pool (by thread creation order in
 * /proc/self/task: Linux only), scavenges and mark-compacts, GC pause time per unit (a 'gc'
 * PerformanceObserver: wall time, inflated by load).
 *
 * Environment: ALLOC_ROOT another build's repository root (A/B: run both, alternating);
 * ALLOC_SYNC=1 sync LevelDB writes (default off: CPU, not the disk); ALLOC_N units a round;
 * ALLOC_GC=major|all a forced collection before each round (`gc({ type: 'major' })` or a bare
 * `gc()`, as bench:peers' harness did; needs --expose-gc); ALLOC_SITES=file.json writes V8's
 * sampling heap profile of the measured rounds (allocation sites, 512-byte interval) there.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { PerformanceObserver } from 'node:perf_hooks';
import { fileURLToPath, pathToFileURL } from 'node:url';
import v8 from 'node:v8';

const mode = process.argv[2] ?? 'turns';
const rounds = Number(process.argv[3] ?? 3);
const root = resolve(process.env.ALLOC_ROOT ?? join(fileURLToPath(import.meta.url), '../..'));
const N = Number(process.env.ALLOC_N ?? (mode === 'seq' ? 1000 : 4000));
if (!['turns', 'new', 'seq', 'step'].includes(mode)) throw new Error(`unknown mode ${mode}: turns, new, seq or step`);

const { Engine, silentLogger, defineWorkflow } = await import(pathToFileURL(join(root, 'dist/src/index.js')).href);
const { LevelHistoryStore } = await import(pathToFileURL(join(root, 'dist/src/store/level-store.js')).href);

const one = defineWorkflow({ name: 'one-step', turn: (ctx, x) => ctx.step('s', () => x + 1) });
const chat = defineWorkflow({ name: 'chat', kind: 'multi-turn', turn: (ctx, x) => ctx.step('s', () => x + 1) });
const many = defineWorkflow({
  name: 'many',
  turn: async (ctx) => {
    for (let i = 0; i < 100; i++) await ctx.step('s', () => i);
    return 1;
  },
});

const dir = mkdtempSync(join(tmpdir(), 'turnlog-alloc-'));
const store = new LevelHistoryStore(join(dir, 'store'), { sync: process.env.ALLOC_SYNC === '1' });
const engine = await Engine.open({ store, workflows: [one, chat, many], logger: silentLogger, scanIntervalMs: 0 });

let conversations;
async function run(n) {
  if (mode === 'new') {
    let i = 0;
    const worker = async () => {
      while (i < n) await (await engine.start(one, i++)).result();
    };
    await Promise.all(Array.from({ length: 100 }, worker));
  } else if (mode === 'turns' || mode === 'seq') {
    const count = mode === 'turns' ? 100 : 1;
    if (!conversations) {
      conversations = await Promise.all(Array.from({ length: count }, (_, i) => engine.start(chat, i)));
      await Promise.all(conversations.map((h) => h.nextTurn()));
    }
    const per = n / count;
    await Promise.all(
      conversations.map(async (h) => {
        for (let j = 0; j < per; j++) await h.turnResult(await h.send(j));
      }),
    );
  } else {
    for (let j = 0; j < n / 100; j++) await (await engine.start(many, null)).result();
  }
  return n;
}

/** CPU µs by thread: main, V8's platform workers (the six threads Node starts after it), the rest (libuv's pool). */
function threads() {
  const r = { main: 0, v8: 0, pool: 0 };
  const ids = readdirSync('/proc/self/task').sort((a, b) => a - b);
  for (const [rank, id] of ids.entries()) {
    let stat;
    try {
      stat = readFileSync(`/proc/self/task/${id}/stat`, 'utf8');
    } catch {
      continue; // the thread ended
    }
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const us = (Number(f[11]) + Number(f[12])) * 10_000; // clock ticks of 10 ms
    r[rank === 0 ? 'main' : rank <= 6 ? 'v8' : 'pool'] += us;
  }
  return r;
}

await run(mode === 'seq' ? 3000 : 6000);
let session;
if (process.env.ALLOC_SITES) {
  const { Session } = await import('node:inspector/promises');
  session = new Session();
  session.connect();
  await session.post('HeapProfiler.enable');
  await session.post('HeapProfiler.startSampling', { samplingInterval: 512, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
}
const out = [];
for (let r = 0; r < rounds; r++) {
  if (process.env.ALLOC_GC === 'major') globalThis.gc({ type: 'major' });
  else if (process.env.ALLOC_GC === 'all') globalThis.gc();
  let gcMs = 0;
  let scavenges = 0;
  let markCompacts = 0;
  const obs = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      gcMs += e.duration;
      if (e.detail.kind === 1) scavenges++;
      else if (e.detail.kind === 2 || e.detail.kind === 4) markCompacts++;
    }
  });
  obs.observe({ entryTypes: ['gc'] });
  const profiler = new v8.GCProfiler();
  profiler.start();
  const h0 = v8.getHeapStatistics().used_heap_size;
  const th0 = threads();
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const n = await run(N);
  const wall = performance.now() - t0;
  const c = process.cpuUsage(c0);
  const th1 = threads();
  const h1 = v8.getHeapStatistics().used_heap_size;
  let freed = 0;
  for (const s of profiler.stop().statistics) freed += s.beforeGC.heapStatistics.usedHeapSize - s.afterGC.heapStatistics.usedHeapSize;
  await new Promise((r) => setTimeout(r, 20)); // the observer's last entries
  obs.disconnect();
  out.push({
    kbPerUnit: +((h1 - h0 + freed) / n / 1024).toFixed(2),
    cpuUs: +((c.user + c.system) / n).toFixed(1),
    mainUs: Math.round((th1.main - th0.main) / n),
    v8WorkersUs: Math.round((th1.v8 - th0.v8) / n),
    poolUs: Math.round((th1.pool - th0.pool) / n),
    scavenges,
    markCompacts,
    gcPauseUs: +((gcMs * 1000) / n).toFixed(1),
    perS: Math.round(n / (wall / 1000)),
  });
}
if (session) {
  const { profile } = await session.post('HeapProfiler.stopSampling');
  writeFileSync(process.env.ALLOC_SITES, JSON.stringify(profile));
}
console.log(JSON.stringify({ root, mode, units: N, rounds: out }));
await engine.shutdown();
rmSync(dir, { recursive: true, force: true });
