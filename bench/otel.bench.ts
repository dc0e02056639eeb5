/**
 * Tracing overhead (issue #14): a 100-step inline turn with `turnlog/otel` and no SDK registered
 * (the API's no-op tracer and meter), and with the SDK and an in-memory span exporter plus a
 * metric reader, each as a ratio to the same turn with no observer, measured in the same run.
 * Goal: ≤ 1.05× with no SDK. The memory store keeps disk noise out of the ratios.
 */
import { AggregationTemporality, MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { silentLogger } from '../src/logger.js';
import { openTelemetry } from '../src/otel/index.js';
import { Engine } from '../src/runtime/engine.js';
import type { EngineObserver } from '../src/runtime/observe.js';
import { MemoryHistoryStore } from '../src/store/memory-store.js';
import { defineWorkflow } from '../src/workflow/define-workflow.js';

const now = () => Number(process.hrtime.bigint()) / 1e6;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

class CollectingReader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE });
  }
  protected override async onShutdown(): Promise<void> {}
  protected override async onForceFlush(): Promise<void> {}
}

const STEPS = 100;
const ROUNDS = 120;

export async function run(): Promise<void> {
  const wf = defineWorkflow({
    name: 'hundred-steps',
    turn: async (ctx) => {
      for (let i = 0; i < STEPS; i++) await ctx.step('s', () => i);
      return STEPS;
    },
  });
  const exporter = new InMemorySpanExporter();
  const sdk = {
    tracerProvider: new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
    meterProvider: new MeterProvider({ readers: [new CollectingReader()] }),
  };
  const configs: { name: string; observers: EngineObserver[] }[] = [
    { name: 'off', observers: [] },
    { name: 'seam only (an empty observer)', observers: [{ eventsAppended: () => undefined, attemptStarted: () => undefined }] },
    { name: 'otel, no SDK', observers: [openTelemetry({ logTraceIds: false })] },
    { name: 'otel + SDK (in-memory exporter)', observers: [openTelemetry({ ...sdk, logTraceIds: false })] },
  ];
  const engines = await Promise.all(
    configs.map((c) => Engine.open({ store: new MemoryHistoryStore(), workflows: [wf], logger: silentLogger, scanIntervalMs: 0, observers: c.observers })),
  );
  const times: number[][] = configs.map(() => []);
  try {
    for (const e of engines) for (let i = 0; i < 5; i++) await (await e.start(wf, null)).result(); // warm-up
    // Interleaved rounds in rotating order: drift on a shared machine hits every configuration
    // alike; each round's time is divided by the same round's `off` time, and the median of
    // those ratios is reported.
    for (let r = 0; r < ROUNDS; r++) {
      for (let k = 0; k < engines.length; k++) {
        const i = (r + k) % engines.length;
        const t0 = now();
        await (await engines[i]!.start(wf, null)).result();
        times[i]![r] = now() - t0;
      }
      exporter.reset();
    }
  } finally {
    for (const e of engines) await e.shutdown();
  }
  // The observer's own cost, free of machine noise: its handling of one step event, alone, in
  // a loop, beside the time of one step with tracing off.
  const o = openTelemetry({ logTraceIds: false });
  o.eventsAppended!({ taskId: 'm', events: [{ type: 'TurnStarted', turn: 1, attempt: 1, inputIds: [], time: 0, turnStartedAt: 0, pid: 1 } as never], generation: 1, origin: 'engine' });
  o.attemptStarted!({ taskId: 'm', workflow: 'w', turn: 1, attempt: 1, entryMode: 'fresh', executor: 'inline', replayedCalls: 0, time: 0 });
  const step = { taskId: 'm', events: [{ type: 'StepCompleted', turn: 1, attempt: 1, seq: 1, name: 's', durationMs: 1, time: 5 } as never], generation: 1, origin: 'engine' as const };
  const N = 200_000;
  let ns = Infinity;
  for (let r = 0; r < 5; r++) {
    const t0 = now();
    for (let i = 0; i < N; i++) o.eventsAppended!(step);
    ns = Math.min(ns, ((now() - t0) / N) * 1e6);
  }
  const stepUs = (median(times[0]!) / STEPS) * 1000;
  console.log(`otel observer, no SDK: ${ns.toFixed(0)} ns per step event vs ${stepUs.toFixed(1)} µs per step off → ${(1 + ns / 1000 / stepUs).toFixed(4)}× (computed)`);
  for (const [i, c] of configs.entries()) {
    const ratio = median(times[i]!.map((t, r) => t / times[0]![r]!));
    console.log(`${c.name.padEnd(34)} ${median(times[i]!).toFixed(2).padStart(8)} ms per ${STEPS}-step turn   ${ratio.toFixed(3)}× off (median of ${ROUNDS} paired rounds)`);
  }
}
