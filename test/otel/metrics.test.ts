/**
 * The store and worker metrics of `turnlog/otel` (docs/observability.md#metrics): append latency
 * (`turnlog.append.duration`, one point per append this engine made), group-commit batch size
 * (`turnlog.group_commit.batch_size`, the store's own batches: LevelDB and PostgreSQL) and the
 * worker pool size (`turnlog.worker.pool.size`, a gauge read when the SDK collects). Real stores,
 * real worker processes, the SDK's collecting metric reader; the figures are checked against the
 * store's and executor's own counters, never against time.
 */
import { fileURLToPath } from 'node:url';
import { AggregationTemporality, MeterProvider, MetricReader, type Histogram, type ResourceMetrics } from '@opentelemetry/sdk-metrics';
import { afterEach, describe, expect, it } from 'vitest';
import { ProcessExecutor } from '../../src/executor/process-executor.js';
import { silentLogger } from '../../src/logger.js';
import { openTelemetry } from '../../src/otel/index.js';
import { Engine } from '../../src/runtime/engine.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import type { EngineObserver } from '../../src/runtime/observe.js';
import type { LevelHistoryStore } from '../../src/store/level-store.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { stepThenCrash } from '../fixtures/workflows/steps.js';
import { runaway, runawayChat } from '../fixtures/workflows/runaway.js';
import { PG_URL, describePg, dropSchema, uniqueSchema } from '../helpers/postgres.js';
import { until } from '../helpers/processes.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { ensureBuilt } from '../cli/run-cli.js';

class CollectingReader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE });
  }
  protected override async onShutdown(): Promise<void> {}
  protected override async onForceFlush(): Promise<void> {}
}

/** A meter provider of its own and its points by instrument name. */
function metering(): { meterProvider: MeterProvider; points: () => Promise<Map<string, { attributes: Record<string, unknown>; value: unknown }[]>> } {
  const reader = new CollectingReader();
  const meterProvider = new MeterProvider({ readers: [reader] });
  return {
    meterProvider,
    points: async () => {
      const { resourceMetrics } = (await reader.collect()) as { resourceMetrics: ResourceMetrics };
      const out = new Map<string, { attributes: Record<string, unknown>; value: unknown }[]>();
      for (const sm of resourceMetrics.scopeMetrics) for (const m of sm.metrics) out.set(m.descriptor.name, m.dataPoints.map((p) => ({ attributes: p.attributes, value: p.value })));
      return out;
    },
  };
}

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

const work = defineWorkflow({
  name: 'metrics-work',
  turn: async (ctx, n: number) => {
    for (let i = 0; i < 3; i++) await ctx.step(`s${i}`, () => n + i);
    return n;
  },
});

/** Counts this engine's appends as the seam reports them. */
function appendCounter(): { observer: EngineObserver; count: () => number } {
  let n = 0;
  return { observer: { eventsAppended: (e) => void (e.origin === 'engine' && n++) }, count: () => n };
}

const histogram = (v: unknown) => v as Histogram;

describe('store metrics on LevelDB', () => {
  it('append latency has one point per append; the batch size histogram sums to the writes of the store’s batches', async () => {
    const tmp = await makeTmpDir('turnlog-metrics-');
    const mt = metering();
    const appends = appendCounter();
    const engine = await Engine.open({ store: tmp.path + '/s', workflows: [work], logger: silentLogger, scanIntervalMs: 0, observers: [openTelemetry({ meterProvider: mt.meterProvider }), appends.observer] });
    cleanups.push(() => tmp.remove());
    // Twenty tasks at once: their appends arrive while earlier ones are being written.
    const handles = await Promise.all(Array.from({ length: 20 }, (_, i) => engine.start(work, i)));
    await Promise.all(handles.map((h) => h.result()));
    const store = engine.store as LevelHistoryStore;
    await engine.shutdown();
    const stats = store.commitStats;
    const points = await mt.points();
    const latency = histogram(points.get('turnlog.append.duration')![0]!.value);
    expect(latency.count).toBe(appends.count());
    expect(latency.count).toBeGreaterThanOrEqual(20 * 5);
    expect(latency.min).toBeGreaterThanOrEqual(0);
    const batches = histogram(points.get('turnlog.group_commit.batch_size')![0]!.value);
    expect(batches.count).toBe(stats.batches);
    expect(batches.sum).toBe(stats.writes);
    expect(batches.min).toBeGreaterThanOrEqual(1);
  });

  it('with no SDK (a no-op meter) nothing is recorded and the engine runs as usual', async () => {
    const tmp = await makeTmpDir('turnlog-metrics-');
    const engine = await Engine.open({ store: tmp.path + '/s', workflows: [work], logger: silentLogger, scanIntervalMs: 0, observers: [openTelemetry()] });
    cleanups.push(async () => {
      await engine.shutdown();
      await tmp.remove();
    });
    expect(await (await engine.start(work, 7)).result()).toBe(7);
  });
});

describe('turn metrics of turns this engine did not start', () => {
  it('a turn recovery finalizes (backstop, marker) counts under its workflow, though another process created the task', async () => {
    const store = new MemoryHistoryStore();
    await store.open();
    // Left by an engine that died: two open turns, one past its deadline, one with its timeout marker.
    const back = historyBuilder('back').created({ workflow: 'metrics-work', kind: 'multi-turn' }).input(1).turnStarted().build();
    const mark = historyBuilder('mark').created({ workflow: 'metrics-work', kind: 'multi-turn' }).input(1).turnStarted().marker().build();
    for (const [id, events] of [['back', back], ['mark', mark]] as const) await store.append(id, events, { expectedLastEventId: 0, generation: 1 });
    const mt = metering();
    const clock = new ManualClock(Date.parse('2026-01-01T01:00:00Z'));
    const engine = await Engine.open({ store, workflows: [work], logger: silentLogger, clock, scanIntervalMs: 0, observers: [openTelemetry({ meterProvider: mt.meterProvider })] });
    cleanups.push(() => engine.shutdown());
    await engine.recovered();
    const points = await mt.points();
    expect(points.get('turnlog.recoveries')).toEqual(expect.arrayContaining([
      { attributes: { 'turnlog.recovery.rule': 'backstop' }, value: 1 },
      { attributes: { 'turnlog.recovery.rule': 'marker' }, value: 1 },
    ]));
    expect(points.get('turnlog.turns.ended')).toEqual([{ attributes: { 'turnlog.workflow': 'metrics-work', 'turnlog.outcome': 'timed_out' }, value: 2 }]);
  });
});

describe('worker pool size', () => {
  it('is the process executor’s live workers when the SDK collects, per executor', async () => {
    ensureBuilt();
    const tmp = await makeTmpDir('turnlog-metrics-');
    const mt = metering();
    const module = fileURLToPath(new URL('../../dist/test/fixtures/workflows/index.js', import.meta.url));
    const exec = new ProcessExecutor({ workflowsModule: module, execArgv: [], logger: silentLogger, warmPool: 2 });
    const engine = await Engine.open({ store: tmp.path + '/s', workflows: [stepThenCrash], executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0, observers: [openTelemetry({ meterProvider: mt.meterProvider })] });
    cleanups.push(async () => {
      await engine.shutdown();
      await tmp.remove();
    });
    await (await engine.start(stepThenCrash, null)).result();
    // Settled: the crashed worker is gone and the warm pool refilled.
    await until(() => exec.readyWarmCount === 2 && exec.workerCount === 2, 'the warm pool to refill');
    const pool = (await mt.points()).get('turnlog.worker.pool.size');
    expect(pool).toEqual([{ attributes: { 'turnlog.executor': 'process' }, value: 2 }]);
    await engine.shutdown();
    expect((await mt.points()).get('turnlog.worker.pool.size')).toEqual([{ attributes: { 'turnlog.executor': 'process' }, value: 0 }]);
  });
});

describe('worker kills', () => {
  it('counts a hard-cap kill and a kill when a cancel’s grace ran out, under the workflow', async () => {
    ensureBuilt();
    const tmp = await makeTmpDir('turnlog-metrics-');
    const mt = metering();
    const module = fileURLToPath(new URL('../../dist/test/fixtures/workflows/index.js', import.meta.url));
    const exec = new ProcessExecutor({ workflowsModule: module, execArgv: [], logger: silentLogger });
    const engine = await Engine.open({ store: tmp.path + '/s', workflows: [runaway, runawayChat], executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0, observers: [openTelemetry({ meterProvider: mt.meterProvider })] });
    cleanups.push(async () => {
      await engine.shutdown();
      await tmp.remove();
    });
    const timedOut = await engine.start(runaway, null);
    await expect(timedOut.result()).rejects.toMatchObject({ code: 'TURNLOG_TURN_TIMED_OUT' });
    await engine.start(runawayChat, 'hang', { taskId: 'spins' });
    await until(async () => (await engine.history('spins')).some((e) => e.type === 'TurnStarted'), 'the spinning turn to start');
    await engine.cancel('spins', 'stop');
    await until(async () => (await engine.history('spins')).some((e) => e.type === 'TaskCompleted'), 'the cancel to end the task');
    const reasons = (await engine.history('spins')).flatMap((e) => (e.type === 'WorkerKilled' ? [e.reason] : []));
    expect(reasons).toEqual(['cancel grace expired']);
    const kills = (await mt.points()).get('turnlog.worker.kills');
    expect(kills).toEqual([
      { attributes: { 'turnlog.workflow': 'iso-runaway' }, value: 1 },
      { attributes: { 'turnlog.workflow': 'iso-runaway-chat' }, value: 1 },
    ]);
  });
});

describePg('store metrics on PostgreSQL', () => {
  it('the batch size histogram sums to the appends of the store’s group commits', async () => {
    const schema = uniqueSchema('turnlog_metrics');
    cleanups.push(() => dropSchema(schema));
    const store = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
    cleanups.push(() => store.close());
    const mt = metering();
    const appends = appendCounter();
    const engine = await Engine.open({ store, workflows: [work], logger: silentLogger, scanIntervalMs: 0, observers: [openTelemetry({ meterProvider: mt.meterProvider }), appends.observer] });
    const handles = await Promise.all(Array.from({ length: 10 }, (_, i) => engine.start(work, i)));
    await Promise.all(handles.map((h) => h.result()));
    await engine.shutdown();
    const stats = store.groupCommitStats();
    const points = await mt.points();
    expect(histogram(points.get('turnlog.append.duration')![0]!.value).count).toBe(appends.count());
    const batches = histogram(points.get('turnlog.group_commit.batch_size')![0]!.value);
    expect(batches.count).toBe(stats.batches);
    expect(batches.sum).toBe(stats.appends);
    expect(stats.appends).toBe(appends.count());
  });
});
