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
import type { AttemptOutcome, CancelKind, StepRecord, TurnSpec } from '../attempt/host.js';
import { FIXED64, LEN, Reader, VARINT, Writer } from './wire.js';

/** Bumped for any change a peer of the other version would misread. */
export const PROTOCOL_VERSION = 1;
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
  | { type: 'terminal'; outcome: TerminalOutcome };

// Index = proto enum number; 0 is UNSPECIFIED (same numbering as history.proto).
const KINDS: readonly (WorkflowKind | undefined)[] = [undefined, 'one-shot', 'multi-turn'];
const ENTRY_MODES: readonly (EntryMode | undefined)[] = [undefined, 'fresh', 'resumed', 'recovered'];
const CANCEL_KINDS: readonly (CancelKind | undefined)[] = [undefined, 'timeout', 'cancel', 'shutdown'];

const EMPTY: Uint8Array = new Uint8Array(0);
/** Failure.source carries the error code (as history/codec.ts writes it). */
const CODE_PREFIX = 'turnlog:';
const MAX_DEPTH = 100;

// Tags: (field number << 3) | wire type. Field numbers are worker.proto's (and Temporal's for
// Payload and Failure); the comments name the field.
const T = (field: number, wireType: number): number => (field << 3) | wireType;

// ---------------------------------------------------------------------------------------------
// Shared messages: temporal.api.common.v1.Payload, temporal.api.failure.v1.Failure

function writePayload(w: Writer, field: number, p: Payload): void {
  w.tag(field, LEN);
  const at = w.fork();
  const md = p.metadata;
  if (md != null) {
    for (const k of Object.keys(md)) {
      // metadata: map<string, bytes> = 1; each entry is a message {key = 1; value = 2}
      w.tag(1, LEN);
      const e = w.fork();
      w.tag(1, LEN);
      w.string(k);
      w.tag(2, LEN);
      w.bytes(md[k]!);
      w.ldelim(e);
    }
  }
  if (p.data != null && p.data.length) {
    w.tag(2, LEN); // data
    w.bytes(p.data);
  }
  w.ldelim(at);
}

function readPayload(r: Reader): Payload {
  const metadata: Record<string, Uint8Array> = {};
  let data = EMPTY;
  while (r.more()) {
    const t = r.uint32();
    if (t === T(1, LEN)) {
      let key = '';
      let value = EMPTY;
      r.nested((r) => {
        while (r.more()) {
          const u = r.uint32();
          if (u === T(1, LEN)) key = r.string();
          else if (u === T(2, LEN)) value = r.bytes();
          else r.skip(u & 7);
        }
      });
      if (key === '__proto__') Object.defineProperty(metadata, key, { value, enumerable: true, writable: true, configurable: true });
      else metadata[key] = value;
    } else if (t === T(2, LEN)) {
      data = r.bytes();
    } else {
      r.skip(t & 7);
    }
  }
  return { metadata, data };
}

/** Same mapping as history/codec.ts failureToProto (type in ApplicationFailureInfo, code in source). */
function writeFailure(w: Writer, field: number, f: FailureInfo, depth = 0): void {
  if (depth > MAX_DEPTH) throw new Error('max depth exceeded');
  w.tag(field, LEN);
  const at = w.fork();
  w.stringField(1, f.message); // message
  w.stringField(2, f.code === undefined ? 'turnlog' : CODE_PREFIX + f.code); // source
  w.stringField(3, f.stack ?? ''); // stack_trace
  if (f.cause) writeFailure(w, 4, f.cause, depth + 1); // cause
  w.tag(5, LEN); // application_failure_info
  const info = w.fork();
  w.stringField(1, f.type); // type
  w.boolField(2, f.nonRetryable ?? false); // non_retryable
  if (f.details) {
    w.tag(3, LEN); // details: Payloads { repeated Payload payloads = 1 }
    const d = w.fork();
    writePayload(w, 1, f.details);
    w.ldelim(d);
  }
  w.ldelim(info);
  w.ldelim(at);
}

/** Same mapping as history/codec.ts failureFromProto. */
function readFailure(r: Reader, depth = 0): FailureInfo {
  if (depth > MAX_DEPTH) throw new Error('max depth exceeded');
  let message = '';
  let source = '';
  let stack = '';
  let cause: FailureInfo | undefined;
  let type = '';
  let nonRetryable = false;
  let details: Payload | undefined;
  while (r.more()) {
    const t = r.uint32();
    switch (t) {
      case T(1, LEN):
        message = r.string();
        continue;
      case T(2, LEN):
        source = r.string();
        continue;
      case T(3, LEN):
        stack = r.string();
        continue;
      case T(4, LEN):
        cause = r.nested((r) => readFailure(r, depth + 1));
        continue;
      case T(5, LEN):
        r.nested((r) => {
          while (r.more()) {
            const u = r.uint32();
            if (u === T(1, LEN)) type = r.string();
            else if (u === T(2, VARINT)) nonRetryable = r.bool();
            else if (u === T(3, LEN)) {
              let first: Payload | undefined;
              r.nested((r) => {
                while (r.more()) {
                  const v = r.uint32();
                  if (v === T(1, LEN)) {
                    const p = r.nested(readPayload);
                    first ??= p;
                  } else r.skip(v & 7);
                }
              });
              details = first;
            } else r.skip(u & 7);
          }
        });
        continue;
    }
    r.skip(t & 7);
  }
  const f: FailureInfo = { message, type: type || 'Error' };
  if (stack) f.stack = stack;
  if (nonRetryable) f.nonRetryable = true;
  if (source.startsWith(CODE_PREFIX)) f.code = source.slice(CODE_PREFIX.length);
  if (details) f.details = details;
  if (cause) f.cause = cause;
  return f;
}

function writeTaken(w: Writer, field: number, q: { inputId: string; input: Payload; steering?: boolean; eventId?: number; time?: number }): void {
  w.tag(field, LEN);
  const at = w.fork();
  w.stringField(1, q.inputId);
  writePayload(w, 2, q.input);
  w.boolField(3, q.steering);
  w.uint32Field(4, q.eventId);
  w.doubleField(5, q.time); // time_ms
  w.ldelim(at);
}

function readTaken(r: Reader): QueuedInput {
  const q: QueuedInput = { inputId: '', input: { metadata: {}, data: EMPTY }, steering: false, eventId: 0, time: 0 };
  while (r.more()) {
    const t = r.uint32();
    switch (t) {
      case T(1, LEN):
        q.inputId = r.string();
        continue;
      case T(2, LEN):
        q.input = r.nested(readPayload);
        continue;
      case T(3, VARINT):
        q.steering = r.bool();
        continue;
      case T(4, VARINT):
        q.eventId = r.uint32();
        continue;
      case T(5, FIXED64):
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
      w.tag(1, LEN);
      at = w.fork();
      writeRun(w, m.spec, m.pendingInputs);
      w.ldelim(at);
      break;
    case 'cancel':
      w.tag(2, LEN);
      at = w.fork();
      w.int32Field(1, CANCEL_KINDS.indexOf(m.kind));
      w.stringField(2, m.reason);
      w.ldelim(at);
      break;
    case 'record-ack':
      w.tag(3, LEN);
      at = w.fork();
      w.uint32Field(1, m.seq);
      if (m.error) writeFailure(w, 2, m.error);
      w.ldelim(at);
      break;
    case 'take-inputs-reply':
      w.tag(4, LEN);
      at = w.fork();
      w.uint32Field(1, m.seq);
      for (const q of m.inputs) writeTaken(w, 2, { inputId: q.inputId, input: q.input });
      if (m.error) writeFailure(w, 3, m.error);
      w.ldelim(at);
      break;
    case 'pending-inputs':
      w.tag(5, LEN);
      at = w.fork();
      w.uint32Field(1, m.count);
      w.ldelim(at);
      break;
    case 'shutdown':
      w.emptyField(6);
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
        case T(1, LEN): {
          let pendingInputs = 0;
          const spec = r.nested((r) => readRun(r, (n) => (pendingInputs = n)));
          m = { type: 'run', spec, pendingInputs };
          continue;
        }
        case T(2, LEN): {
          let kind = 0;
          let reason = '';
          r.nested((r) => {
            while (r.more()) {
              const u = r.uint32();
              if (u === T(1, VARINT)) kind = r.int32();
              else if (u === T(2, LEN)) reason = r.string();
              else r.skip(u & 7);
            }
          });
          const k = CANCEL_KINDS[kind];
          if (!k) throw new WorkerProtocolError(`unknown cancel kind ${kind}`);
          m = { type: 'cancel', kind: k, reason };
          continue;
        }
        case T(3, LEN): {
          const ack: EngineMessage = { type: 'record-ack', seq: 0 };
          r.nested((r) => {
            while (r.more()) {
              const u = r.uint32();
              if (u === T(1, VARINT)) ack.seq = r.uint32();
              else if (u === T(2, LEN)) ack.error = r.nested(readFailure);
              else r.skip(u & 7);
            }
          });
          m = ack;
          continue;
        }
        case T(4, LEN): {
          const reply: EngineMessage = { type: 'take-inputs-reply', seq: 0, inputs: [] };
          r.nested((r) => {
            while (r.more()) {
              const u = r.uint32();
              if (u === T(1, VARINT)) reply.seq = r.uint32();
              else if (u === T(2, LEN)) {
                const q = r.nested(readTaken);
                reply.inputs.push({ inputId: q.inputId, input: q.input });
              } else if (u === T(3, LEN)) reply.error = r.nested(readFailure);
              else r.skip(u & 7);
            }
          });
          m = reply;
          continue;
        }
        case T(5, LEN): {
          let count = 0;
          r.nested((r) => {
            while (r.more()) {
              const u = r.uint32();
              if (u === T(1, VARINT)) count = r.uint32();
              else r.skip(u & 7);
            }
          });
          m = { type: 'pending-inputs', count };
          continue;
        }
        case T(6, LEN):
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
  w.stringField(1, s.taskId);
  w.stringField(2, s.workflow);
  w.int32Field(3, KINDS.indexOf(s.kind));
  w.uint32Field(4, s.turn);
  w.uint32Field(5, s.attempt);
  w.int32Field(6, ENTRY_MODES.indexOf(s.entryMode));
  w.boolField(7, s.steered);
  w.stringField(8, s.inputId);
  writePayload(w, 9, s.input);
  if (s.state) writePayload(w, 10, s.state);
  for (const c of s.calls) writeCall(w, 11, c);
  for (const q of s.taken) writeTaken(w, 12, q);
  if (s.checkpoint) writePayload(w, 13, s.checkpoint);
  w.doubleField(14, s.turnStartedAt); // turn_started_at_ms
  w.doubleField(15, s.deadline); // deadline_ms
  w.uint32Field(16, s.recoveryCount);
  const p = s.stepRetry;
  if (p != null) {
    w.tag(17, LEN); // step_retry: turnlog.v1.RetryPolicy
    const at = w.fork();
    w.uint32Field(1, p.maxAttempts);
    w.doubleField(2, p.initialIntervalMs);
    w.doubleField(3, p.backoffCoefficient);
    w.doubleField(4, p.maxIntervalMs);
    w.stringsField(5, p.nonRetryableTypes);
    w.ldelim(at);
  }
  w.boolField(18, s.timeoutExceeded);
  w.boolField(19, s.cancelRequested);
  w.uint32Field(20, pendingInputs);
}

function writeCall(w: Writer, field: number, c: RecordedCall): void {
  w.tag(field, LEN);
  const at = w.fork();
  w.uint32Field(1, c.seq);
  w.uint32Field(2, c.eventId);
  let inner: number;
  switch (c.kind) {
    case 'step':
      w.tag(3, LEN);
      inner = w.fork();
      w.stringField(1, c.name);
      w.uint32Field(2, c.attempt);
      if (c.result) writePayload(w, 3, c.result);
      if (c.failure) writeFailure(w, 4, c.failure);
      w.doubleField(5, c.durationMs);
      w.ldelim(inner);
      break;
    case 'checkpoint':
      w.tag(4, LEN);
      inner = w.fork();
      writePayload(w, 1, c.data);
      w.ldelim(inner);
      break;
    case 'take-inputs':
      w.tag(5, LEN);
      inner = w.fork();
      w.stringsField(1, c.inputIds);
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
      case T(1, LEN):
        spec.taskId = r.string();
        continue;
      case T(2, LEN):
        spec.workflow = r.string();
        continue;
      case T(3, VARINT):
        kind = r.int32();
        continue;
      case T(4, VARINT):
        spec.turn = r.uint32();
        continue;
      case T(5, VARINT):
        spec.attempt = r.uint32();
        continue;
      case T(6, VARINT):
        entryMode = r.int32();
        continue;
      case T(7, VARINT):
        spec.steered = r.bool();
        continue;
      case T(8, LEN):
        spec.inputId = r.string();
        continue;
      case T(9, LEN):
        spec.input = r.nested(readPayload);
        continue;
      case T(10, LEN):
        state = r.nested(readPayload);
        continue;
      case T(11, LEN):
        spec.calls.push(r.nested(readCall));
        continue;
      case T(12, LEN):
        spec.taken.push(r.nested(readTaken));
        continue;
      case T(13, LEN):
        checkpoint = r.nested(readPayload);
        continue;
      case T(14, FIXED64):
        spec.turnStartedAt = r.double();
        continue;
      case T(15, FIXED64):
        spec.deadline = r.double();
        continue;
      case T(16, VARINT):
        spec.recoveryCount = r.uint32();
        continue;
      case T(17, LEN):
        stepRetry = { maxAttempts: 0, initialIntervalMs: 0, backoffCoefficient: 0, maxIntervalMs: 0, nonRetryableTypes: [] };
        r.nested((r) => {
          while (r.more()) {
            const u = r.uint32();
            if (u === T(1, VARINT)) stepRetry.maxAttempts = r.uint32();
            else if (u === T(2, FIXED64)) stepRetry.initialIntervalMs = r.double();
            else if (u === T(3, FIXED64)) stepRetry.backoffCoefficient = r.double();
            else if (u === T(4, FIXED64)) stepRetry.maxIntervalMs = r.double();
            else if (u === T(5, LEN)) stepRetry.nonRetryableTypes.push(r.string());
            else r.skip(u & 7);
          }
        });
        spec.stepRetry = stepRetry;
        continue;
      case T(18, VARINT):
        spec.timeoutExceeded = r.bool();
        continue;
      case T(19, VARINT):
        spec.cancelRequested = r.bool();
        continue;
      case T(20, VARINT):
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
      case T(1, VARINT):
        seq = r.uint32();
        continue;
      case T(2, VARINT):
        eventId = r.uint32();
        continue;
      case T(3, LEN): {
        const c: Extract<RecordedCall, { kind: 'step' }> = { kind: 'step', seq: 0, eventId: 0, name: '', attempt: 0, durationMs: 0 };
        r.nested((r) => {
          while (r.more()) {
            const u = r.uint32();
            if (u === T(1, LEN)) c.name = r.string();
            else if (u === T(2, VARINT)) c.attempt = r.uint32();
            else if (u === T(3, LEN)) c.result = r.nested(readPayload);
            else if (u === T(4, LEN)) c.failure = r.nested(readFailure);
            else if (u === T(5, FIXED64)) c.durationMs = r.double();
            else r.skip(u & 7);
          }
        });
        call = c;
        continue;
      }
      case T(4, LEN): {
        let data: Payload = { metadata: {}, data: EMPTY };
        r.nested((r) => {
          while (r.more()) {
            const u = r.uint32();
            if (u === T(1, LEN)) data = r.nested(readPayload);
            else r.skip(u & 7);
          }
        });
        call = { kind: 'checkpoint', seq: 0, eventId: 0, data };
        continue;
      }
      case T(5, LEN): {
        const inputIds: string[] = [];
        r.nested((r) => {
          while (r.more()) {
            const u = r.uint32();
            if (u === T(1, LEN)) inputIds.push(r.string());
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
    case 'ready':
      w.tag(1, LEN);
      at = w.fork();
      w.uint32Field(1, m.protocolVersion);
      w.uint32Field(2, m.pid);
      w.stringsField(3, m.workflows);
      if (m.error) writeFailure(w, 4, m.error);
      w.ldelim(at);
      break;
    case 'step-record': {
      const r = m.record;
      w.tag(2, LEN);
      at = w.fork();
      w.uint32Field(1, r.seq);
      w.stringField(2, r.name);
      if (r.result) writePayload(w, 3, r.result);
      if (r.failure) writeFailure(w, 4, r.failure);
      w.doubleField(5, r.durationMs);
      w.ldelim(at);
      break;
    }
    case 'checkpoint':
      w.tag(3, LEN);
      at = w.fork();
      w.uint32Field(1, m.seq);
      writePayload(w, 2, m.data);
      w.ldelim(at);
      break;
    case 'take-inputs':
      w.tag(4, LEN);
      at = w.fork();
      w.uint32Field(1, m.seq);
      w.ldelim(at);
      break;
    case 'heartbeat':
      w.emptyField(5);
      break;
    case 'terminal':
      writeTerminal(w, m.outcome);
      break;
  }
  return w.finishDelimited();
}

function writeTerminal(w: Writer, o: TerminalOutcome): void {
  let at: number;
  switch (o.kind) {
    case 'completed':
      w.tag(6, LEN); // result
      at = w.fork();
      writePayload(w, 1, o.output);
      if (o.state) writePayload(w, 2, o.state);
      w.ldelim(at);
      return;
    case 'suspended':
      w.tag(7, LEN); // suspend
      at = w.fork();
      w.stringField(1, o.reason);
      if (o.output) writePayload(w, 2, o.output);
      if (o.state) writePayload(w, 3, o.state);
      w.ldelim(at);
      return;
    case 'exit-for-recovery':
      w.tag(8, LEN);
      at = w.fork();
      w.stringField(1, o.reason);
      w.ldelim(at);
      return;
    case 'failed':
      w.tag(9, LEN); // error
      at = w.fork();
      writeFailure(w, 1, o.failure);
      w.ldelim(at);
      return;
    case 'cancelled':
      w.tag(10, LEN);
      at = w.fork();
      w.stringField(1, o.reason);
      w.ldelim(at);
      return;
    case 'timed-out':
      w.emptyField(11);
      return;
  }
}

/** A message's fields by number: payloads, failures, strings and numbers (the worker frames' bodies are flat). */
type Fields = Map<number, Payload | FailureInfo | string | string[] | number>;

/**
 * Reads one flat message of a worker frame. `kinds` gives each known field number its type;
 * a field of another wire type is skipped, like an unknown one.
 */
function readFlat(r: Reader, kinds: Record<number, 'payload' | 'failure' | 'string' | 'strings' | 'uint32' | 'double'>): Fields {
  const f: Fields = new Map();
  while (r.more()) {
    const t = r.uint32();
    const n = t >>> 3;
    const kind = kinds[n];
    const wt = t & 7;
    if (kind === 'payload' && wt === LEN) f.set(n, r.nested(readPayload));
    else if (kind === 'failure' && wt === LEN) f.set(n, r.nested(readFailure));
    else if (kind === 'string' && wt === LEN) f.set(n, r.string());
    else if (kind === 'strings' && wt === LEN) {
      const s = r.string();
      const list = f.get(n) as string[] | undefined;
      if (list) list.push(s);
      else f.set(n, [s]);
    } else if (kind === 'uint32' && wt === VARINT) f.set(n, r.uint32());
    else if (kind === 'double' && wt === FIXED64) f.set(n, r.double());
    else r.skip(wt);
  }
  return f;
}

const READY = { 1: 'uint32', 2: 'uint32', 3: 'strings', 4: 'failure' } as const;
const STEP_RECORD = { 1: 'uint32', 2: 'string', 3: 'payload', 4: 'failure', 5: 'double' } as const;
const CHECKPOINT = { 1: 'uint32', 2: 'payload' } as const;
const SEQ_ONLY = { 1: 'uint32' } as const;
const RESULT = { 1: 'payload', 2: 'payload' } as const;
const SUSPEND = { 1: 'string', 2: 'payload', 3: 'payload' } as const;
const REASON = { 1: 'string' } as const;
const ERROR = { 1: 'failure' } as const;
const NOTHING = {} as const;
/** WorkerFrame.body field number → its message's fields. */
const WORKER_BODIES: Record<number, Record<number, 'payload' | 'failure' | 'string' | 'strings' | 'uint32' | 'double'>> = {
  1: READY,
  2: STEP_RECORD,
  3: CHECKPOINT,
  4: SEQ_ONLY,
  5: NOTHING,
  6: RESULT,
  7: SUSPEND,
  8: REASON,
  9: ERROR,
  10: REASON,
  11: NOTHING,
};

/**
 * True when `b` can open a WorkerFrame body: the one-byte tag of one of its members (all are
 * messages). Lets the engine refuse text written to fd 3 at its first bytes, not at a timeout.
 */
export function isWorkerFrameStart(b: number): boolean {
  return (b & 7) === LEN && WORKER_BODIES[b >>> 3] !== undefined;
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
      const kinds = WORKER_BODIES[t >>> 3];
      if (kinds && (t & 7) === LEN) {
        body = t >>> 3;
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
    case 1: {
      const m: WorkerMessage = { type: 'ready', protocolVersion: num(1), pid: num(2), workflows: (f.get(3) as string[] | undefined) ?? [] };
      const error = failure(4);
      if (error) m.error = error;
      return m;
    }
    case 2: {
      const seq = positiveSeq(num(1), 'step record');
      const name = str(2);
      const result = payload(3);
      const fail = failure(4);
      if (!name) throw new WorkerProtocolError(`step record ${seq} has no name`);
      if (!result === !fail) throw new WorkerProtocolError(`step record ${seq} ("${name}") must carry exactly one of result and failure`);
      const d = num(5);
      if (!Number.isFinite(d) || d < 0) throw new WorkerProtocolError(`step record ${seq} has duration ${d}`);
      const record: StepRecord = { seq, name, durationMs: d };
      if (result) record.result = result;
      else record.failure = fail!;
      return { type: 'step-record', record };
    }
    case 3: {
      const seq = positiveSeq(num(1), 'checkpoint');
      const data = payload(2);
      if (!data) throw new WorkerProtocolError(`checkpoint ${seq} has no data`);
      return { type: 'checkpoint', seq, data };
    }
    case 4:
      return { type: 'take-inputs', seq: positiveSeq(num(1), 'take-inputs') };
    case 5:
      return { type: 'heartbeat' };
    case 6: {
      const output = payload(1);
      if (!output) throw new WorkerProtocolError('result without output');
      const o: TerminalOutcome = { kind: 'completed', output };
      const state = payload(2);
      if (state) o.state = state;
      return { type: 'terminal', outcome: o };
    }
    case 7: {
      const o: TerminalOutcome = { kind: 'suspended', reason: str(1) };
      const output = payload(2);
      if (output) o.output = output;
      const state = payload(3);
      if (state) o.state = state;
      return { type: 'terminal', outcome: o };
    }
    case 8:
      return { type: 'terminal', outcome: { kind: 'exit-for-recovery', reason: str(1) } };
    case 9: {
      const fail = failure(1);
      if (!fail) throw new WorkerProtocolError('error terminal without a failure');
      return { type: 'terminal', outcome: { kind: 'failed', failure: fail } };
    }
    case 10:
      return { type: 'terminal', outcome: { kind: 'cancelled', reason: str(1) } };
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
