/**
 * Engine → worker frames of the worker protocol: {@link encodeEngineMessage} (engine side) and
 * {@link decodeEngineMessage} (worker side), with the Run frame's TurnSpec and its recorded calls.
 * Written by hand on wire.ts, byte for byte what protobufjs' reflected encoder writes (protocol.ts).
 */
import type { EntryMode, Payload, RetryPolicy, WorkflowKind } from '../history/events.js';
import type { RecordedCall, WaitOutcome } from '../history/state.js';
import type { CancelKind, TurnSpec } from '../attempt/host.js';
import { CALLS, RECORDED_BY_TAG, REPLY_BY_TAG, readTaken, writeTaken, type CallReply, type MemberCodec } from '../attempt/calls.js';
import * as pb from '../internal/wire/fields.js';
import { EMPTY_BYTES as EMPTY, Reader, Writer, readFailure, readPayload, writeFailure, writePayload } from '../internal/wire/wire.js';
import { WorkerProtocolError, protocolError, writeMember, type EngineMessage } from './protocol-messages.js';

// Enum tables and tags are generated from worker.proto and history.proto (fields.ts).
const KINDS: readonly (WorkflowKind | undefined)[] = pb.WORKFLOW_KINDS;
const ENTRY_MODES: readonly (EntryMode | undefined)[] = pb.ENTRY_MODES;
const CANCEL_KINDS: readonly (CancelKind | undefined)[] = pb.WORKER_CANCEL_KINDS;
const EF = pb.EngineFrame;
const RUN = pb.EngineFrame_Run;
const CALL = pb.EngineFrame_Call;
const ACK = pb.EngineFrame_Ack;
const RETRY = pb.RetryPolicy;

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

function readGrant(r: Reader): { waitedMs: number } {
  const g = { waitedMs: 0 };
  while (r.more()) {
    const u = r.uint32();
    if (u === pb.EngineFrame_LimitGrant.waitedMs) g.waitedMs = r.double();
    else r.skip(u & 7);
  }
  return g;
}
