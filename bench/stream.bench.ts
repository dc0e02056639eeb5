/**
 * Streaming benchmark (issue 12, docs/streaming.md): a 100-step turn streamed (tokens + a reader)
 * against the same turn not streamed; a token made durable (one recorded step each) against
 * `ctx.emit`; chunks per second from a process worker to a reader against protocol round trips
 * per second; emit → reader latency (median, p99). Ratios are measured in the same run.
 * Goal: streaming overhead ≤ 1.1×. Workers load dist/test/fixtures/workflows (npm run build).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Engine } from '../src/runtime/engine.js';
import { silentLogger } from '../src/logger.js';
import { MemoryHistoryStore } from '../src/store/memory-store.js';
import { LevelHistoryStore } from '../src/store/level-store.js';
import type { HistoryStore } from '../src/store/history-store.js';
import { ProcessExecutor } from '../src/executor/process-executor.js';
import { defineWorkflow } from '../src/workflow/define-workflow.js';
import type { StreamItem } from '../src/stream/items.js';
import * as fixtures from '../test/fixtures/workflows/index.js';

const MODULE = fileURLToPath(new URL('../test/fixtures/workflows/index.js', import.meta.url));
const now = () => performance.now();
const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
const median = (xs: number[]) => sorted(xs)[Math.floor(xs.length / 2)]!;
const pct = (xs: number[], p: number) => sorted(xs)[Math.min(xs.length - 1, Math.floor(xs.length * p))]!;
const fmt = (ms: number) => `${ms.toFixed(3)} ms`;

const TOKENS_PER_STEP = 5;
/** The turn of a tool-using agent: 100 steps, each followed by a few model tokens when streaming. */
const hundred = defineWorkflow({
  name: 'bench-hundred',
  turn: async (ctx, stream: boolean) => {
    for (let i = 0; i < 100; i++) {
      await ctx.step('tool', () => i);
      if (stream) for (let k = 0; k < TOKENS_PER_STEP; k++) ctx.emit(`token ${i}.${k} `);
    }
    return 'done';
  },
});
/** One token per recorded step: what making every token durable would cost. */
const durableTokens = defineWorkflow({
  name: 'bench-durable-tokens',
  turn: async (ctx, n: number) => {
    for (let i = 0; i < n; i++) await ctx.step('token', () => `token ${i} `);
    return n;
  },
});
const emittedTokens = defineWorkflow({
  name: 'bench-emitted-tokens',
  turn: async (ctx, n: number) => {
    for (let i = 0; i < n; i++) ctx.emit(`token ${i} `);
    return n;
  },
});
const WORKFLOWS = [hundred, durableTokens, emittedTokens, ...Object.values(fixtures)];

async function drain(it: AsyncIterable<StreamItem>, onItem?: (i: StreamItem) => void): Promise<number> {
  let n = 0;
  for await (const item of it) {
    n++;
    onItem?.(item);
  }
  return n;
}

async function overhead(label: string, store: HistoryStore, rounds: number): Promise<void> {
  const engine = await Engine.open({ store, workflows: WORKFLOWS, logger: silentLogger, scanIntervalMs: 0 });
  const plain: number[] = [];
  const streamed: number[] = [];
  for (let r = 0; r < 5; r++) await drain((await engine.start(hundred, true)).stream()); // JIT warm-up
  for (let r = 0; r < rounds; r++) {
    // Alternate, so drift (GC, disk) falls on both sides alike.
    let t0 = now();
    await (await engine.start(hundred, false)).result();
    plain.push(now() - t0);
    t0 = now();
    const h = await engine.start(hundred, true);
    const reading = drain(h.stream());
    await h.result();
    await reading;
    streamed.push(now() - t0);
  }
  await engine.shutdown();
  const ratio = median(streamed) / median(plain);
  console.log(`${label} 100-step turn: not streamed ${fmt(median(plain))}, streamed (${TOKENS_PER_STEP} tokens a step, one reader) ${fmt(median(streamed))} → ${ratio.toFixed(2)}× (goal ≤ 1.1×)`);
}

async function durability(label: string, store: HistoryStore, n: number): Promise<void> {
  const engine = await Engine.open({ store, workflows: WORKFLOWS, logger: silentLogger, scanIntervalMs: 0 });
  await (await engine.start(emittedTokens, 10)).result(); // warm-up
  let t0 = now();
  await (await engine.start(durableTokens, n)).result();
  const durable = (now() - t0) / n;
  t0 = now();
  await (await engine.start(emittedTokens, n)).result();
  const emitted = (now() - t0) / n;
  await engine.shutdown();
  console.log(`${label} per token: durable (one recorded event) ${(durable * 1000).toFixed(1)} µs, ctx.emit ${(emitted * 1000).toFixed(2)} µs → ${(durable / emitted).toFixed(0)}×`);
}

async function processRates(): Promise<void> {
  const exec = new ProcessExecutor({ workflowsModule: MODULE, execArgv: [], logger: silentLogger });
  const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: WORKFLOWS, executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0, streamBufferItems: 1_000_000 });
  await (await engine.start(fixtures.streamFlood, 10)).result(); // warm the pool
  const N = 50_000;
  let t0 = now();
  const h = await engine.start(fixtures.streamFlood, N);
  let chunks = 0;
  let lastAt = 0;
  await drain(h.stream(), (i) => {
    if (i.kind === 'chunk') {
      chunks++;
      lastAt = now();
    }
  });
  const chunkRate = chunks / ((lastAt - t0) / 1000);
  const M = 2_000;
  t0 = now();
  await (await engine.start(fixtures.streamRoundTrips, M)).result();
  const rtRate = M / ((now() - t0) / 1000);
  console.log(`process worker → reader: ${Math.round(chunkRate).toLocaleString('en')} chunks/s (${chunks}/${N} delivered); protocol round trips (record → ack, memory store): ${Math.round(rtRate).toLocaleString('en')}/s → ${(chunkRate / rtRate).toFixed(1)}×`);
  const stamps = 1_000;
  const lat: number[] = [];
  const hs = await engine.start(fixtures.streamStamps, stamps);
  await drain(hs.stream(), (i) => {
    if (i.kind === 'chunk') lat.push(performance.timeOrigin + performance.now() - (i.data as number));
  });
  console.log(`emit (process worker) → reader latency over ${lat.length} chunks: median ${fmt(median(lat))}, p99 ${fmt(pct(lat, 0.99))}`);
  await engine.shutdown();
  await exec.close();
}

export async function run(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'turnlog-bench-stream-'));
  try {
    await overhead('LevelDB (sync, the default)', new LevelHistoryStore(join(dir, 'overhead')), 15);
    await overhead('memory store (worst case: steps cost nothing)', new MemoryHistoryStore(), 40);
    await durability('memory store', new MemoryHistoryStore(), 2000);
    await durability('LevelDB (sync)', new LevelHistoryStore(join(dir, 'durable')), 500);
    await processRates();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
