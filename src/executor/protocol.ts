/**
 * The worker protocol (proto/turnlog/v1/worker.proto): plain TS messages ⇄ length-delimited
 * protobuf frames, and a {@link FrameReader} that splits a byte stream back into frames.
 * Both sides import this file; it must stay light (no engine, store, protobufjs or @temporalio/proto):
 * the codec is written by hand on wire.ts, byte for byte what protobufjs' reflected encoder writes
 * for the same messages (test/executor/protocol-codec.test.ts holds it to that), because loading
 * protobufjs and the descriptor was most of a cold worker's start-up.
 * Every frame from a worker is validated here; anything malformed is a {@link WorkerProtocolError}.
 */
import { TurnlogError } from '../errors.js';
import type { EntryMode, FailureInfo, Payload, RetryPolicy, WorkflowKind } from '../history/events.js';
import type { QueuedInput, RecordedCall } from '../history/state.js';
import type { AttemptOutcome, CancelKind, EmitItem, StepRecord, TurnSpec } from '../attempt/host.js';
import * as pb from '../internal/wire/fields.js';
import { EMPTY_BYTES as EMPTY, LEN, Reader, Writer, readFailure, readPayload, writeFailure, writePayload } from '../internal/wire/wire.js';

/** Bumped for any change a peer of the other version would misread. */
export const PROTOCOL_VERSION = 2;
/** Frames above this size are refused (the worker is killed). */
export const MAX_FRAME_BYTES = 64 * 1024 * 1024;
/** The child's file descriptor for the protocol pipe (0–2 stay stdin/stdout/stderr). */
export const PROTOCOL_FD = 3;
/** A worker sends a Heartbeat this often while a turn runs (the engine's liveness check). */
export const HEARTBEAT_INTERVAL_MS = 1000;
/** Worker argument after the module path: a warm-pool worker, which warms up fully before Ready. */
export const PREWARM_FLAG = '--prewarm';
/** Worker argument: the kernel SIGKILLs this worker when the engine dies (setpriv --pdeathsig), no watchdog thread needed. */
export const PARENT_DEATH_SIGNAL_FLAG = '--parent-death-signal';

/** A worker broke the protocol; the engine kills it and fails the attempt with this error. */
export class WorkerProtocolError extends TurnlogError {
  override readonly name = 'WorkerProtocolError';
  constructor(detail: string) {
    super('TURNLOG_WORKER_PROTOCOL', `Worker protocol violation: ${detail}. The worker was killed; this is a turnlog bug or handler code writing to fd 3.`);
  }
}

// ---------------------------------------------------------------------------------------------
// Messages

export type EngineMessage =
  | { type: 'run'; spec: TurnSpec; pendingInputs: number }
  | { type: 'cancel'; kind: CancelKind; reason: string }
  | { type: 'record-ack'; seq: number; error?: FailureInfo }
  | { type: 'take-inputs-reply'; seq: number; inputs: { inputId: string; input: Payload }[]; error?: FailureInfo }
  | { type: 'pending-inputs'; count: number }
  | { type: 'shutdown' };

/** The terminal outcomes a worker can report (crashed and killed are the engine's to observe). */
export type TerminalOutcome = Exclude<AttemptOutcome, { kind: 'crashed' } | { kind: 'killed' }>;

export type WorkerMessage =
  | { type: 'ready'; protocolVersion: number; pid: number; workflows: string[]; error?: FailureInfo }
  | { type: 'step-record'; record: StepRecord }
  | { type: 'checkpoint'; seq: number; data: Payload }
  | { type: 'take-inputs'; seq: number }
  | { type: 'heartbeat' }
  | { type: 'terminal'; outcome: TerminalOutcome }
  | { type: 'emit'; item: EmitItem; dropped: number };

// Enum tables and tags are generated from worker.proto and history.proto (fields.ts).
const KINDS: readonly (WorkflowKind | undefined)[] = pb.WORKFLOW_KINDS;
const ENTRY_MODES: readonly (EntryMode | undefined)[] = pb.ENTRY_MODES;
const CANCEL_KINDS: readonly (CancelKind | undefined)[] = pb.WORKER_CANCEL_KINDS;
const EF = pb.EngineFrame;
const RUN = pb.EngineFrame_Run;
const CALL = pb.EngineFrame_Call;
const STEP_CALL = pb.EngineFrame_StepCall;
const TAKEN = pb.EngineFrame_TakenInput;
const WF = pb.WorkerFrame;
const RETRY = pb.RetryPolicy;

// ---------------------------------------------------------------------------------------------
// Shared messages: the taken input

function writeTaken(w: Writer, tag: number, q: { inputId: string; input: Payload; steering?: boolean; eventId?: number; time?: number }): void {
  w.uint32(tag);
  const at = w.fork();
  w.stringField(TAKEN.inputId, q.inputId);
  writePayload(w, TAKEN.input, q.input);
  w.boolField(TAKEN.steering, q.steering);
  w.uint32Field(TAKEN.eventId, q.eventId);
  w.doubleField(TAKEN.timeMs, q.time);
  w.ldelim(at);
}

function readTaken(r: Reader): QueuedInput {
  const q: QueuedInput = { inputId: '', input: { metadata: {}, data: EMPTY }, steering: false, eventId: 0, time: 0 };
  while (r.more()) {
    const t = r.uint32();
    switch (t) {
      case TAKEN.inputId:
        q.inputId = r.string();
        continue;
      case TAKEN.input:
        q.input = r.nested(readPayload);
        continue;
      case TAKEN.steering:
        q.steering = r.bool();
        continue;
      case TAKEN.eventId:
        q.eventId = r.uint32();
        continue;
      case TAKEN.timeMs:
        q.time = r.double();
        continue;
    }
    r.skip(t & 7);
  }
  return q;
}

// ---------------------------------------------------------------------------------------------
// Engine → worker

export function encodeEngineMessage(m: EngineMessage): Uint8Array {
  const w = new Writer(m.type === 'run' ? 1024 : 128);
  let at: number;
  switch (m.type) {
    case 'run':
      w.uint32(EF.run);
      at = w.fork();
      writeRun(w, m.spec, m.pendingInputs);
      w.ldelim(at);
      break;
    case 'cancel':
      w.uint32(EF.cancel);
      at = w.fork();
      w.int32Field(pb.EngineFrame_Cancel.kind, CANCEL_KINDS.indexOf(m.kind));
      w.stringField(pb.EngineFrame_Cancel.reason, m.reason);
      w.ldelim(at);
      break;
    case 'record-ack':
      w.uint32(EF.recordAck);
      at = w.fork();
      w.uint32Field(pb.EngineFrame_RecordAck.seq, m.seq);
      if (m.error) writeFailure(w, pb.EngineFrame_RecordAck.error, m.error);
      w.ldelim(at);
      break;
    case 'take-inputs-reply':
      w.uint32(EF.takeInputsReply);
      at = w.fork();
      w.uint32Field(pb.EngineFrame_TakeInputsReply.seq, m.seq);
      for (const q of m.inputs) writeTaken(w, pb.EngineFrame_TakeInputsReply.inputs, { inputId: q.inputId, input: q.input });
      if (m.error) writeFailure(w, pb.EngineFrame_TakeInputsReply.error, m.error);
      w.ldelim(at);
      break;
    case 'pending-inputs':
      w.uint32(EF.pendingInputs);
      at = w.fork();
      w.uint32Field(pb.EngineFrame_PendingInputs.count, m.count);
      w.ldelim(at);
      break;
    case 'shutdown':
      w.emptyField(EF.shutdown);
      break;
  }
  return w.finishDelimited();
}

/** Worker side. The engine is trusted, but a bad frame still throws rather than misbehaving. */
export function decodeEngineMessage(bytes: Uint8Array): EngineMessage {
  try {
    const r = new Reader(bytes);
    let m: EngineMessage | undefined;
    while (r.more()) {
      const t = r.uint32();
      switch (t) {
        case EF.run: {
          let pendingInputs = 0;
          const spec = r.nested((r) => readRun(r, (n) => (pendingInputs = n)));
          m = { type: 'run', spec, pendingInputs };
          continue;
        }
        case EF.cancel: {
          let kind = 0;
          let reason = '';
          r.nested((r) => {
            while (r.more()) {
              const u = r.uint32();
              if (u === pb.EngineFrame_Cancel.kind) kind = r.int32();
              else if (u === pb.EngineFrame_Cancel.reason) reason = r.string();
              else r.skip(u & 7);
            }
          });
          const k = CANCEL_KINDS[kind];
          if (!k) throw new WorkerProtocolError(`unknown cancel kind ${kind}`);
          m = { type: 'cancel', kind: k, reason };
          continue;
        }
        case EF.recordAck: {
          const ack: EngineMessage = { type: 'record-ack', seq: 0 };
          r.nested((r) => {
            while (r.more()) {
              const u = r.uint32();
              if (u === pb.EngineFrame_RecordAck.seq) ack.seq = r.uint32();
              else if (u === pb.EngineFrame_RecordAck.error) ack.error = r.nested(readFailure);
              else r.skip(u & 7);
            }
          });
          m = ack;
          continue;
        }
        case EF.takeInputsReply: {
          const reply: EngineMessage = { type: 'take-inputs-reply', seq: 0, inputs: [] };
          r.nested((r) => {
            while (r.more()) {
              const u = r.uint32();
              if (u === pb.EngineFrame_TakeInputsReply.seq) reply.seq = r.uint32();
              else if (u === pb.EngineFrame_TakeInputsReply.inputs) {
                const q = r.nested(readTaken);
                reply.inputs.push({ inputId: q.inputId, input: q.input });
              } else if (u === pb.EngineFrame_TakeInputsReply.error) reply.error = r.nested(readFailure);
              else r.skip(u & 7);
            }
          });
          m = reply;
          continue;
        }
        case EF.pendingInputs: {
          let count = 0;
          r.nested((r) => {
            while (r.more()) {
              const u = r.uint32();
              if (u === pb.EngineFrame_PendingInputs.count) count = r.uint32();
              else r.skip(u & 7);
            }
          });
          m = { type: 'pending-inputs', count };
          continue;
        }
        case EF.shutdown:
          r.nested(skipAll);
          m = { type: 'shutdown' };
          continue;
      }
      r.skip(t & 7);
    }
    if (!m) throw new WorkerProtocolError('empty or unknown engine frame');
    return m;
  } catch (err) {
    if (err instanceof WorkerProtocolError) throw err;
    throw new WorkerProtocolError(`undecodable engine frame (${(err as Error).message})`);
  }
}

function skipAll(r: Reader): void {
  while (r.more()) r.skip(r.uint32() & 7);
}

function writeRun(w: Writer, s: TurnSpec, pendingInputs: number): void {
  w.stringField(RUN.taskId, s.taskId);
  w.stringField(RUN.workflow, s.workflow);
  w.int32Field(RUN.kind, KINDS.indexOf(s.kind));
  w.uint32Field(RUN.turn, s.turn);
  w.uint32Field(RUN.attempt, s.attempt);
  w.int32Field(RUN.entryMode, ENTRY_MODES.indexOf(s.entryMode));
  w.boolField(RUN.steered, s.steered);
  w.stringField(RUN.inputId, s.inputId);
  writePayload(w, RUN.input, s.input);
  if (s.state) writePayload(w, RUN.state, s.state);
  for (const c of s.calls) writeCall(w, RUN.calls, c);
  for (const q of s.taken) writeTaken(w, RUN.taken, q);
  if (s.checkpoint) writePayload(w, RUN.checkpoint, s.checkpoint);
  w.doubleField(RUN.turnStartedAtMs, s.turnStartedAt);
  w.doubleField(RUN.deadlineMs, s.deadline);
  w.uint32Field(RUN.recoveryCount, s.recoveryCount);
  const p = s.stepRetry;
  if (p != null) {
    w.uint32(RUN.stepRetry);
    const at = w.fork();
    w.uint32Field(RETRY.maxAttempts, p.maxAttempts);
    w.doubleField(RETRY.initialIntervalMs, p.initialIntervalMs);
    w.doubleField(RETRY.backoffCoefficient, p.backoffCoefficient);
    w.doubleField(RETRY.maxIntervalMs, p.maxIntervalMs);
    w.stringsField(RETRY.nonRetryableTypes, p.nonRetryableTypes);
    w.ldelim(at);
  }
  w.boolField(RUN.timeoutExceeded, s.timeoutExceeded);
  w.boolField(RUN.cancelRequested, s.cancelRequested);
  w.uint32Field(RUN.pendingInputs, pendingInputs);
}

function writeCall(w: Writer, tag: number, c: RecordedCall): void {
  w.uint32(tag);
  const at = w.fork();
  w.uint32Field(CALL.seq, c.seq);
  w.uint32Field(CALL.eventId, c.eventId);
  let inner: number;
  switch (c.kind) {
    case 'step':
      w.uint32(CALL.step);
      inner = w.fork();
      w.stringField(STEP_CALL.name, c.name);
      w.uint32Field(STEP_CALL.attempt, c.attempt);
      if (c.result) writePayload(w, STEP_CALL.result, c.result);
      if (c.failure) writeFailure(w, STEP_CALL.failure, c.failure);
      w.doubleField(STEP_CALL.durationMs, c.durationMs);
      w.ldelim(inner);
      break;
    case 'checkpoint':
      w.uint32(CALL.checkpoint);
      inner = w.fork();
      writePayload(w, pb.EngineFrame_CheckpointCall.data, c.data);
      w.ldelim(inner);
      break;
    case 'take-inputs':
      w.uint32(CALL.takeInputs);
      inner = w.fork();
      w.stringsField(pb.EngineFrame_TakeInputsCall.inputIds, c.inputIds);
      w.ldelim(inner);
      break;
  }
  w.ldelim(at);
}

function readRun(r: Reader, setPending: (n: number) => void): TurnSpec {
  let kind = 0;
  let entryMode = 0;
  let state: Payload | undefined;
  let checkpoint: Payload | undefined;
  // An absent step_retry reads as no retry; a present one has proto3 defaults (as before).
  let stepRetry: RetryPolicy = { maxAttempts: 1, initialIntervalMs: 0, backoffCoefficient: 1, maxIntervalMs: 0, nonRetryableTypes: [] };
  const spec: TurnSpec = {
    taskId: '',
    workflow: '',
    kind: 'one-shot',
    turn: 0,
    attempt: 0,
    entryMode: 'fresh',
    steered: false,
    inputId: '',
    input: { metadata: {}, data: EMPTY },
    calls: [],
    taken: [],
    turnStartedAt: 0,
    deadline: 0,
    recoveryCount: 0,
    stepRetry,
    timeoutExceeded: false,
    cancelRequested: false,
  };
  while (r.more()) {
    const t = r.uint32();
    switch (t) {
      case RUN.taskId:
        spec.taskId = r.string();
        continue;
      case RUN.workflow:
        spec.workflow = r.string();
        continue;
      case RUN.kind:
        kind = r.int32();
        continue;
      case RUN.turn:
        spec.turn = r.uint32();
        continue;
      case RUN.attempt:
        spec.attempt = r.uint32();
        continue;
      case RUN.entryMode:
        entryMode = r.int32();
        continue;
      case RUN.steered:
        spec.steered = r.bool();
        continue;
      case RUN.inputId:
        spec.inputId = r.string();
        continue;
      case RUN.input:
        spec.input = r.nested(readPayload);
        continue;
      case RUN.state:
        state = r.nested(readPayload);
        continue;
      case RUN.calls:
        spec.calls.push(r.nested(readCall));
        continue;
      case RUN.taken:
        spec.taken.push(r.nested(readTaken));
        continue;
      case RUN.checkpoint:
        checkpoint = r.nested(readPayload);
        continue;
      case RUN.turnStartedAtMs:
        spec.turnStartedAt = r.double();
        continue;
      case RUN.deadlineMs:
        spec.deadline = r.double();
        continue;
      case RUN.recoveryCount:
        spec.recoveryCount = r.uint32();
        continue;
      case RUN.stepRetry:
        stepRetry = { maxAttempts: 0, initialIntervalMs: 0, backoffCoefficient: 0, maxIntervalMs: 0, nonRetryableTypes: [] };
        r.nested((r) => {
          while (r.more()) {
            const u = r.uint32();
            if (u === RETRY.maxAttempts) stepRetry.maxAttempts = r.uint32();
            else if (u === RETRY.initialIntervalMs) stepRetry.initialIntervalMs = r.double();
            else if (u === RETRY.backoffCoefficient) stepRetry.backoffCoefficient = r.double();
            else if (u === RETRY.maxIntervalMs) stepRetry.maxIntervalMs = r.double();
            else if (u === RETRY.nonRetryableTypes) stepRetry.nonRetryableTypes.push(r.string());
            else r.skip(u & 7);
          }
        });
        spec.stepRetry = stepRetry;
        continue;
      case RUN.timeoutExceeded:
        spec.timeoutExceeded = r.bool();
        continue;
      case RUN.cancelRequested:
        spec.cancelRequested = r.bool();
        continue;
      case RUN.pendingInputs:
        setPending(r.uint32());
        continue;
    }
    r.skip(t & 7);
  }
  const k = KINDS[kind];
  const e = ENTRY_MODES[entryMode];
  if (!k || !e) throw new WorkerProtocolError('run frame without kind or entry mode');
  spec.kind = k;
  spec.entryMode = e;
  if (state) spec.state = state;
  if (checkpoint) spec.checkpoint = checkpoint;
  return spec;
}

function readCall(r: Reader): RecordedCall {
  let seq = 0;
  let eventId = 0;
  let call: RecordedCall | undefined;
  while (r.more()) {
    const t = r.uint32();
    switch (t) {
      case CALL.seq:
        seq = r.uint32();
        continue;
      case CALL.eventId:
        eventId = r.uint32();
        continue;
      case CALL.step: {
        const c: Extract<RecordedCall, { kind: 'step' }> = { kind: 'step', seq: 0, eventId: 0, name: '', attempt: 0, durationMs: 0 };
        r.nested((r) => {
          while (r.more()) {
            const u = r.uint32();
            if (u === STEP_CALL.name) c.name = r.string();
            else if (u === STEP_CALL.attempt) c.attempt = r.uint32();
            else if (u === STEP_CALL.result) c.result = r.nested(readPayload);
            else if (u === STEP_CALL.failure) c.failure = r.nested(readFailure);
            else if (u === STEP_CALL.durationMs) c.durationMs = r.double();
            else r.skip(u & 7);
          }
        });
        call = c;
        continue;
      }
      case CALL.checkpoint: {
        let data: Payload = { metadata: {}, data: EMPTY };
        r.nested((r) => {
          while (r.more()) {
            const u = r.uint32();
            if (u === pb.EngineFrame_CheckpointCall.data) data = r.nested(readPayload);
            else r.skip(u & 7);
          }
        });
        call = { kind: 'checkpoint', seq: 0, eventId: 0, data };
        continue;
      }
      case CALL.takeInputs: {
        const inputIds: string[] = [];
        r.nested((r) => {
          while (r.more()) {
            const u = r.uint32();
            if (u === pb.EngineFrame_TakeInputsCall.inputIds) inputIds.push(r.string());
            else r.skip(u & 7);
          }
        });
        call = { kind: 'take-inputs', seq: 0, eventId: 0, inputIds };
        continue;
      }
    }
    r.skip(t & 7);
  }
  if (!call) throw new WorkerProtocolError(`recorded call ${seq} has no kind`);
  call.seq = seq;
  call.eventId = eventId;
  return call;
}

// ---------------------------------------------------------------------------------------------
// Worker → engine

export function encodeWorkerMessage(m: WorkerMessage): Uint8Array {
  const w = new Writer(m.type === 'heartbeat' ? 16 : 256);
  let at: number;
  switch (m.type) {
    case 'ready': {
      const F = pb.WorkerFrame_Ready;
      w.uint32(WF.ready);
      at = w.fork();
      w.uint32Field(F.protocolVersion, m.protocolVersion);
      w.uint32Field(F.pid, m.pid);
      w.stringsField(F.workflows, m.workflows);
      if (m.error) writeFailure(w, F.error, m.error);
      w.ldelim(at);
      break;
    }
    case 'step-record': {
      const F = pb.WorkerFrame_StepRecord;
      const r = m.record;
      w.uint32(WF.stepRecord);
      at = w.fork();
      w.uint32Field(F.seq, r.seq);
      w.stringField(F.name, r.name);
      if (r.result) writePayload(w, F.result, r.result);
      if (r.failure) writeFailure(w, F.failure, r.failure);
      w.doubleField(F.durationMs, r.durationMs);
      w.ldelim(at);
      break;
    }
    case 'checkpoint':
      w.uint32(WF.checkpoint);
      at = w.fork();
      w.uint32Field(pb.WorkerFrame_Checkpoint.seq, m.seq);
      writePayload(w, pb.WorkerFrame_Checkpoint.data, m.data);
      w.ldelim(at);
      break;
    case 'take-inputs':
      w.uint32(WF.takeInputs);
      at = w.fork();
      w.uint32Field(pb.WorkerFrame_TakeInputs.seq, m.seq);
      w.ldelim(at);
      break;
    case 'heartbeat':
      w.emptyField(WF.heartbeat);
      break;
    case 'terminal':
      writeTerminal(w, m.outcome);
      break;
    case 'emit': {
      const F = pb.WorkerFrame_Emit;
      w.uint32(WF.emit);
      at = w.fork();
      if (m.item.kind === 'chunk') writePayload(w, F.chunk, m.item.data);
      else {
        w.uint32Field(F.stepSeq, m.item.seq);
        w.stringField(F.stepName, m.item.name);
      }
      if (m.dropped) w.uint32Field(F.dropped, m.dropped);
      w.ldelim(at);
      break;
    }
  }
  return w.finishDelimited();
}

function writeTerminal(w: Writer, o: TerminalOutcome): void {
  let at: number;
  switch (o.kind) {
    case 'completed':
      w.uint32(WF.result);
      at = w.fork();
      writePayload(w, pb.WorkerFrame_Result.output, o.output);
      if (o.state) writePayload(w, pb.WorkerFrame_Result.state, o.state);
      w.ldelim(at);
      return;
    case 'suspended':
      w.uint32(WF.suspend);
      at = w.fork();
      w.stringField(pb.WorkerFrame_Suspend.reason, o.reason);
      if (o.output) writePayload(w, pb.WorkerFrame_Suspend.output, o.output);
      if (o.state) writePayload(w, pb.WorkerFrame_Suspend.state, o.state);
      w.ldelim(at);
      return;
    case 'exit-for-recovery':
      w.uint32(WF.exitForRecovery);
      at = w.fork();
      w.stringField(pb.WorkerFrame_ExitForRecovery.reason, o.reason);
      w.ldelim(at);
      return;
    case 'failed':
      w.uint32(WF.error);
      at = w.fork();
      writeFailure(w, pb.WorkerFrame_Error.failure, o.failure);
      w.ldelim(at);
      return;
    case 'cancelled':
      w.uint32(WF.cancelled);
      at = w.fork();
      w.stringField(pb.WorkerFrame_Cancelled.reason, o.reason);
      w.ldelim(at);
      return;
    case 'timed-out':
      w.emptyField(WF.timedOut);
      return;
  }
}

type Kind = 'payload' | 'failure' | 'string' | 'strings' | 'uint32' | 'double';
/** A message's fields by tag: payloads, failures, strings and numbers (the worker frames' bodies are flat). */
type Fields = Map<number, Payload | FailureInfo | string | string[] | number>;

/**
 * Reads one flat message of a worker frame. `kinds` gives each known tag its type; a field of
 * another wire type has another tag, so it is skipped like an unknown one.
 */
function readFlat(r: Reader, kinds: Readonly<Record<number, Kind>>): Fields {
  const f: Fields = new Map();
  while (r.more()) {
    const t = r.uint32();
    const kind = kinds[t];
    if (kind === 'payload') f.set(t, r.nested(readPayload));
    else if (kind === 'failure') f.set(t, r.nested(readFailure));
    else if (kind === 'string') f.set(t, r.string());
    else if (kind === 'strings') {
      const s = r.string();
      const list = f.get(t) as string[] | undefined;
      if (list) list.push(s);
      else f.set(t, [s]);
    } else if (kind === 'uint32') f.set(t, r.uint32());
    else if (kind === 'double') f.set(t, r.double());
    else r.skip(t & 7);
  }
  return f;
}

const READY = pb.WorkerFrame_Ready;
const STEP_RECORD = pb.WorkerFrame_StepRecord;
const CHECKPOINT = pb.WorkerFrame_Checkpoint;
const RESULT = pb.WorkerFrame_Result;
const SUSPEND = pb.WorkerFrame_Suspend;
const EMIT = pb.WorkerFrame_Emit;
const REASON = pb.WorkerFrame_Cancelled; // ExitForRecovery and Cancelled: { reason = 1 }
/** WorkerFrame.body tag → its message's field kinds by tag. */
const WORKER_BODIES: Readonly<Record<number, Readonly<Record<number, Kind>>>> = {
  [WF.ready]: { [READY.protocolVersion]: 'uint32', [READY.pid]: 'uint32', [READY.workflows]: 'strings', [READY.error]: 'failure' },
  [WF.stepRecord]: { [STEP_RECORD.seq]: 'uint32', [STEP_RECORD.name]: 'string', [STEP_RECORD.result]: 'payload', [STEP_RECORD.failure]: 'failure', [STEP_RECORD.durationMs]: 'double' },
  [WF.checkpoint]: { [CHECKPOINT.seq]: 'uint32', [CHECKPOINT.data]: 'payload' },
  [WF.takeInputs]: { [pb.WorkerFrame_TakeInputs.seq]: 'uint32' },
  [WF.heartbeat]: {},
  [WF.result]: { [RESULT.output]: 'payload', [RESULT.state]: 'payload' },
  [WF.suspend]: { [SUSPEND.reason]: 'string', [SUSPEND.output]: 'payload', [SUSPEND.state]: 'payload' },
  [WF.exitForRecovery]: { [pb.WorkerFrame_ExitForRecovery.reason]: 'string' },
  [WF.error]: { [pb.WorkerFrame_Error.failure]: 'failure' },
  [WF.cancelled]: { [REASON.reason]: 'string' },
  [WF.timedOut]: {},
  [WF.emit]: { [EMIT.chunk]: 'payload', [EMIT.stepSeq]: 'uint32', [EMIT.stepName]: 'string', [EMIT.dropped]: 'uint32' },
};

/**
 * True when `b` can open a WorkerFrame body: the one-byte tag of one of its members (all are
 * messages). Lets the engine refuse text written to fd 3 at its first bytes, not at a timeout.
 */
export function isWorkerFrameStart(b: number): boolean {
  return (b & 7) === LEN && WORKER_BODIES[b] !== undefined;
}

/** Engine side: decodes and validates one frame body from a worker. Throws WorkerProtocolError. */
export function decodeWorkerMessage(bytes: Uint8Array): WorkerMessage {
  // The oneof body: the last member on the wire wins (proto3).
  let body = 0;
  let f: Fields | undefined;
  try {
    const r = new Reader(bytes);
    while (r.more()) {
      const t = r.uint32();
      const kinds = WORKER_BODIES[t];
      if (kinds) {
        body = t;
        f = r.nested((r) => readFlat(r, kinds));
      } else {
        r.skip(t & 7);
      }
    }
  } catch (err) {
    throw new WorkerProtocolError(`undecodable frame of ${bytes.length} bytes (${(err as Error).message})`);
  }
  if (!f) throw new WorkerProtocolError(`empty or unknown frame of ${bytes.length} bytes`);
  const num = (n: number): number => (f.get(n) as number | undefined) ?? 0;
  const str = (n: number): string => (f.get(n) as string | undefined) ?? '';
  const payload = (n: number): Payload | undefined => f.get(n) as Payload | undefined;
  const failure = (n: number): FailureInfo | undefined => f.get(n) as FailureInfo | undefined;
  switch (body) {
    case WF.ready: {
      const m: WorkerMessage = { type: 'ready', protocolVersion: num(READY.protocolVersion), pid: num(READY.pid), workflows: (f.get(READY.workflows) as string[] | undefined) ?? [] };
      const error = failure(READY.error);
      if (error) m.error = error;
      return m;
    }
    case WF.stepRecord: {
      const seq = positiveSeq(num(STEP_RECORD.seq), 'step record');
      const name = str(STEP_RECORD.name);
      const result = payload(STEP_RECORD.result);
      const fail = failure(STEP_RECORD.failure);
      if (!name) throw new WorkerProtocolError(`step record ${seq} has no name`);
      if (!result === !fail) throw new WorkerProtocolError(`step record ${seq} ("${name}") must carry exactly one of result and failure`);
      const d = num(STEP_RECORD.durationMs);
      if (!Number.isFinite(d) || d < 0) throw new WorkerProtocolError(`step record ${seq} has duration ${d}`);
      const record: StepRecord = { seq, name, durationMs: d };
      if (result) record.result = result;
      else record.failure = fail!;
      return { type: 'step-record', record };
    }
    case WF.checkpoint: {
      const seq = positiveSeq(num(CHECKPOINT.seq), 'checkpoint');
      const data = payload(CHECKPOINT.data);
      if (!data) throw new WorkerProtocolError(`checkpoint ${seq} has no data`);
      return { type: 'checkpoint', seq, data };
    }
    case WF.takeInputs:
      return { type: 'take-inputs', seq: positiveSeq(num(pb.WorkerFrame_TakeInputs.seq), 'take-inputs') };
    case WF.heartbeat:
      return { type: 'heartbeat' };
    case WF.result: {
      const output = payload(RESULT.output);
      if (!output) throw new WorkerProtocolError('result without output');
      const o: TerminalOutcome = { kind: 'completed', output };
      const state = payload(RESULT.state);
      if (state) o.state = state;
      return { type: 'terminal', outcome: o };
    }
    case WF.suspend: {
      const o: TerminalOutcome = { kind: 'suspended', reason: str(SUSPEND.reason) };
      const output = payload(SUSPEND.output);
      if (output) o.output = output;
      const state = payload(SUSPEND.state);
      if (state) o.state = state;
      return { type: 'terminal', outcome: o };
    }
    case WF.exitForRecovery:
      return { type: 'terminal', outcome: { kind: 'exit-for-recovery', reason: str(pb.WorkerFrame_ExitForRecovery.reason) } };
    case WF.error: {
      const fail = failure(pb.WorkerFrame_Error.failure);
      if (!fail) throw new WorkerProtocolError('error terminal without a failure');
      return { type: 'terminal', outcome: { kind: 'failed', failure: fail } };
    }
    case WF.cancelled:
      return { type: 'terminal', outcome: { kind: 'cancelled', reason: str(REASON.reason) } };
    case WF.emit: {
      const chunk = payload(EMIT.chunk);
      const seq = num(EMIT.stepSeq);
      if (!chunk === !seq) throw new WorkerProtocolError('emit must carry exactly one of chunk and step_seq');
      const item: EmitItem = chunk ? { kind: 'chunk', data: chunk } : { kind: 'step-started', seq: positiveSeq(seq, 'step started'), name: str(EMIT.stepName) };
      return { type: 'emit', item, dropped: num(EMIT.dropped) };
    }
    default:
      return { type: 'terminal', outcome: { kind: 'timed-out' } };
  }
}

function positiveSeq(v: number, what: string): number {
  if (!Number.isInteger(v) || v < 1) throw new WorkerProtocolError(`${what} has seq ${String(v)}`);
  return v;
}

// ---------------------------------------------------------------------------------------------
// Framing

/**
 * Splits a byte stream into frame bodies (varint length prefix, as protobufjs `encodeDelimited`).
 * Keeps chunks as they came and joins only a frame's own bytes, so a large frame costs one copy.
 */
export class FrameReader {
  readonly #max: number;
  #chunks: Uint8Array[] = [];
  #length = 0;
  /** Body length of the frame being read, once its prefix is in; -1 before. */
  #need = -1;

  constructor(maxFrameBytes = MAX_FRAME_BYTES) {
    this.#max = maxFrameBytes;
  }

  /** Bytes received but not yet returned as a frame. */
  get buffered(): number {
    return this.#length;
  }

  /** The frame being read, once its length is in: that length and up to `max` body bytes so far. */
  partial(max = 32): { length: number; head: Uint8Array } | undefined {
    if (this.#need < 0) return undefined;
    const head: number[] = [];
    for (const c of this.#chunks) {
      for (let j = 0; j < c.length && head.length < max; j++) head.push(c[j]!);
      if (head.length >= max) break;
    }
    return { length: this.#need, head: Uint8Array.from(head) };
  }

  /** Adds bytes; returns every frame body now complete. Throws WorkerProtocolError on a bad prefix. */
  push(chunk: Uint8Array): Uint8Array[] {
    if (chunk.length) {
      this.#chunks.push(chunk);
      this.#length += chunk.length;
    }
    const out: Uint8Array[] = [];
    for (;;) {
      if (this.#need < 0 && !this.#readPrefix()) break;
      if (this.#length < this.#need) break;
      out.push(this.#take(this.#need));
      this.#need = -1;
    }
    return out;
  }

  #readPrefix(): boolean {
    let value = 0;
    let i = 0;
    for (const c of this.#chunks) {
      for (let j = 0; j < c.length; j++) {
        const b = c[j]!;
        value += (b & 0x7f) * 2 ** (7 * i);
        i++;
        if ((b & 0x80) === 0) {
          if (value > this.#max) throw new WorkerProtocolError(`frame of ${value} bytes exceeds the ${this.#max}-byte limit`);
          this.#take(i);
          this.#need = value;
          return true;
        }
        if (i >= 5) throw new WorkerProtocolError('frame length prefix longer than 5 bytes');
      }
    }
    return false;
  }

  #take(n: number): Uint8Array {
    this.#length -= n;
    const first = this.#chunks[0];
    if (first && first.length >= n) {
      const body = first.subarray(0, n);
      if (first.length === n) this.#chunks.shift();
      else this.#chunks[0] = first.subarray(n);
      return body;
    }
    const body = new Uint8Array(n);
    let off = 0;
    while (off < n) {
      const c = this.#chunks[0]!;
      const k = Math.min(c.length, n - off);
      body.set(c.subarray(0, k), off);
      off += k;
      if (k === c.length) this.#chunks.shift();
      else this.#chunks[0] = c.subarray(k);
    }
    return body;
  }
}

/**
 * Round-trips one message of every kind, so V8 has compiled every encode and decode path before
 * the first real frame (a worker calls this before Ready; a pre-warmed worker's first turn skips it).
 */
export function warmUpCodecs(): void {
  const payload = { metadata: { encoding: new Uint8Array([1]) }, data: new Uint8Array([1]) };
  const failure: FailureInfo = { message: 'm', type: 't', stack: 's', code: 'c', cause: { message: 'c', type: 't' } };
  const spec: TurnSpec = {
    taskId: 't', workflow: 'w', kind: 'multi-turn', turn: 1, attempt: 1, entryMode: 'fresh', steered: false, inputId: 'i',
    input: payload, state: payload, checkpoint: payload, turnStartedAt: 1, deadline: 2, recoveryCount: 0, timeoutExceeded: false, cancelRequested: false,
    stepRetry: { maxAttempts: 1, initialIntervalMs: 1, backoffCoefficient: 1, maxIntervalMs: 1, nonRetryableTypes: ['x'] },
    calls: [
      { kind: 'step', seq: 1, name: 's', eventId: 1, attempt: 1, result: payload, failure, durationMs: 1 },
      { kind: 'checkpoint', seq: 2, eventId: 2, data: payload },
      { kind: 'take-inputs', seq: 3, eventId: 3, inputIds: ['i'] },
    ],
    taken: [{ inputId: 'i', input: payload, steering: true, eventId: 1, time: 1 }],
  };
  const engine: EngineMessage[] = [
    { type: 'run', spec, pendingInputs: 0 },
    { type: 'cancel', kind: 'timeout', reason: 'r' },
    { type: 'record-ack', seq: 1, error: failure },
    { type: 'take-inputs-reply', seq: 1, inputs: [{ inputId: 'i', input: payload }], error: failure },
    { type: 'pending-inputs', count: 1 },
    { type: 'shutdown' },
  ];
  const worker: WorkerMessage[] = [
    { type: 'ready', protocolVersion: PROTOCOL_VERSION, pid: 1, workflows: ['w'], error: failure },
    { type: 'step-record', record: { seq: 1, name: 's', result: payload, durationMs: 1 } },
    { type: 'checkpoint', seq: 1, data: payload },
    { type: 'take-inputs', seq: 1 },
    { type: 'heartbeat' },
    { type: 'terminal', outcome: { kind: 'completed', output: payload, state: payload } },
    { type: 'terminal', outcome: { kind: 'suspended', reason: 'r', output: payload, state: payload } },
    { type: 'terminal', outcome: { kind: 'failed', failure } },
    { type: 'terminal', outcome: { kind: 'cancelled', reason: 'r' } },
    { type: 'terminal', outcome: { kind: 'timed-out' } },
    { type: 'terminal', outcome: { kind: 'exit-for-recovery', reason: 'r' } },
  ];
  const reader = new FrameReader();
  for (const m of engine) for (const f of reader.push(encodeEngineMessage(m))) decodeEngineMessage(f);
  for (const m of worker) for (const f of reader.push(encodeWorkerMessage(m))) decodeWorkerMessage(f);
}
