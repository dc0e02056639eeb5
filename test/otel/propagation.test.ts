/**
 * Trace context propagation (docs/observability.md#traces): the sender's OTel context at
 * `start`/`send` is recorded with the input (`InputQueued.trace`), so the turn span is a child of
 * the sender's span on whichever engine runs the turn — another engine on PostgreSQL, an engine
 * that recovers the turn after the first one stopped, or a turn run in a process worker. Each
 * engine has its own tracer provider and in-memory exporter, so a span says which engine made it.
 */
import { fileURLToPath } from 'node:url';
import { context, trace, type Span } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ProcessExecutor } from '../../src/executor/process-executor.js';
import { silentLogger } from '../../src/logger.js';
import { openTelemetry } from '../../src/otel/index.js';
import { Engine } from '../../src/runtime/engine.js';
import type { EngineObserver } from '../../src/runtime/observe.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { stepThenCrash } from '../fixtures/workflows/steps.js';
import { PG_URL, describePg, dropSchema, uniqueSchema } from '../helpers/postgres.js';
import { until } from '../helpers/processes.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { ensureBuilt } from '../cli/run-cli.js';

const contextManager = new AsyncLocalStorageContextManager();
const cleanups: (() => Promise<unknown>)[] = [];
beforeAll(() => {
  contextManager.enable();
  context.setGlobalContextManager(contextManager);
});
afterAll(() => {
  context.disable();
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

/** A tracer provider with its own in-memory exporter: the spans one engine made. */
function tracing(): { provider: BasicTracerProvider; spans: (taskId: string, prefix: string) => ReadableSpan[] } {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  return { provider, spans: (taskId, prefix) => exporter.getFinishedSpans().filter((s) => s.attributes['turnlog.task_id'] === taskId && s.name.startsWith(prefix)) };
}

const app = tracing();
/** Runs `fn` with a new span of the app active, as a request handler would; returns the span. */
async function underRequest<T>(fn: () => Promise<T>): Promise<{ span: Span; result: T }> {
  const span = app.provider.getTracer('app').startSpan('POST /chat');
  const result = await context.with(trace.setSpan(context.active(), span), fn);
  span.end();
  return { span, result };
}

const childOf = (s: ReadableSpan | undefined, parent: Span) => {
  expect(s, 'span exported').toBeDefined();
  expect(s!.spanContext().traceId).toBe(parent.spanContext().traceId);
  expect(s!.parentSpanContext?.spanId).toBe(parent.spanContext().spanId);
};

/** Waits for a release; the first attempt of `hold-…` inputs waits forever (until the engine stops). */
const gate = defineWorkflow({
  name: 'prop-gate',
  turn: async (ctx, input: string) => {
    if (input.startsWith('hold') && ctx.attempt === 1) await new Promise(() => undefined);
    return ctx.step('answer', () => `answered ${input}`);
  },
});

describe('trace context recorded with the input', () => {
  it('is what the observer hook returns in the sender’s context, on InputQueued, and none is recorded without an active span', async () => {
    const tmp = await makeTmpDir('turnlog-prop-');
    const t = tracing();
    const engine = await Engine.open({ store: tmp.path + '/s', workflows: [gate], logger: silentLogger, scanIntervalMs: 0, observers: [openTelemetry({ tracerProvider: t.provider })] });
    cleanups.push(async () => {
      await engine.shutdown();
      await tmp.remove();
    });
    const { span, result: h } = await underRequest(() => engine.start(gate, 'q', { taskId: 'p-local' }));
    await h.result();
    const queued = (await engine.history('p-local')).find((e) => e.type === 'InputQueued');
    expect(queued).toMatchObject({ trace: { traceparent: `00-${span.spanContext().traceId}-${span.spanContext().spanId}-01` } });
    childOf(t.spans('p-local', 'turnlog.turn')[0], span);
    // No active span: nothing recorded, the turn starts a new trace.
    const plain = await engine.start(gate, 'q', { taskId: 'p-plain' });
    await plain.result();
    expect((await engine.history('p-plain')).find((e) => e.type === 'InputQueued')).not.toHaveProperty('trace');
    expect(t.spans('p-plain', 'turnlog.turn')[0]!.parentSpanContext).toBeUndefined();
  });

  it('an observer hook returning garbage or throwing records nothing and breaks nothing', async () => {
    const tmp = await makeTmpDir('turnlog-prop-');
    const bad: EngineObserver[] = [
      { traceContext: () => ({ traceparent: 'not a traceparent' }) },
      {
        traceContext: () => {
          throw new Error('observer bug');
        },
      },
    ];
    const engine = await Engine.open({ store: tmp.path + '/s', workflows: [gate], logger: silentLogger, scanIntervalMs: 0, observers: bad });
    cleanups.push(async () => {
      await engine.shutdown();
      await tmp.remove();
    });
    await (await engine.start(gate, 'q', { taskId: 'p-bad' })).result();
    expect((await engine.history('p-bad')).find((e) => e.type === 'InputQueued')).not.toHaveProperty('trace');
  });

  it('across a process worker: the turn is a child of the sender’s span; the worker’s step a child of its attempt; the re-run links the crashed attempt', async () => {
    ensureBuilt();
    const tmp = await makeTmpDir('turnlog-prop-');
    const t = tracing();
    const module = fileURLToPath(new URL('../../dist/test/fixtures/workflows/index.js', import.meta.url));
    const exec = new ProcessExecutor({ workflowsModule: module, execArgv: [], logger: silentLogger });
    const engine = await Engine.open({ store: tmp.path + '/s', workflows: [stepThenCrash], executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0, observers: [openTelemetry({ tracerProvider: t.provider })] });
    cleanups.push(async () => {
      await engine.shutdown();
      await tmp.remove();
    });
    const { span, result: h } = await underRequest(() => engine.start(stepThenCrash, null, { taskId: 'p-proc' }));
    await h.nextTurn();
    const [turn] = t.spans('p-proc', 'turnlog.turn');
    childOf(turn, span);
    expect(turn!.attributes['turnlog.executor']).toBe('process');
    const attempts = t.spans('p-proc', 'turnlog.attempt').sort((a, b) => Number(a.attributes['turnlog.attempt']) - Number(b.attributes['turnlog.attempt']));
    expect(attempts).toHaveLength(2);
    for (const a of attempts) expect(a.parentSpanContext?.spanId).toBe(turn!.spanContext().spanId);
    expect(attempts[1]!.links.map((l) => l.context.spanId)).toEqual([attempts[0]!.spanContext().spanId]);
    expect(t.spans('p-proc', 'turnlog.step charge')[0]!.parentSpanContext?.spanId).toBe(attempts[0]!.spanContext().spanId);
  });
});

describe('no SDK, then an SDK registered later', () => {
  it('makes no span while no SDK is registered, and traces the next turn once one is (the check is per turn)', async () => {
    const tmp = await makeTmpDir('turnlog-prop-');
    const observer = openTelemetry({ logTraceIds: false });
    const engine = await Engine.open({ store: tmp.path + '/s', workflows: [gate], logger: silentLogger, scanIntervalMs: 0, observers: [observer] });
    cleanups.push(async () => {
      trace.disable();
      await engine.shutdown();
      await tmp.remove();
    });
    await (await engine.start(gate, 'before', { taskId: 'p-late-1' })).result();
    const late = tracing();
    trace.setGlobalTracerProvider(late.provider);
    const { span, result: h } = await underRequest(() => engine.start(gate, 'after', { taskId: 'p-late-2' }));
    await h.result();
    expect(late.spans('p-late-1', 'turnlog.')).toEqual([]);
    childOf(late.spans('p-late-2', 'turnlog.turn')[0], span);
    expect(late.spans('p-late-2', 'turnlog.step answer')).toHaveLength(1);
  });
});

describePg('trace context across engines on PostgreSQL', () => {
  let schema: string;
  beforeAll(() => {
    schema = uniqueSchema('turnlog_prop');
  });
  afterAll(async () => {
    await dropSchema(schema);
  });

  async function engine(instance: string, t: ReturnType<typeof tracing>, options: { maxRunningTurns?: number; leaseMs?: number } = {}): Promise<Engine> {
    const store = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
    cleanups.push(() => store.close());
    const e = await Engine.open({
      store,
      workflows: [gate],
      logger: silentLogger,
      owner: instance,
      instance,
      scanIntervalMs: 0,
      leaseMs: options.leaseMs ?? 60_000,
      ...(options.maxRunningTurns ? { maxRunningTurns: options.maxRunningTurns } : {}),
      observers: [openTelemetry({ tracerProvider: t.provider })],
    });
    cleanups.push(() => e.shutdown({ graceMs: 0 }));
    return e;
  }

  it('engine B runs a turn whose input was sent through engine A: B’s turn span is a child of the sender’s span', async () => {
    const ta = tracing();
    const tb = tracing();
    const a = await engine('prop-a', ta, { maxRunningTurns: 1 });
    const b = await engine('prop-b', tb);
    // A's one slot is taken, so the input sent through A waits, durably queued, for B.
    await a.start(gate, 'hold-slot', { taskId: 'p-slot' });
    await until(async () => (await a.describe('p-slot')).openTurn?.running === true, 'A to run the slot holder');
    const { span } = await underRequest(() => a.start(gate, 'hello', { taskId: 'p-cross' }));
    await b.recover();
    expect(await b.task('p-cross').result()).toBe('answered hello');
    childOf(tb.spans('p-cross', 'turnlog.turn')[0], span);
    expect(tb.spans('p-cross', 'turnlog.step answer')).toHaveLength(1);
    expect(ta.spans('p-cross', 'turnlog.turn')).toEqual([]);
  });

  it('after the first engine stops mid-turn, the engine that recovers it parents the re-run turn to the sender’s span', async () => {
    const ta = tracing();
    const tb = tracing();
    const a = await engine('prop-r1', ta, { leaseMs: 400 });
    const { span } = await underRequest(() => a.start(gate, 'hold-then-recover', { taskId: 'p-restart' }));
    await until(async () => (await a.describe('p-restart')).openTurn?.running === true, 'A to run the turn');
    // A stops without ending the turn (its handler ignores the shutdown): left in progress.
    await a.shutdown({ graceMs: 0 });
    const b = await engine('prop-r2', tb);
    await until(
      async () => {
        await b.recover();
        return (await b.describe('p-restart')).status === 'completed';
      },
      'B to recover the turn once A’s lease expired',
    );
    const [turn] = tb.spans('p-restart', 'turnlog.turn');
    childOf(turn, span);
    const [attempt] = tb.spans('p-restart', 'turnlog.attempt');
    expect(attempt!.attributes).toMatchObject({ 'turnlog.attempt': 2, 'turnlog.entry_mode': 'recovered' });
    expect(attempt!.parentSpanContext?.spanId).toBe(turn!.spanContext().spanId);
  });
});
