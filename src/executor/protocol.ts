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
import type { RecordedCall, WaitOutcome } from '../history/state.js';
import type { AttemptOutcome, CancelKind, EmitItem, TurnSpec } from '../attempt/host.js';
import { CALLS, RECORDED_BY_TAG, RECORD_BY_TAG, REPLY_BY_TAG, readTaken, writeTaken, type CallRecord, type CallReply, type MemberCodec } from '../attempt/calls.js';
import * as pb from '../internal/wire/fields.js';
import { EMPTY_BYTES as EMPTY, LEN, Reader, Writer, readFailure, readPayload, writeFailure, writePayload } from '../internal/wire/wire.js';

/** Bumped for any change a peer of the other version would misread. */
export const PROTOCOL_VERSION = 3;
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
  /** The answer to a worker's record with this seq: durable (with its reply, for kinds that have one) or refused. */
  | { type: 'ack'; seq: number; error?: FailureInfo; reply?: CallReply; grant?: { waitedMs: number } }
  | { type: 'pending-inputs'; count: number }
  /** Waits of the running turn that ended (WaitEnded durable), by seq: ctx.waitFor returns them. */
  | { type: 'signals'; ended: { seq: number; outcome: WaitOutcome }[] }
  | { type: 'shutdown' };

/** The terminal outcomes a worker can report (crashed and killed are the engine's to observe). */
export type TerminalOutcome = Exclude<AttemptOutcome, { kind: 'crashed' } | { kind: 'killed' }>;

export type WorkerMessage =
  | { type: 'ready'; protocolVersion: number; pid: number; workflows: string[]; error?: FailureInfo }
  /** A call the handler records (attempt/calls.ts); the worker waits for its ack. */
  | { type: 'record'; call: CallRecord }
  /** Step `seq` asks for a slot and token of flow limit `limit`; answered by an ack with `grant`. */
  | { type: 'acquire'; seq: number; limit: string }
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
const ACK = pb.EngineFrame_Ack;
const REC = pb.WorkerFrame_Record;
const WF = pb.WorkerFrame;
const RETRY = pb.RetryPolicy;

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
    case 'ack':
      w.uint32(EF.ack);
      at = w.fork();
      w.uint32Field(ACK.seq, m.seq);
      if (m.error) writeFailure(w, ACK.error, m.error);
      if (m.reply) writeMember(w, CALLS[m.reply.kind].reply as MemberCodec<unknown>, m.reply.value);
      if (m.grant) {
        w.uint32(ACK.limitGrant);
        const g = w.fork();
        w.doubleField(pb.EngineFrame_LimitGrant.waitedMs, m.grant.waitedMs);
        w.ldelim(g);
      }
      w.ldelim(at);
      break;
    case 'pending-inputs':
      w.uint32(EF.pendingInputs);
      at = w.fork();
      w.uint32Field(pb.EngineFrame_PendingInputs.count, m.count);
      w.ldelim(at);
      break;
    case 'signals': {
      const O = pb.EngineFrame_WaitOutcome;
      w.uint32(EF.signals);
      at = w.fork();
      for (const { seq, outcome } of m.ended) {
        w.uint32(pb.EngineFrame_Signals.ended);
        const o = w.fork();
        w.uint32Field(O.seq, seq);
        w.stringField(O.signalId, outcome.signalId);
        if (outcome.value) writePayload(w, O.value, outcome.value);
        w.boolField(O.timedOut, outcome.timedOut);
        w.ldelim(o);
      }
      w.ldelim(at);
      break;
    }
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
        case EF.ack: {
          const ack: Extract<EngineMessage, { type: 'ack' }> = { type: 'ack', seq: 0 };
          r.nested((r) => {
            while (r.more()) {
              const u = r.uint32();
              const row = REPLY_BY_TAG.get(u);
              if (u === ACK.seq) ack.seq = r.uint32();
              else if (u === ACK.error) ack.error = r.nested(readFailure);
              else if (u === ACK.limitGrant) ack.grant = r.nested(readGrant);
              else if (row) ack.reply = { kind: row.kind, value: r.nested((r) => (row.reply as MemberCodec<unknown>).read(r, undefined, protocolError)) } as CallReply;
              else r.skip(u & 7);
            }
          });
          m = ack;
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
        case EF.signals: {
          const O = pb.EngineFrame_WaitOutcome;
          const ended: Extract<EngineMessage, { type: 'signals' }>['ended'] = [];
          r.nested((r) => {
            while (r.more()) {
              const u = r.uint32();
              if (u !== pb.EngineFrame_Signals.ended) {
                r.skip(u & 7);
                continue;
              }
              const e = { seq: 0, outcome: { signalId: '', timedOut: false, eventId: 0 } as WaitOutcome };
              r.nested((r) => {
                while (r.more()) {
                  const v = r.uint32();
                  if (v === O.seq) e.seq = r.uint32();
                  else if (v === O.signalId) e.outcome.signalId = r.string();
                  else if (v === O.value) e.outcome.value = r.nested(readPayload);
                  else if (v === O.timedOut) e.outcome.timedOut = r.bool();
                  else r.skip(v & 7);
                }
              });
              ended.push(e);
            }
          });
          m = { type: 'signals', ended };
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
    if (p.jitter !== undefined) {
      w.uint32(RETRY.jitter);
      w.double(p.jitter);
    }
    w.ldelim(at);
  }
  w.boolField(RUN.timeoutExceeded, s.timeoutExceeded);
  w.boolField(RUN.cancelRequested, s.cancelRequested);
  w.uint32Field(RUN.pendingInputs, pendingInputs);
}

/** One member of a oneof: its tag, then its message. */
function writeMember<T>(w: Writer, codec: MemberCodec<T, never>, v: T): void {
  w.uint32(codec.tag);
  const at = w.fork();
  codec.write(w, v);
  w.ldelim(at);
}

function protocolError(detail: string): never {
  throw new WorkerProtocolError(detail);
}

function writeCall(w: Writer, tag: number, c: RecordedCall): void {
  w.uint32(tag);
  const at = w.fork();
  w.uint32Field(CALL.seq, c.seq);
  w.uint32Field(CALL.eventId, c.eventId);
  writeMember(w, CALLS[c.kind].recorded as MemberCodec<RecordedCall, never>, c);
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
            else if (u === RETRY.jitter) stepRetry.jitter = r.double();
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
  const at = { seq: 0, eventId: 0 };
  let call: RecordedCall | undefined;
  while (r.more()) {
    const t = r.uint32();
    const row = RECORDED_BY_TAG.get(t);
    if (t === CALL.seq) at.seq = r.uint32();
    else if (t === CALL.eventId) at.eventId = r.uint32();
    else if (row) call = r.nested((r) => row.recorded.read(r, at, protocolError));
    else r.skip(t & 7);
  }
  if (!call) throw new WorkerProtocolError(`recorded call ${at.seq} has no kind`);
  call.seq = at.seq;
  call.eventId = at.eventId;
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
    case 'record':
      w.uint32(WF.record);
      at = w.fork();
      w.uint32Field(REC.seq, m.call.seq);
      writeMember(w, CALLS[m.call.kind].record as MemberCodec<CallRecord, never>, m.call);
      w.ldelim(at);
      break;
    case 'acquire':
      w.uint32(WF.record);
      at = w.fork();
      w.uint32Field(REC.seq, m.seq);
      w.uint32(REC.acquire);
      {
        const a = w.fork();
        w.stringField(pb.WorkerFrame_Record_Acquire.limit, m.limit);
        w.ldelim(a);
      }
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

export type Kind = 'payload' | 'failure' | 'string' | 'strings' | 'uint32' | 'double' | 'member';
/** Under this key: the tag of the last `member` field read (a oneof's member; its bytes under its tag). */
const MEMBER = -1;
/** A message's fields by tag: payloads, failures, strings and numbers (the worker frames' bodies are flat). */
type Fields = Map<number, Payload | FailureInfo | string | string[] | number | Uint8Array>;

function readGrant(r: Reader): { waitedMs: number } {
  const g = { waitedMs: 0 };
  while (r.more()) {
    const u = r.uint32();
    if (u === pb.EngineFrame_LimitGrant.waitedMs) g.waitedMs = r.double();
    else r.skip(u & 7);
  }
  return g;
}

function readAcquire(r: Reader): string {
  let limit = '';
  while (r.more()) {
    const u = r.uint32();
    if (u === pb.WorkerFrame_Record_Acquire.limit) limit = r.string();
    else r.skip(u & 7);
  }
  return limit;
}

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
    else if (kind === 'member') {
      f.set(t, r.bytes());
      f.set(MEMBER, t);
    } else r.skip(t & 7);
  }
  return f;
}

const READY = pb.WorkerFrame_Ready;
const RESULT = pb.WorkerFrame_Result;
const SUSPEND = pb.WorkerFrame_Suspend;
const EMIT = pb.WorkerFrame_Emit;
const REASON = pb.WorkerFrame_Cancelled; // ExitForRecovery and Cancelled: { reason = 1 }
/**
 * WorkerFrame.body tag → its message's field kinds by tag. The one fact here the generated tags
 * do not carry: test/executor/protocol-fields.test.ts checks it against worker.proto's descriptor.
 * @internal exported for that test
 */
export const WORKER_BODIES: Readonly<Record<number, Readonly<Record<number, Kind>>>> = {
  [WF.ready]: { [READY.protocolVersion]: 'uint32', [READY.pid]: 'uint32', [READY.workflows]: 'strings', [READY.error]: 'failure' },
  // Record is not flat (its call is a oneof): its seq here, its call read by the kind's row.
  [WF.record]: Object.fromEntries([[REC.seq, 'uint32'], [REC.acquire, 'member'], ...[...RECORD_BY_TAG.keys()].map((tag) => [tag, 'member'])]) as Record<number, Kind>,
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
    case WF.record: {
      const seq = num(REC.seq);
      const tag = f.get(MEMBER) as number | undefined;
      if (tag === REC.acquire) {
        positiveSeq(seq, 'acquire');
        const limit = readMember(f.get(tag) as Uint8Array, readAcquire);
        if (!limit) throw new WorkerProtocolError(`acquire ${seq} names no limit`);
        return { type: 'acquire', seq, limit };
      }
      const row = tag === undefined ? undefined : RECORD_BY_TAG.get(tag);
      if (!row) throw new WorkerProtocolError(`record ${seq} carries no call`);
      positiveSeq(seq, row.record.noun);
      return { type: 'record', call: readMember(f.get(tag!) as Uint8Array, (r) => row.record.read(r, seq, protocolError)) };
    }
    case WF.ready: {
      const m: WorkerMessage = { type: 'ready', protocolVersion: num(READY.protocolVersion), pid: num(READY.pid), workflows: (f.get(READY.workflows) as string[] | undefined) ?? [] };
      const error = failure(READY.error);
      if (error) m.error = error;
      return m;
    }
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

/** A member's message read from its bytes; malformed bytes are a protocol violation. */
function readMember<T>(bytes: Uint8Array, read: (r: Reader) => T): T {
  try {
    return read(new Reader(bytes));
  } catch (err) {
    if (err instanceof WorkerProtocolError) throw err;
    throw new WorkerProtocolError(`undecodable record of ${bytes.length} bytes (${(err as Error).message})`);
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
    { type: 'ack', seq: 1, error: failure },
    { type: 'ack', seq: 1, reply: { kind: 'take-inputs', value: [{ inputId: 'i', input: payload }] } },
    { type: 'ack', seq: 1, grant: { waitedMs: 1 } },
    { type: 'pending-inputs', count: 1 },
    { type: 'shutdown' },
  ];
  const worker: WorkerMessage[] = [
    { type: 'ready', protocolVersion: PROTOCOL_VERSION, pid: 1, workflows: ['w'], error: failure },
    { type: 'record', call: { kind: 'step', seq: 1, name: 's', result: payload, durationMs: 1 } },
    { type: 'record', call: { kind: 'checkpoint', seq: 1, data: payload } },
    { type: 'record', call: { kind: 'take-inputs', seq: 1 } },
    { type: 'acquire', seq: 1, limit: 'l' },
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
