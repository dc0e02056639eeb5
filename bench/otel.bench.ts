/**
 * Tracing overhead (issue #14): a 100-step inline turn with `turnlog/otel` and no SDK registered
 * (the API's no-op tracer and meter), and with the SDK and an in-memory span exporter plus a
 * metric reader, each as a ratio to the same turn with no observer, measured in the same run.
 * Goal: ≤ 1.05× with no SDK. The memory store keeps disk noise out of the ratios. Also the
 * observer's own cost per turn, computed by playing a real turn's hook calls into it in a loop.
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
  /** CPU time (user + system) of this process per round: less sensitive to other processes than wall time. */
  const cpu: number[][] = configs.map(() => []);
  try {
    for (const e of engines) for (let i = 0; i < 5; i++) await (await e.start(wf, null)).result(); // warm-up
    // Interleaved rounds in rotating order: drift on a shared machine hits every configuration
    // alike; each round's time is divided by the same round's `off` time, and the median of
    // those ratios is reported.
    for (let r = 0; r < ROUNDS; r++) {
      for (let k = 0; k < engines.length; k++) {
        const i = (r + k) % engines.length;
        const t0 = now();
        const c0 = process.cpuUsage();
        await (await engines[i]!.start(wf, null)).result();
        times[i]![r] = now() - t0;
        const c = process.cpuUsage(c0);
        cpu[i]![r] = (c.user + c.system) / 1000;
      }
      exporter.reset();
    }
  } finally {
    for (const e of engines) await e.shutdown();
  }
  // The observer's own cost, free of machine noise: every hook call of one real 100-step turn
  // (recorded from an engine), played into a fresh no-SDK observer in a loop, beside the turn's time.
  const calls: [keyof EngineObserver, unknown][] = [];
  const recorder: EngineObserver = {
    traceContext: () => {
      calls.push(['traceContext', undefined]);
      return undefined;
    },
    eventsAppended: (e) => void calls.push(['eventsAppended', e]),
    attemptStarted: (e) => void calls.push(['attemptStarted', e]),
    attemptEnded: (e) => void calls.push(['attemptEnded', e]),
  };
  const rec = await Engine.open({ store: new MemoryHistoryStore(), workflows: [wf], logger: silentLogger, scanIntervalMs: 0, observers: [recorder] });
  await (await rec.start(wf, null)).result();
  await rec.shutdown();
  const o = openTelemetry({ logTraceIds: false }) as Required<Pick<EngineObserver, 'traceContext' | 'eventsAppended' | 'attemptStarted' | 'attemptEnded'>>;
  const play = () => {
    for (const [hook, arg] of calls) (o[hook as 'eventsAppended'] as (a: unknown) => void)(arg);
  };
  const N = 20_000;
  let perTurnUs = Infinity;
  for (let r = 0; r < 5; r++) {
    const t0 = now();
    for (let i = 0; i < N; i++) play();
    perTurnUs = Math.min(perTurnUs, ((now() - t0) / N) * 1000);
  }
  const turnUs = median(times[0]!) * 1000;
  console.log(
    `otel observer, no SDK: ${perTurnUs.toFixed(2)} µs of its own per ${STEPS}-step turn (${calls.length} hook calls) vs ${(turnUs / 1000).toFixed(2)} ms per turn off → ${(1 + perTurnUs / turnUs).toFixed(5)}× (computed)`,
  );
  for (const [i, c] of configs.entries()) {
    const ratio = median(times[i]!.map((t, r) => t / times[0]![r]!));
    const cpuRatio = median(cpu[i]!.map((t, r) => t / cpu[0]![r]!));
    console.log(
      `${c.name.padEnd(34)} ${median(times[i]!).toFixed(2).padStart(8)} ms per ${STEPS}-step turn   wall ${ratio.toFixed(3)}× off, CPU ${cpuRatio.toFixed(3)}× off (medians of ${ROUNDS} paired rounds)`,
    );
  }
}
