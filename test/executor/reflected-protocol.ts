// The worker protocol codec as it was before the hand-written one: protobufjs reflection over the
// generated descriptor (lookupType) and history/codec.ts' Failure mapping. The reference that
// protocol-codec.test.ts holds src/executor/protocol.ts' hand codec to, byte for byte.
import type { EntryMode, FailureInfo, Payload, RetryPolicy, WorkflowKind } from '../../src/history/events.js';
import type { ChildOutcome, QueuedInput, RecordedCall, WaitOutcome } from '../../src/history/state.js';
import { failureFromProto, failureToProto } from '../../src/history/codec.js';
import { lookupType } from '../../src/internal/proto/root.js';
import type { CancelKind, EmitItem, TurnSpec } from '../../src/attempt/host.js';
import type { CallRecord, ChildReply } from '../../src/attempt/calls.js';
import { WorkerProtocolError, type EngineMessage, type TerminalOutcome, type WorkerMessage } from '../../src/executor/protocol.js';

const EngineFrameType = lookupType('turnlog.v1.EngineFrame');
const WorkerFrameType = lookupType('turnlog.v1.WorkerFrame');

// Index = proto enum number; 0 is UNSPECIFIED (same numbering as history.proto).
const KINDS: readonly (WorkflowKind | undefined)[] = [undefined, 'one-shot', 'multi-turn'];
const ENTRY_MODES: readonly (EntryMode | undefined)[] = [undefined, 'fresh', 'resumed', 'recovered'];
const CHILD_STATUSES: readonly (ChildOutcome['status'] | undefined)[] = [undefined, 'completed', 'suspended', 'failed', 'cancelled', 'timed_out'];
const CANCEL_KINDS: readonly (CancelKind | undefined)[] = [undefined, 'timeout', 'cancel', 'shutdown'];

type Msg = Record<string, any>;
const EMPTY = new Uint8Array(0);

function payloadOut(p: Payload): Msg {
  return { metadata: p.metadata, data: p.data };
}
function payloadIn(m: Msg | null | undefined): Payload | undefined {
  if (!m) return undefined;
  return { metadata: m.metadata ?? {}, data: m.data ?? EMPTY };
}
function failureIn(m: Msg | null | undefined): FailureInfo | undefined {
  return m ? failureFromProto(m) : undefined;
}

// ---------------------------------------------------------------------------------------------
// Engine → worker

export function reflectedEncodeEngineMessage(m: EngineMessage): Uint8Array {
  let body: Msg;
  switch (m.type) {
    case 'run':
      body = { run: specToRun(m.spec, m.pendingInputs) };
      break;
    case 'cancel':
      body = { cancel: { kind: CANCEL_KINDS.indexOf(m.kind), reason: m.reason } };
      break;
    case 'ack': {
      const ack: Msg = { seq: m.seq, error: m.error ? failureToProto(m.error) : null };
      if (m.reply?.kind === 'take-inputs') ack.takeInputs = { inputs: m.reply.value.map((q) => ({ inputId: q.inputId, input: payloadOut(q.input) })) };
      if (m.reply?.kind === 'child') ack.child = childReplyOut(m.reply.value);
      if (m.reply?.kind === 'wait') ack.wait = m.reply.value.deadline === undefined ? {} : { deadlineMs: m.reply.value.deadline };
      if (m.grant) ack.limitGrant = { waitedMs: m.grant.waitedMs };
      body = { ack };
      break;
    }
    case 'pending-inputs':
      body = { pendingInputs: { count: m.count } };
      break;
    case 'signals':
      body = {
        signals: {
          ended: m.ended.map(({ seq, outcome: o }) => ({ seq, signalId: o.signalId, value: o.value ? payloadOut(o.value) : null, timedOut: o.timedOut })),
        },
      };
      break;
    case 'shutdown':
      body = { shutdown: {} };
      break;
  }
  return EngineFrameType.encodeDelimited(body as never).finish();
}

/** Worker side. The engine is trusted, but a bad frame still throws rather than misbehaving. */
export function reflectedDecodeEngineMessage(bytes: Uint8Array): EngineMessage {
  let f: Msg;
  try {
    f = EngineFrameType.decode(bytes) as unknown as Msg;
  } catch (err) {
    throw new WorkerProtocolError(`undecodable engine frame (${(err as Error).message})`);
  }
  if (f.run) return { type: 'run', spec: runToSpec(f.run), pendingInputs: f.run.pendingInputs ?? 0 };
  if (f.cancel) {
    const kind = CANCEL_KINDS[f.cancel.kind ?? 0];
    if (!kind) throw new WorkerProtocolError(`unknown cancel kind ${f.cancel.kind}`);
    return { type: 'cancel', kind, reason: f.cancel.reason ?? '' };
  }
  if (f.ack) {
    const m: Extract<EngineMessage, { type: 'ack' }> = { type: 'ack', seq: f.ack.seq ?? 0 };
    const error = failureIn(f.ack.error);
    if (error) m.error = error;
    if (f.ack.child) m.reply = { kind: 'child', value: childReplyIn(f.ack.child) };
    if (f.ack.takeInputs) {
      m.reply = { kind: 'take-inputs', value: (f.ack.takeInputs.inputs ?? []).map((q: Msg) => ({ inputId: q.inputId ?? '', input: payloadIn(q.input)! })) };
    }
    if (f.ack.wait) m.reply = { kind: 'wait', value: f.ack.wait.deadlineMs != null ? { deadline: f.ack.wait.deadlineMs } : {} };
    if (f.ack.limitGrant) m.grant = { waitedMs: f.ack.limitGrant.waitedMs ?? 0 };
    return m;
  }
  if (f.pendingInputs) return { type: 'pending-inputs', count: f.pendingInputs.count ?? 0 };
  if (f.signals) {
    return {
      type: 'signals',
      ended: (f.signals.ended ?? []).map((e: Msg) => {
        const outcome: WaitOutcome = { signalId: e.signalId ?? '', timedOut: e.timedOut ?? false, eventId: 0 };
        const value = payloadIn(e.value);
        if (value) outcome.value = value;
        return { seq: e.seq ?? 0, outcome };
      }),
    };
  }
  if (f.shutdown) return { type: 'shutdown' };
  throw new WorkerProtocolError('empty or unknown engine frame');
}

function specToRun(s: TurnSpec, pendingInputs: number): Msg {
  return {
    taskId: s.taskId,
    workflow: s.workflow,
    kind: KINDS.indexOf(s.kind),
    turn: s.turn,
    attempt: s.attempt,
    entryMode: ENTRY_MODES.indexOf(s.entryMode),
    steered: s.steered,
    inputId: s.inputId,
    input: payloadOut(s.input),
    state: s.state ? payloadOut(s.state) : null,
    calls: s.calls.map(callOut),
    taken: s.taken.map((q) => ({ inputId: q.inputId, input: payloadOut(q.input), steering: q.steering, eventId: q.eventId, timeMs: q.time })),
    checkpoint: s.checkpoint ? payloadOut(s.checkpoint) : null,
    turnStartedAtMs: s.turnStartedAt,
    deadlineMs: s.deadline,
    recoveryCount: s.recoveryCount,
    stepRetry: s.stepRetry,
    timeoutExceeded: s.timeoutExceeded,
    cancelRequested: s.cancelRequested,
    pendingInputs,
  };
}

function callOut(c: RecordedCall): Msg {
  const base = { seq: c.seq, eventId: c.eventId };
  switch (c.kind) {
    case 'step':
      return {
        ...base,
        step: {
          name: c.name,
          attempt: c.attempt,
          result: c.result ? payloadOut(c.result) : null,
          failure: c.failure ? failureToProto(c.failure) : null,
          durationMs: c.durationMs,
        },
      };
    case 'checkpoint':
      return { ...base, checkpoint: { data: payloadOut(c.data) } };
    case 'take-inputs':
      return { ...base, takeInputs: { inputIds: c.inputIds } };
    case 'patch':
      return { ...base, patch: { patchId: c.patchId, deprecated: c.deprecated } };
    case 'sleep':
      return { ...base, sleep: { durationMs: c.durationMs, fireAtMs: c.fireAt } };
    case 'child':
      return c.op === 'start'
        ? { ...base, child: { childId: c.childId, workflow: c.workflow, detached: c.detached } }
        : { ...base, child: { childId: c.childId, ended: true, outcome: childReplyOut({ childId: c.childId, outcome: c.outcome }) } };
    case 'wait': {
      const wait: Msg = { name: c.name };
      if (c.timeoutMs !== undefined) wait.timeoutMs = c.timeoutMs;
      if (c.deadline !== undefined) wait.deadlineMs = c.deadline;
      if (c.ended) Object.assign(wait, { ended: true, signalId: c.ended.signalId, value: c.ended.value ? payloadOut(c.ended.value) : null, timedOut: c.ended.timedOut });
      return { ...base, wait };
    }
  }
}

function childReplyOut(r: ChildReply): Msg {
  const o = r.outcome;
  if (!o) return { childId: r.childId };
  return {
    childId: r.childId,
    status: CHILD_STATUSES.indexOf(o.status),
    output: o.output ? payloadOut(o.output) : null,
    failure: o.failure ? failureToProto(o.failure) : null,
    reason: o.reason ?? '',
  };
}

function childReplyIn(m: Msg): ChildReply {
  const r: ChildReply = { childId: m.childId ?? '' };
  if (m.status || m.output || m.failure || m.reason) {
    const o: ChildOutcome = { status: CHILD_STATUSES[m.status ?? 0] ?? 'completed' };
    const output = payloadIn(m.output);
    if (output) o.output = output;
    const failure = failureIn(m.failure);
    if (failure) o.failure = failure;
    if (m.reason) o.reason = m.reason;
    r.outcome = o;
  }
  return r;
}

function runToSpec(r: Msg): TurnSpec {
  const kind = KINDS[r.kind ?? 0];
  const entryMode = ENTRY_MODES[r.entryMode ?? 0];
  if (!kind || !entryMode) throw new WorkerProtocolError('run frame without kind or entry mode');
  const retry: Msg = r.stepRetry ?? {};
  const stepRetry: RetryPolicy = {
    maxAttempts: retry.maxAttempts ?? 1,
    initialIntervalMs: retry.initialIntervalMs ?? 0,
    backoffCoefficient: retry.backoffCoefficient ?? 1,
    maxIntervalMs: retry.maxIntervalMs ?? 0,
    nonRetryableTypes: retry.nonRetryableTypes ?? [],
    ...(retry.jitter != null ? { jitter: retry.jitter } : {}),
  };
  const spec: TurnSpec = {
    taskId: r.taskId ?? '',
    workflow: r.workflow ?? '',
    kind,
    turn: r.turn ?? 0,
    attempt: r.attempt ?? 0,
    entryMode,
    steered: r.steered ?? false,
    inputId: r.inputId ?? '',
    input: payloadIn(r.input) ?? { metadata: {}, data: EMPTY },
    calls: (r.calls ?? []).map(callIn),
    taken: (r.taken ?? []).map(
      (q: Msg): QueuedInput => ({ inputId: q.inputId ?? '', input: payloadIn(q.input)!, steering: q.steering ?? false, eventId: q.eventId ?? 0, time: q.timeMs ?? 0 }),
    ),
    turnStartedAt: r.turnStartedAtMs ?? 0,
    deadline: r.deadlineMs ?? 0,
    recoveryCount: r.recoveryCount ?? 0,
    stepRetry,
    timeoutExceeded: r.timeoutExceeded ?? false,
    cancelRequested: r.cancelRequested ?? false,
  };
  const state = payloadIn(r.state);
  if (state) spec.state = state;
  const checkpoint = payloadIn(r.checkpoint);
  if (checkpoint) spec.checkpoint = checkpoint;
  return spec;
}

function callIn(c: Msg): RecordedCall {
  const seq = c.seq ?? 0;
  const eventId = c.eventId ?? 0;
  if (c.step) {
    const call: RecordedCall = { kind: 'step', seq, eventId, name: c.step.name ?? '', attempt: c.step.attempt ?? 0, durationMs: c.step.durationMs ?? 0 };
    const result = payloadIn(c.step.result);
    if (result) call.result = result;
    const failure = failureIn(c.step.failure);
    if (failure) call.failure = failure;
    return call;
  }
  if (c.checkpoint) return { kind: 'checkpoint', seq, eventId, data: payloadIn(c.checkpoint.data)! };
  if (c.takeInputs) return { kind: 'take-inputs', seq, eventId, inputIds: c.takeInputs.inputIds ?? [] };
  if (c.patch) return { kind: 'patch', seq, eventId, patchId: c.patch.patchId ?? '', deprecated: c.patch.deprecated ?? false };
  if (c.sleep) return { kind: 'sleep', seq, eventId, durationMs: c.sleep.durationMs ?? 0, fireAt: c.sleep.fireAtMs ?? 0 };
  if (c.child) {
    const x = c.child;
    if (!x.ended) return { kind: 'child', seq, eventId, op: 'start', childId: x.childId ?? '', workflow: x.workflow ?? '', detached: x.detached ?? false };
    return { kind: 'child', seq, eventId, op: 'await', childId: x.childId ?? '', outcome: childReplyIn(x.outcome ?? {}).outcome ?? { status: 'completed' } };
  }
  if (c.wait) {
    const w = c.wait;
    const call: Extract<RecordedCall, { kind: 'wait' }> = { kind: 'wait', seq, eventId, name: w.name ?? '' };
    if (w.timeoutMs != null) call.timeoutMs = w.timeoutMs;
    if (w.deadlineMs != null) call.deadline = w.deadlineMs;
    if (w.ended) {
      call.ended = { signalId: w.signalId ?? '', timedOut: w.timedOut ?? false, eventId: 0 };
      const value = payloadIn(w.value);
      if (value) call.ended.value = value;
    }
    return call;
  }
  throw new WorkerProtocolError(`recorded call ${seq} has no kind`);
}

// ---------------------------------------------------------------------------------------------
// Worker → engine

export function reflectedEncodeWorkerMessage(m: WorkerMessage): Uint8Array {
  let body: Msg;
  switch (m.type) {
    case 'ready':
      body = { ready: { protocolVersion: m.protocolVersion, pid: m.pid, workflows: m.workflows, error: m.error ? failureToProto(m.error) : null } };
      break;
    case 'record':
      body = { record: recordOut(m.call) };
      break;
    case 'acquire':
      body = { record: { seq: m.seq, acquire: { limit: m.limit } } };
      break;
    case 'heartbeat':
      body = { heartbeat: {} };
      break;
    case 'terminal':
      body = terminalOut(m.outcome);
      break;
    case 'emit':
      body = {
        emit:
          m.item.kind === 'chunk'
            ? { chunk: payloadOut(m.item.data), dropped: m.dropped }
            : { stepSeq: m.item.seq, stepName: m.item.name, dropped: m.dropped },
      };
      break;
  }
  return WorkerFrameType.encodeDelimited(body as never).finish();
}

function recordOut(c: CallRecord): Msg {
  switch (c.kind) {
    case 'step':
      return {
        seq: c.seq,
        step: { name: c.name, result: c.result ? payloadOut(c.result) : null, failure: c.failure ? failureToProto(c.failure) : null, durationMs: c.durationMs, limit: c.limit ?? '', waitedMs: c.waitedMs ?? 0 },
      };
    case 'checkpoint':
      return { seq: c.seq, checkpoint: { data: payloadOut(c.data) } };
    case 'take-inputs':
      return { seq: c.seq, takeInputs: {} };
    case 'patch':
      return { seq: c.seq, patch: { patchId: c.patchId, deprecated: c.deprecated } };
    case 'sleep':
      return { seq: c.seq, sleep: { durationMs: c.durationMs, fireAtMs: c.fireAt } };
    case 'child':
      return c.op === 'start'
        ? { seq: c.seq, child: { childId: c.childId, workflow: c.workflow, input: payloadOut(c.input), detached: c.detached } }
        : { seq: c.seq, child: { childId: c.childId, wait: true } };
    case 'wait':
      return { seq: c.seq, wait: c.timeoutMs === undefined ? { name: c.name } : { name: c.name, timeoutMs: c.timeoutMs } };
  }
}

function terminalOut(o: TerminalOutcome): Msg {
  switch (o.kind) {
    case 'completed':
      return { result: { output: payloadOut(o.output), state: o.state ? payloadOut(o.state) : null } };
    case 'suspended':
      return { suspend: { reason: o.reason, output: o.output ? payloadOut(o.output) : null, state: o.state ? payloadOut(o.state) : null } };
    case 'failed':
      return { error: { failure: failureToProto(o.failure) } };
    case 'cancelled':
      return { cancelled: { reason: o.reason } };
    case 'timed-out':
      return { timedOut: {} };
    case 'exit-for-recovery':
      return { exitForRecovery: { reason: o.reason } };
  }
}

/** Engine side: decodes and validates one frame body from a worker. Throws WorkerProtocolError. */
export function reflectedDecodeWorkerMessage(bytes: Uint8Array): WorkerMessage {
  let f: Msg;
  try {
    f = WorkerFrameType.decode(bytes) as unknown as Msg;
  } catch (err) {
    throw new WorkerProtocolError(`undecodable frame of ${bytes.length} bytes (${(err as Error).message})`);
  }
  if (f.ready) {
    const m: WorkerMessage = { type: 'ready', protocolVersion: f.ready.protocolVersion ?? 0, pid: f.ready.pid ?? 0, workflows: f.ready.workflows ?? [] };
    const error = failureIn(f.ready.error);
    if (error) m.error = error;
    return m;
  }
  if (f.record) {
    const rec = f.record;
    const seq0 = rec.seq ?? 0;
    if (rec.step) {
      const r = rec.step;
      const seq = positiveSeq(seq0, 'step record');
      if (!r.name) throw new WorkerProtocolError(`step record ${seq} has no name`);
      if (!r.result === !r.failure) throw new WorkerProtocolError(`step record ${seq} ("${r.name}") must carry exactly one of result and failure`);
      const d = r.durationMs ?? 0;
      if (!Number.isFinite(d) || d < 0) throw new WorkerProtocolError(`step record ${seq} has duration ${d}`);
      const call: Extract<CallRecord, { kind: 'step' }> = { kind: 'step', seq, name: r.name, durationMs: d };
      if (r.result) call.result = payloadIn(r.result)!;
      else call.failure = failureIn(r.failure)!;
      if (r.limit) Object.assign(call, { limit: r.limit, waitedMs: r.waitedMs ?? 0 });
      return { type: 'record', call };
    }
    if (rec.checkpoint) {
      const seq = positiveSeq(seq0, 'checkpoint');
      if (!rec.checkpoint.data) throw new WorkerProtocolError(`checkpoint ${seq} has no data`);
      return { type: 'record', call: { kind: 'checkpoint', seq, data: payloadIn(rec.checkpoint.data)! } };
    }
    if (rec.takeInputs) return { type: 'record', call: { kind: 'take-inputs', seq: positiveSeq(seq0, 'take-inputs') } };
    if (rec.child) {
      const x = rec.child;
      const seq = positiveSeq(seq0, 'child record');
      if (!x.childId) throw new WorkerProtocolError(`child record ${seq} has no child id`);
      if (x.wait) return { type: 'record', call: { kind: 'child', seq, op: 'await', childId: x.childId } };
      if (!x.workflow || !x.input) throw new WorkerProtocolError(`child record ${seq} (${x.childId}) starts a child without a workflow or an input`);
      return { type: 'record', call: { kind: 'child', seq, op: 'start', childId: x.childId, workflow: x.workflow, input: payloadIn(x.input)!, detached: x.detached ?? false } };
    }
    if (rec.patch) {
      const seq = positiveSeq(seq0, 'patch record');
      if (!rec.patch.patchId) throw new WorkerProtocolError(`patch record ${seq} has no patch id`);
      return { type: 'record', call: { kind: 'patch', seq, patchId: rec.patch.patchId, deprecated: rec.patch.deprecated ?? false } };
    }
    if (rec.acquire) {
      const seq = positiveSeq(seq0, 'acquire');
      if (!rec.acquire.limit) throw new WorkerProtocolError(`acquire ${seq} names no limit`);
      return { type: 'acquire', seq, limit: rec.acquire.limit };
    }
    if (rec.sleep) return { type: 'record', call: { kind: 'sleep', seq: positiveSeq(seq0, 'sleep'), durationMs: rec.sleep.durationMs ?? 0, fireAt: rec.sleep.fireAtMs ?? 0 } };
    if (rec.wait) {
      const seq = positiveSeq(seq0, 'wait record');
      if (!rec.wait.name) throw new WorkerProtocolError(`wait record ${seq} has no name`);
      const call: Extract<CallRecord, { kind: 'wait' }> = { kind: 'wait', seq, name: rec.wait.name };
      if (rec.wait.timeoutMs != null) {
        const t = rec.wait.timeoutMs;
        if (!(Number.isFinite(t) && t >= 0)) throw new WorkerProtocolError(`wait record ${seq} has timeout ${t}`);
        call.timeoutMs = t;
      }
      return { type: 'record', call };
    }
    throw new WorkerProtocolError(`record ${seq0} carries no call`);
  }
  if (f.heartbeat) return { type: 'heartbeat' };
  if (f.result) {
    if (!f.result.output) throw new WorkerProtocolError('result without output');
    const o: TerminalOutcome = { kind: 'completed', output: payloadIn(f.result.output)! };
    const state = payloadIn(f.result.state);
    if (state) o.state = state;
    return { type: 'terminal', outcome: o };
  }
  if (f.suspend) {
    const o: TerminalOutcome = { kind: 'suspended', reason: f.suspend.reason ?? '' };
    const output = payloadIn(f.suspend.output);
    if (output) o.output = output;
    const state = payloadIn(f.suspend.state);
    if (state) o.state = state;
    return { type: 'terminal', outcome: o };
  }
  if (f.error) {
    if (!f.error.failure) throw new WorkerProtocolError('error terminal without a failure');
    return { type: 'terminal', outcome: { kind: 'failed', failure: failureIn(f.error.failure)! } };
  }
  if (f.cancelled) return { type: 'terminal', outcome: { kind: 'cancelled', reason: f.cancelled.reason ?? '' } };
  if (f.timedOut) return { type: 'terminal', outcome: { kind: 'timed-out' } };
  if (f.exitForRecovery) return { type: 'terminal', outcome: { kind: 'exit-for-recovery', reason: f.exitForRecovery.reason ?? '' } };
  if (f.emit) {
    const chunk = payloadIn(f.emit.chunk);
    const seq = f.emit.stepSeq ?? 0;
    if (!chunk === !seq) throw new WorkerProtocolError('emit must carry exactly one of chunk and step_seq');
    const item: EmitItem = chunk ? { kind: 'chunk', data: chunk } : { kind: 'step-started', seq: positiveSeq(seq, 'step started'), name: f.emit.stepName ?? '' };
    return { type: 'emit', item, dropped: f.emit.dropped ?? 0 };
  }
  throw new WorkerProtocolError(`empty or unknown frame of ${bytes.length} bytes`);
}

function positiveSeq(v: unknown, what: string): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) throw new WorkerProtocolError(`${what} has seq ${String(v)}`);
  return v;
}
