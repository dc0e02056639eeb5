/**
 * `turnlog/otel` (docs/observability.md#traces): spans for turns, attempts and steps with the
 * caller's context as the turn's parent, a recovered attempt linked to the one it replaces
 * (across a real process worker that crashes), and the metrics, with the OTel SDK's in-memory
 * exporter and a collecting metric reader.
 */
import { fileURLToPath } from 'node:url';
import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { AggregationTemporality, MeterProvider, MetricReader, type ResourceMetrics } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ProcessExecutor } from '../../src/executor/process-executor.js';
import { jsonLogger, silentLogger } from '../../src/logger.js';
import { openTelemetry } from '../../src/otel/index.js';
import { Engine } from '../../src/runtime/engine.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { stepThenCrash } from '../fixtures/workflows/steps.js';
import { runaway } from '../fixtures/workflows/runaway.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { ensureBuilt } from '../cli/run-cli.js';

class CollectingReader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE });
  }
  protected override async onShutdown(): Promise<void> {}
  protected override async onForceFlush(): Promise<void> {}
}

const exporter = new InMemorySpanExporter();
const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const reader = new CollectingReader();
const meterProvider = new MeterProvider({ readers: [reader] });
const contextManager = new AsyncLocalStorageContextManager();
const cleanups: (() => Promise<void>)[] = [];

beforeAll(() => {
  contextManager.enable();
  context.setGlobalContextManager(contextManager);
});
afterAll(() => {
  context.disable();
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  exporter.reset();
});

async function metricPoints(): Promise<Map<string, { attributes: Record<string, unknown>; value: unknown }[]>> {
  const { resourceMetrics } = (await reader.collect()) as { resourceMetrics: ResourceMetrics };
  const out = new Map<string, { attributes: Record<string, unknown>; value: unknown }[]>();
  for (const sm of resourceMetrics.scopeMetrics) for (const m of sm.metrics) out.set(m.descriptor.name, m.dataPoints.map((p) => ({ attributes: p.attributes, value: p.value })));
  return out;
}

const byName = (spans: ReadableSpan[], prefix: string) => spans.filter((s) => s.name.startsWith(prefix));

describe('openTelemetry()', () => {
  it('traces a turn under the caller’s span, with attempts and steps, and counts it', async () => {
    const tmp = await makeTmpDir('turnlog-otel-');
    const wf = defineWorkflow({
      name: 'otel-agent',
      turn: async (ctx, q: string) => {
        const plan = await ctx.step('plan', () => `plan for ${q}`);
        await ctx.step('tool', () => {
          throw new Error('tool down');
        }).catch(() => undefined);
        return plan;
      },
    });
    const engine = await Engine.open({ store: tmp.path + '/s', workflows: [wf], logger: silentLogger, scanIntervalMs: 0, observers: [openTelemetry({ tracerProvider, meterProvider })] });
    cleanups.push(async () => {
      await engine.shutdown();
      await tmp.remove();
    });
    const caller = tracerProvider.getTracer('app').startSpan('handle request');
    const handle = await context.with(trace.setSpan(context.active(), caller), () => engine.start(wf, 'refund', { taskId: 'o-1' }));
    caller.end();
    await handle.nextTurn();

    const spans = exporter.getFinishedSpans();
    const [turn] = byName(spans, 'turnlog.turn');
    const [attempt] = byName(spans, 'turnlog.attempt');
    const steps = byName(spans, 'turnlog.step');
    expect(turn).toBeDefined();
    expect(turn!.spanContext().traceId).toBe(caller.spanContext().traceId);
    expect(turn!.parentSpanContext?.spanId).toBe(caller.spanContext().spanId);
    expect(turn!.attributes).toMatchObject({ 'turnlog.task_id': 'o-1', 'turnlog.workflow': 'otel-agent', 'turnlog.turn': 1, 'turnlog.outcome': 'completed', 'turnlog.executor': 'inline' });
    expect(attempt!.parentSpanContext?.spanId).toBe(turn!.spanContext().spanId);
    expect(attempt!.attributes).toMatchObject({ 'turnlog.attempt': 1, 'turnlog.entry_mode': 'fresh', 'turnlog.attempt.outcome': 'completed' });
    // docs/observability.md: `turnlog.worker.pid` is the process executor's; an inline attempt has none.
    expect(attempt!.attributes).not.toHaveProperty(['turnlog.worker.pid']);
    expect(steps.map((s) => [s.name, s.attributes['turnlog.step.outcome']])).toEqual([
      ['turnlog.step plan', 'ok'],
      ['turnlog.step tool', 'failed'],
    ]);
    expect(steps.every((s) => s.parentSpanContext?.spanId === attempt!.spanContext().spanId)).toBe(true);

    const points = await metricPoints();
    expect(points.get('turnlog.turns.started')).toEqual([{ attributes: { 'turnlog.workflow': 'otel-agent' }, value: 1 }]);
    expect(points.get('turnlog.turns.ended')).toEqual([{ attributes: { 'turnlog.workflow': 'otel-agent', 'turnlog.outcome': 'completed' }, value: 1 }]);
    const latency = points.get('turnlog.step.duration')!;
    expect(latency.map((p) => p.attributes['turnlog.step.name']).sort()).toEqual(['plan', 'tool']);
  });

  it('a recovered attempt after a process worker crash links to the attempt it replaces; the worker’s step is a child of attempt 1', async () => {
    ensureBuilt();
    const tmp = await makeTmpDir('turnlog-otel-');
    const module = fileURLToPath(new URL('../../dist/test/fixtures/workflows/index.js', import.meta.url));
    const exec = new ProcessExecutor({ workflowsModule: module, execArgv: [], logger: silentLogger });
    const engine = await Engine.open({ store: tmp.path + '/s', workflows: [stepThenCrash], executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0, observers: [openTelemetry({ tracerProvider, meterProvider })] });
    cleanups.push(async () => {
      await engine.shutdown();
      await tmp.remove();
    });
    const h = await engine.start(stepThenCrash, null, { taskId: 'o-crash' });
    await h.nextTurn();
    const spans = exporter.getFinishedSpans().filter((s) => s.attributes['turnlog.task_id'] === 'o-crash');
    const attempts = byName(spans, 'turnlog.attempt').sort((a, b) => Number(a.attributes['turnlog.attempt']) - Number(b.attributes['turnlog.attempt']));
    expect(attempts.map((a) => a.attributes['turnlog.attempt.outcome'])).toEqual(['crashed', 'completed']);
    expect(attempts[0]!.attributes['turnlog.worker.pid']).toBeGreaterThan(0);
    expect(attempts[1]!.attributes).toMatchObject({ 'turnlog.entry_mode': 'recovered', 'turnlog.recovery.rule': 'rerun', 'turnlog.executor': 'process' });
    expect(attempts[1]!.links.map((l) => l.context.spanId)).toEqual([attempts[0]!.spanContext().spanId]);
    const [step] = byName(spans, 'turnlog.step charge');
    expect(step!.parentSpanContext?.spanId).toBe(attempts[0]!.spanContext().spanId);
    const recoveries = (await metricPoints()).get('turnlog.recoveries');
    expect(recoveries).toContainEqual({ attributes: { 'turnlog.recovery.rule': 'rerun' }, value: 1 });
  });
});

describe('attempt outcomes', () => {
  it('a timed-out attempt reads timed_out (the turn’s word); a hard-capped one reads killed, with its worker killed event', async () => {
    ensureBuilt();
    const tmp = await makeTmpDir('turnlog-otel-');
    const module = fileURLToPath(new URL('../../dist/test/fixtures/workflows/index.js', import.meta.url));
    const exec = new ProcessExecutor({ workflowsModule: module, execArgv: [], logger: silentLogger });
    const cooperative = defineWorkflow({
      name: 'otel-cooperative',
      turnTimeoutMs: 200,
      graceMs: 5_000,
      turn: (ctx) => new Promise((_, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason as Error))),
    });
    const engine = await Engine.open({ store: tmp.path + '/s', workflows: [cooperative, runaway], executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0, observers: [openTelemetry({ tracerProvider })] });
    cleanups.push(async () => {
      await engine.shutdown();
      await tmp.remove();
    });
    await expect((await engine.start(cooperative, null, { taskId: 'o-coop' })).result()).rejects.toMatchObject({ code: 'TURNLOG_TURN_TIMED_OUT' });
    await expect((await engine.start(runaway, null, { taskId: 'o-kill' })).result()).rejects.toMatchObject({ code: 'TURNLOG_TURN_TIMED_OUT' });
    const attempt = (taskId: string) => byName(exporter.getFinishedSpans(), 'turnlog.attempt').find((s) => s.attributes['turnlog.task_id'] === taskId)!;
    expect(attempt('o-coop').attributes['turnlog.attempt.outcome']).toBe('timed_out');
    const killed = attempt('o-kill');
    expect(killed.attributes['turnlog.attempt.outcome']).toBe('killed');
    expect(killed.events.map((e) => e.name)).toContain('worker killed');
    expect(killed.events.find((e) => e.name === 'worker killed')!.attributes).toMatchObject({ 'turnlog.kill.signal': 'SIGKILL' });
  });
});

describe('trace ids on JSON log lines', () => {
  it('are there with openTelemetry(), and gone once openTelemetry({ logTraceIds: false }) is made, even after one that put them', () => {
    const lines: string[] = [];
    const logger = jsonLogger({ write: (l) => void lines.push(l) });
    const span = tracerProvider.getTracer('test').startSpan('request');
    const logInSpan = () => context.with(trace.setSpan(context.active(), span), () => logger.warn('inside a span'));
    openTelemetry({ tracerProvider });
    logInSpan();
    openTelemetry({ tracerProvider, logTraceIds: false });
    logInSpan();
    span.end();
    expect(JSON.parse(lines[0]!)).toMatchObject({ traceId: span.spanContext().traceId, spanId: span.spanContext().spanId });
    expect(JSON.parse(lines[1]!)).not.toHaveProperty('traceId');
    expect(JSON.parse(lines[1]!)).not.toHaveProperty('spanId');
  });
});
