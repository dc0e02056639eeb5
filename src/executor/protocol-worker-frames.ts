/**
 * Worker → engine frames of the worker protocol: {@link encodeWorkerMessage} (worker side) and
 * {@link decodeWorkerMessage} (engine side), which validates every frame a worker sends: anything
 * malformed is a WorkerProtocolError. Its bodies are flat messages read by {@link WORKER_BODIES}.
 */
import type { FailureInfo, Payload } from '../history/events.js';
import type { EmitItem } from '../attempt/host.js';
import { CALLS, RECORD_BY_TAG, type CallRecord, type MemberCodec } from '../attempt/calls.js';
import * as pb from '../internal/wire/fields.js';
import { LEN, Reader, Writer, readFailure, readPayload, writeFailure, writePayload } from '../internal/wire/wire.js';
import { WorkerProtocolError, protocolError, writeMember, type TerminalOutcome, type WorkerMessage } from './protocol-messages.js';

const REC = pb.WorkerFrame_Record;
const WF = pb.WorkerFrame;

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
