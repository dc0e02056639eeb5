/**
 * `turnlog/otel`: OpenTelemetry traces and metrics as an {@link EngineObserver}
 * (docs/observability.md). Only this entry point imports `@opentelemetry/api` (an optional peer
 * dependency): an app that never imports it loads none of it. With no SDK registered the API
 * hands out non-recording spans and no-op instruments, so the cost is a few map operations.
 */
import {
  ProxyTracerProvider,
  ROOT_CONTEXT,
  SpanStatusCode,
  TraceFlags,
  context,
  createNoopMeter,
  createTraceState,
  isSpanContextValid,
  metrics,
  trace,
  type Attributes,
  type Counter,
  type Histogram,
  type Link,
  type Meter,
  type MeterProvider,
  type ObservableGauge,
  type Span,
  type SpanContext,
  type Tracer,
  type TracerProvider,
  type UpDownCounter,
} from '@opentelemetry/api';
import type { HistoryEvent, TraceContext, TurnStarted } from '../history/events.js';
import { setLogTraceSource } from '../logger.js';
import type { AttemptEndedEvent, AttemptStartedEvent, EngineObserver, EventsAppendedEvent, GroupCommitEvent, ObservedEngine } from '../runtime/observe.js';

export interface OpenTelemetryOptions {
  /** Default: the global provider (`trace.getTracerProvider()`); a no-op until an SDK registers one. */
  tracerProvider?: TracerProvider;
  /** Default: the global provider (`metrics.getMeterProvider()`). */
  meterProvider?: MeterProvider;
  /** Put the active span's `traceId`/`spanId` on JSON log lines (docs/observability.md#logs). Default true. */
  logTraceIds?: boolean;
}

const NAME = 'turnlog';
/** Task ids whose workflow name is kept for attributes (the oldest is forgotten first). */
const MAX_NAMED_TASKS = 10_000;

/** The outcome attribute of each turn terminal. */
const OUTCOME: Partial<Record<HistoryEvent['type'], string>> = {
  TurnCompleted: 'completed',
  TurnFailed: 'failed',
  TurnSuspended: 'suspended',
  TurnCancelled: 'cancelled',
  TurnTimedOut: 'timed_out',
};

interface OpenAttempt {
  span: Span;
  attempt: number;
}

/**
 * Spans for turns (`turnlog.turn`), attempts (`turnlog.attempt`) and steps (`turnlog.step`), and
 * the metrics of docs/observability.md, from the engine's observation seam.
 * @example
 * import { openTelemetry } from 'turnlog/otel';
 * const engine = await Engine.open({ workflows, observers: [openTelemetry()] });
 */
export function openTelemetry(options: OpenTelemetryOptions = {}): EngineObserver {
  const tracer: Tracer = (options.tracerProvider ?? trace.getTracerProvider()).getTracer(NAME);
  const meter: Meter = (options.meterProvider ?? metrics.getMeterProvider()).getMeter(NAME);
  // A no-op meter (no SDK when the observer was made) records nothing: skip building attributes.
  const metered = meter.constructor !== createNoopMeter().constructor;
  const m = instruments(meter);
  /** The engines this observer is attached to, for the worker pool gauge. */
  const engines = new Set<ObservedEngine>();
  if (metered) {
    m.poolSize.addCallback((r) => {
      const sizes = new Map<string, number>();
      for (const eng of engines) for (const p of eng.workerPools()) sizes.set(p.executor, (sizes.get(p.executor) ?? 0) + p.workers);
      for (const [executor, workers] of sizes) r.observe(workers, { 'turnlog.executor': executor });
    });
  }
  // The JSON logger's trace source is process-wide: the latest openTelemetry() decides, so
  // `logTraceIds: false` also takes back what an earlier observer installed.
  setLogTraceSource(options.logTraceIds === false ? undefined : activeIds);
  /**
   * Whether spans are made: a provider was given, or an SDK registered the global one (asked
   * again each time: it may register after this observer was made). With neither, the observer
   * builds no span, attribute or map entry at all (bench/otel.bench.ts).
   */
  const tracing = (): boolean => {
    if (options.tracerProvider) return true;
    const p = trace.getTracerProvider();
    return !(p instanceof ProxyTracerProvider) || p.getDelegateTracer(NAME) !== undefined;
  };

  const pendingStarts = new Map<string, TurnStarted>();
  const turns = new Map<string, Span>();
  const attempts = new Map<string, OpenAttempt>();
  /** The last ended attempt of a turn, for the link from the attempt that replaces it. */
  const replaced = new Map<string, SpanContext>();
  /** Workflow names by task id (metric and span attributes); bounded: a suspended task never completes. */
  const workflows = new Map<string, string>();
  const nameWorkflow = (taskId: string, workflow: string): void => {
    if (workflows.size >= MAX_NAMED_TASKS && !workflows.has(taskId)) workflows.delete(workflows.keys().next().value!);
    workflows.set(taskId, workflow);
  };

  const endAttempt = (key: string, attrs: Attributes, time: number, error?: string): void => {
    const a = attempts.get(key);
    if (!a) return;
    attempts.delete(key);
    a.span.setAttributes(attrs);
    if (error !== undefined) a.span.setStatus({ code: SpanStatusCode.ERROR, message: error });
    a.span.end(time);
    replaced.set(key, a.span.spanContext());
  };

  const onEvent = (taskId: string, e: HistoryEvent): void => {
    switch (e.type) {
      case 'TaskCreated':
        nameWorkflow(taskId, e.workflow);
        return;
      case 'TaskCompleted':
        workflows.delete(taskId);
        return;
      case 'InputQueued':
        m.queueDepth.add(1);
        return;
      case 'InputWithdrawn':
        m.queueDepth.add(-1);
        return;
      case 'InputsTaken':
        m.queueDepth.add(-e.inputIds.length);
        attempts.get(`${taskId}\0${e.turn}`)?.span.addEvent('inputs taken', { 'turnlog.input_ids': e.inputIds }, e.time);
        return;
      case 'TurnStarted':
        if (e.attempt === 1) m.queueDepth.add(-e.inputIds.length);
        // The spans start in attemptStarted, which knows the workflow (a recovered task's
        // TaskCreated was appended by another engine).
        pendingStarts.set(`${taskId}\0${e.turn}`, e);
        return;
      case 'StepCompleted': {
        const key = `${taskId}\0${e.turn}`;
        const parent = attempts.get(key)?.span ?? turns.get(key);
        const workflow = workflows.get(taskId);
        if (metered) m.stepDuration.record(e.durationMs, { 'turnlog.workflow': workflow ?? '', 'turnlog.step.name': e.name, 'turnlog.step.outcome': e.failure ? 'failed' : 'ok' });
        // No recording parent: no SDK was registered when the attempt started, so no step span either.
        if (parent !== undefined && !parent.isRecording()) return;
        const attrs: Attributes = { 'turnlog.task_id': taskId, 'turnlog.turn': e.turn, 'turnlog.attempt': e.attempt, 'turnlog.step.name': e.name, 'turnlog.step.seq': e.seq, 'turnlog.step.outcome': e.failure ? 'failed' : 'ok' };
        if (workflow) attrs['turnlog.workflow'] = workflow;
        const ctx = parent ? trace.setSpan(ROOT_CONTEXT, parent) : ROOT_CONTEXT;
        const span = tracer.startSpan(`turnlog.step ${e.name}`, { startTime: e.time - e.durationMs, attributes: attrs }, ctx);
        if (e.failure) {
          span.setStatus({ code: SpanStatusCode.ERROR, message: e.failure.message });
          if (e.failure.code) span.setAttribute('turnlog.failure.code', e.failure.code);
        }
        span.end(e.time);
        return;
      }
      case 'TimeoutCancelRequested':
        turns.get(`${taskId}\0${e.turn}`)?.addEvent('timeout marker', { 'turnlog.grace_until': e.graceUntil }, e.time);
        return;
      case 'CancelRequested':
        turns.get(`${taskId}\0${e.turn}`)?.addEvent('cancel requested', { 'turnlog.cancel.scope': e.scope, 'turnlog.cancel.reason': e.reason }, e.time);
        return;
      case 'OperatorAction':
        turns.get(`${taskId}\0${e.turn}`)?.addEvent('operator action', { 'turnlog.operator.action': e.action, 'turnlog.operator.by': e.by }, e.time);
        return;
      case 'WorkerKilled':
        m.kills.add(1, { 'turnlog.workflow': workflows.get(taskId) ?? '' });
        attempts.get(`${taskId}\0${e.turn}`)?.span.addEvent('worker killed', { 'turnlog.worker.pid': e.pid, 'turnlog.kill.signal': e.signal, 'turnlog.kill.reason': e.reason }, e.time);
        return;
      case 'WorkerCrashed':
        endAttempt(`${taskId}\0${e.turn}`, { 'turnlog.attempt.outcome': 'crashed', 'turnlog.worker.pid': e.pid }, e.time, e.message);
        return;
      case 'TurnExitedForRecovery':
        endAttempt(`${taskId}\0${e.turn}`, { 'turnlog.attempt.outcome': 'exit-for-recovery' }, e.time);
        return;
      default: {
        const outcome = OUTCOME[e.type];
        if (outcome === undefined || !('turn' in e)) return;
        const key = `${taskId}\0${e.turn}`;
        const attrs: Attributes = { 'turnlog.outcome': outcome };
        let error: string | undefined;
        if (e.type === 'TurnFailed') {
          error = e.failure.message;
          attrs['turnlog.failure.code'] = e.failure.code ?? 'TURNLOG_TURN_FAILED';
        } else if (e.type === 'TurnTimedOut') {
          error = `timed out (${e.cause})`;
          attrs['turnlog.timeout.cause'] = e.cause;
          if (e.cause === 'recovery_marker' || e.cause === 'recovery_backstop') m.recoveries.add(1, { 'turnlog.recovery.rule': e.cause === 'recovery_marker' ? 'marker' : 'backstop' });
        }
        endAttempt(key, { 'turnlog.attempt.outcome': outcome }, e.time, error);
        const span = turns.get(key);
        turns.delete(key);
        replaced.delete(key);
        pendingStarts.delete(key);
        m.turnsEnded.add(1, { 'turnlog.workflow': workflows.get(taskId) ?? '', 'turnlog.outcome': outcome });
        if (!span) return;
        span.setAttributes(attrs);
        if (error !== undefined) span.setStatus({ code: SpanStatusCode.ERROR, message: error });
        span.end(e.time);
      }
    }
  };

  return {
    traceContext: currentTraceContext,
    eventsAppended(e: EventsAppendedEvent) {
      if (metered) {
        if (e.durationMs !== undefined) m.appendDuration.record(e.durationMs);
      } else if (turns.size === 0 && attempts.size === 0 && !tracing()) return; // no SDK: nothing to do
      // A task this observer never saw created (another engine's, or one recovery finalizes
      // without running it) is still named: its metrics carry turnlog.workflow.
      if (e.workflow !== undefined && !workflows.has(e.taskId)) nameWorkflow(e.taskId, e.workflow);
      for (const ev of e.events) onEvent(e.taskId, ev);
    },
    groupCommitted(e: GroupCommitEvent) {
      if (metered) m.batchSize.record(e.writes);
    },
    attached(engine: ObservedEngine) {
      engines.add(engine);
    },
    attemptStarted(a: AttemptStartedEvent) {
      const key = `${a.taskId}\0${a.turn}`;
      const started = pendingStarts.get(key);
      pendingStarts.delete(key);
      if (!turns.has(key) && !tracing()) {
        // No tracer: metrics only (no-ops too without a meter).
        if (!metered) return;
        nameWorkflow(a.taskId, a.workflow);
        if (a.attempt === 1) m.turnsStarted.add(1, { 'turnlog.workflow': a.workflow });
        if (a.entryMode === 'recovered') m.recoveries.add(1, { 'turnlog.recovery.rule': 'rerun' });
        return;
      }
      nameWorkflow(a.taskId, a.workflow);
      const base: Attributes = { 'turnlog.task_id': a.taskId, 'turnlog.workflow': a.workflow, 'turnlog.turn': a.turn, 'turnlog.executor': a.executor };
      let turnSpan = turns.get(key);
      if (!turnSpan) {
        // The sender's context, recorded with the input (InputQueued.trace), is the turn's
        // parent: on this engine or another, before or after a restart.
        const caller = a.trace ? spanContextOf(a.trace) : undefined;
        const parent = caller ? trace.setSpanContext(ROOT_CONTEXT, caller) : ROOT_CONTEXT;
        turnSpan = tracer.startSpan(`turnlog.turn ${a.workflow}`, { startTime: started?.turnStartedAt ?? a.time, attributes: { ...base, 'turnlog.input_ids': started?.inputIds ?? [] } }, parent);
        turns.set(key, turnSpan);
        if (a.attempt === 1) m.turnsStarted.add(1, { 'turnlog.workflow': a.workflow });
      }
      if (a.entryMode === 'recovered') m.recoveries.add(1, { 'turnlog.recovery.rule': 'rerun' });
      const prev = replaced.get(key);
      const links: Link[] = prev ? [{ context: prev, attributes: { 'turnlog.link': 'replaces' } }] : [];
      const attrs: Attributes = { ...base, 'turnlog.attempt': a.attempt, 'turnlog.entry_mode': a.entryMode, 'turnlog.replayed_calls': a.replayedCalls };
      // A worker's pid; an inline attempt's TurnStarted.pid is the engine's own, not a worker's.
      if (a.executor === 'process' && started && started.pid > 0) attrs['turnlog.worker.pid'] = started.pid;
      if (a.entryMode === 'recovered') attrs['turnlog.recovery.rule'] = 'rerun';
      const span = tracer.startSpan(`turnlog.attempt ${a.workflow}`, { startTime: started?.time ?? a.time, attributes: attrs, links }, trace.setSpan(ROOT_CONTEXT, turnSpan));
      attempts.set(key, { span, attempt: a.attempt });
    },
    attemptEnded(a: AttemptEndedEvent) {
      // Called as the attempt ends, before its end is appended (and for an attempt whose end
      // writes nothing, a fenced zombie): the attempt span ends here.
      const key = `${a.taskId}\0${a.turn}`;
      const open = attempts.get(key);
      if (open?.attempt !== a.attempt) return;
      const o = a.outcome;
      // The kill's WorkerKilled is appended after this: put its event on the span while it is open.
      if (o.kind === 'killed') open.span.addEvent('worker killed', { 'turnlog.worker.pid': o.pid, 'turnlog.kill.signal': o.signal }, a.time);
      // The turn's vocabulary (timed_out, as turnlog.outcome), not the executor's (timed-out).
      endAttempt(key, { 'turnlog.attempt.outcome': o.kind === 'timed-out' ? 'timed_out' : o.kind }, a.time);
    },
  };
}

function instruments(meter: Meter): {
  turnsStarted: Counter;
  turnsEnded: Counter;
  stepDuration: Histogram;
  queueDepth: UpDownCounter;
  recoveries: Counter;
  kills: Counter;
  appendDuration: Histogram;
  batchSize: Histogram;
  poolSize: ObservableGauge;
} {
  return {
    turnsStarted: meter.createCounter('turnlog.turns.started', { description: 'Turns started (first attempts).' }),
    turnsEnded: meter.createCounter('turnlog.turns.ended', { description: 'Turns ended, by outcome.' }),
    stepDuration: meter.createHistogram('turnlog.step.duration', { description: 'Step latency as recorded.', unit: 'ms' }),
    queueDepth: meter.createUpDownCounter('turnlog.steering.queue_depth', { description: 'Inputs queued and not yet taken by a turn (this engine).' }),
    recoveries: meter.createCounter('turnlog.recoveries', { description: 'Recovery decisions carried out, by rule.' }),
    kills: meter.createCounter('turnlog.worker.kills', { description: 'Workers SIGKILLed at the hard cap or when a cancel\'s grace ran out (WorkerKilled).' }),
    appendDuration: meter.createHistogram('turnlog.append.duration', { description: 'Time the store took to make one append of this engine durable.', unit: 'ms' }),
    batchSize: meter.createHistogram('turnlog.group_commit.batch_size', { description: 'Writes sharing one group commit of the store.', unit: '{write}' }),
    poolSize: meter.createObservableGauge('turnlog.worker.pool.size', { description: 'Live worker processes (busy, parked, warm, starting), per executor.', unit: '{process}' }),
  };
}

function activeIds(): { traceId: string; spanId: string } | undefined {
  const sc = trace.getSpanContext(context.active());
  return sc && isSpanContextValid(sc) ? { traceId: sc.traceId, spanId: sc.spanId } : undefined;
}

/** The active span's context as W3C trace context, to record with an input being queued. */
function currentTraceContext(): TraceContext | undefined {
  const sc = trace.getSpanContext(context.active());
  if (!sc || !isSpanContextValid(sc)) return undefined;
  const traceparent = `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
  const tracestate = sc.traceState?.serialize();
  return tracestate ? { traceparent, tracestate } : { traceparent };
}

/** A recorded trace context as a remote parent; undefined when it does not parse. */
export function spanContextOf(c: TraceContext): SpanContext | undefined {
  const m = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(c.traceparent);
  if (!m || m[1] === 'ff') return undefined;
  const sc: SpanContext = { traceId: m[2]!, spanId: m[3]!, traceFlags: parseInt(m[4]!, 16) & TraceFlags.SAMPLED, isRemote: true };
  if (c.tracestate) sc.traceState = createTraceState(c.tracestate);
  return isSpanContextValid(sc) ? sc : undefined;
}
