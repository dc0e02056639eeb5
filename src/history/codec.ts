/**
 * The one place that maps history events between the public TypeScript types and protobuf.
 * Encoding builds plain objects that protobufjs encodes directly (no `fromObject` pass);
 * decoding reads the generated message and builds the TS event by hand, which keeps
 * decode + fold above 500,000 events/s (bench/replay).
 */
import { HistoryCorruptError, HistoryFormatError, TurnlogError } from '../errors.js';
import { lookupType, protobuf } from '../internal/proto/root.js';
import {
  HISTORY_FORMAT_VERSION,
  type CancelScope,
  type EntryMode,
  type ExecutorKind,
  type FailureInfo,
  type HistoryEvent,
  type Payload,
  type RetryPolicy,
  type TaskOutcome,
  type TimeoutCause,
  type TurnPolicy,
  type WorkflowKind,
} from './events.js';

const HistoryEventType = lookupType('turnlog.v1.HistoryEvent');
const TurnPolicyType = lookupType('turnlog.v1.TurnPolicy');
const PayloadType = lookupType('temporal.api.common.v1.Payload');
const FailureType = lookupType('temporal.api.failure.v1.Failure');

// Enum maps. Index = proto enum number; 0 is UNSPECIFIED everywhere.
const KINDS: readonly (WorkflowKind | undefined)[] = [undefined, 'one-shot', 'multi-turn'];
const ENTRY_MODES: readonly (EntryMode | undefined)[] = [undefined, 'fresh', 'resumed', 'recovered'];
const EXECUTORS: readonly (ExecutorKind | undefined)[] = [undefined, 'inline', 'process'];
const OUTCOMES: readonly (TaskOutcome | undefined)[] = [undefined, 'succeeded', 'failed', 'cancelled', 'timed_out'];
const CAUSES: readonly (TimeoutCause | undefined)[] = [
  undefined,
  'cooperative',
  'hard_cap',
  'recovery_marker',
  'recovery_backstop',
];
const SCOPES: readonly (CancelScope | undefined)[] = [undefined, 'task', 'turn'];

function toNum<T>(table: readonly (T | undefined)[], v: T): number {
  const i = table.indexOf(v);
  if (i <= 0) throw new TurnlogError('TURNLOG_INVALID_ARGUMENT', `Cannot encode enum value ${String(v)}.`);
  return i;
}

/** Where an event came from, for error messages. */
interface Origin {
  taskId: string;
  eventId: number;
}

function fromNum<T>(table: readonly (T | undefined)[], n: number, what: string, at: Origin): T {
  const v = table[n];
  if (v === undefined) {
    throw new HistoryFormatError(at.taskId, at.eventId, HISTORY_FORMAT_VERSION, `unknown ${what} value ${n}`);
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// Payload and Failure

interface PayloadMsg {
  metadata?: Record<string, Uint8Array>;
  data?: Uint8Array;
}

function payloadToProto(p: Payload): PayloadMsg {
  return { metadata: p.metadata, data: p.data };
}

function payloadFromProto(m: PayloadMsg | null | undefined): Payload | undefined {
  if (!m) return undefined;
  return { metadata: m.metadata ?? {}, data: m.data ?? EMPTY };
}

const EMPTY = new Uint8Array(0);

interface FailureMsg {
  message?: string;
  source?: string;
  stackTrace?: string;
  cause?: FailureMsg | null;
  applicationFailureInfo?: {
    type?: string;
    nonRetryable?: boolean;
    details?: { payloads?: PayloadMsg[] } | null;
  } | null;
}

// Failure.source carries the error code: Temporal uses it for the producing SDK, which we are.
const CODE_PREFIX = 'turnlog:';

export function failureToProto(f: FailureInfo): FailureMsg {
  const msg: FailureMsg = {
    message: f.message,
    source: f.code === undefined ? 'turnlog' : CODE_PREFIX + f.code,
    stackTrace: f.stack ?? '',
    applicationFailureInfo: {
      type: f.type,
      nonRetryable: f.nonRetryable ?? false,
      details: f.details ? { payloads: [payloadToProto(f.details)] } : null,
    },
  };
  if (f.cause) msg.cause = failureToProto(f.cause);
  return msg;
}

export function failureFromProto(m: FailureMsg): FailureInfo {
  const info = m.applicationFailureInfo;
  const f: FailureInfo = { message: m.message ?? '', type: info?.type || 'Error' };
  if (m.stackTrace) f.stack = m.stackTrace;
  if (info?.nonRetryable) f.nonRetryable = true;
  if (m.source?.startsWith(CODE_PREFIX)) f.code = m.source.slice(CODE_PREFIX.length);
  const details = payloadFromProto(info?.details?.payloads?.[0]);
  if (details) f.details = details;
  if (m.cause) f.cause = failureFromProto(m.cause);
  return f;
}

/** Encodes a Failure alone (worker protocol, exports). */
export function encodeFailure(f: FailureInfo): Uint8Array {
  return FailureType.encode(failureToProto(f) as never).finish();
}
export function decodeFailure(bytes: Uint8Array): FailureInfo {
  return failureFromProto(FailureType.decode(bytes) as unknown as FailureMsg);
}
export function encodePayload(p: Payload): Uint8Array {
  return PayloadType.encode(payloadToProto(p) as never).finish();
}
export function decodePayload(bytes: Uint8Array): Payload {
  return payloadFromProto(PayloadType.decode(bytes) as unknown as PayloadMsg)!;
}

// ---------------------------------------------------------------------------------------------
// Policy

interface RetryMsg {
  maxAttempts?: number;
  initialIntervalMs?: number;
  backoffCoefficient?: number;
  maxIntervalMs?: number;
  nonRetryableTypes?: string[];
}
interface PolicyMsg {
  turnTimeoutMs?: number;
  graceMs?: number;
  maxRecoveries?: number;
  maxWorkerCrashes?: number;
  steeringMaxQueued?: number;
  executor?: number;
  stepRetry?: RetryMsg | null;
}

function policyToProto(p: TurnPolicy): PolicyMsg {
  return {
    turnTimeoutMs: p.turnTimeoutMs,
    graceMs: p.graceMs,
    maxRecoveries: p.maxRecoveries,
    maxWorkerCrashes: p.maxWorkerCrashes,
    steeringMaxQueued: p.steeringMaxQueued,
    executor: toNum(EXECUTORS, p.executor),
    stepRetry: { ...p.stepRetry },
  };
}

function retryFromProto(m: RetryMsg | null | undefined): RetryPolicy {
  return {
    maxAttempts: m?.maxAttempts ?? 1,
    initialIntervalMs: m?.initialIntervalMs ?? 0,
    backoffCoefficient: m?.backoffCoefficient ?? 0,
    maxIntervalMs: m?.maxIntervalMs ?? 0,
    nonRetryableTypes: m?.nonRetryableTypes ? [...m.nonRetryableTypes] : [],
  };
}

function policyFromProto(m: PolicyMsg | null | undefined, at: Origin): TurnPolicy {
  return {
    turnTimeoutMs: m?.turnTimeoutMs ?? 0,
    graceMs: m?.graceMs ?? 0,
    maxRecoveries: m?.maxRecoveries ?? 0,
    maxWorkerCrashes: m?.maxWorkerCrashes ?? 0,
    steeringMaxQueued: m?.steeringMaxQueued ?? 0,
    executor: fromNum(EXECUTORS, m?.executor ?? 0, 'executor', at),
    stepRetry: retryFromProto(m?.stepRetry),
  };
}

/** Encodes a policy alone (snapshots, worker protocol). */
export function encodePolicy(p: TurnPolicy): Uint8Array {
  return TurnPolicyType.encode(policyToProto(p) as never).finish();
}
export function decodePolicy(bytes: Uint8Array): TurnPolicy {
  return policyFromProto(TurnPolicyType.decode(bytes) as unknown as PolicyMsg, { taskId: '?', eventId: 0 });
}

// ---------------------------------------------------------------------------------------------
// Events

/** Maps a TS event to the plain object protobufjs encodes. */
function eventToProto(e: HistoryEvent): Record<string, unknown> {
  const base = { eventId: e.eventId, timeMs: e.time, generation: e.generation };
  switch (e.type) {
    case 'TaskCreated':
      return {
        ...base,
        taskCreated: {
          workflow: e.workflow,
          kind: toNum(KINDS, e.kind),
          policy: policyToProto(e.policy),
          formatVersion: e.formatVersion,
        },
      };
    case 'InputQueued':
      return { ...base, inputQueued: { inputId: e.inputId, input: payloadToProto(e.input), steering: e.steering } };
    case 'InputWithdrawn':
      return { ...base, inputWithdrawn: { inputId: e.inputId, reason: e.reason } };
    case 'TurnStarted':
      return {
        ...base,
        turnStarted: {
          turn: e.turn,
          attempt: e.attempt,
          inputIds: e.inputIds,
          entryMode: toNum(ENTRY_MODES, e.entryMode),
          steered: e.steered,
          owner: e.owner,
          instance: e.instance,
          executor: toNum(EXECUTORS, e.executor),
          pid: e.pid,
          turnStartedAtMs: e.turnStartedAt,
          deadlineMs: e.deadline,
        },
      };
    case 'StepCompleted': {
      const step: Record<string, unknown> = {
        turn: e.turn,
        attempt: e.attempt,
        seq: e.seq,
        name: e.name,
        durationMs: e.durationMs,
      };
      if (e.failure) step['failure'] = failureToProto(e.failure);
      else step['result'] = payloadToProto(e.result ?? EMPTY_PAYLOAD);
      return { ...base, stepCompleted: step };
    }
    case 'InputsTaken':
      return { ...base, inputsTaken: { turn: e.turn, seq: e.seq, inputIds: e.inputIds } };
    case 'Checkpointed':
      return { ...base, checkpointed: { turn: e.turn, seq: e.seq, data: payloadToProto(e.data) } };
    case 'TimeoutCancelRequested':
      return { ...base, timeoutCancelRequested: { turn: e.turn, atMs: e.at, graceUntilMs: e.graceUntil } };
    case 'CancelRequested':
      return { ...base, cancelRequested: { scope: toNum(SCOPES, e.scope), turn: e.turn, reason: e.reason } };
    case 'WorkerKilled':
      return { ...base, workerKilled: { turn: e.turn, pid: e.pid, signal: e.signal, reason: e.reason } };
    case 'WorkerCrashed':
      return {
        ...base,
        workerCrashed: {
          turn: e.turn,
          attempt: e.attempt,
          pid: e.pid,
          // -1 stands for "no exit code" (killed by a signal); real exit codes are 0..255.
          exitCode: e.exitCode ?? -1,
          signal: e.signal ?? '',
          message: e.message,
        },
      };
    case 'TurnCompleted':
      return {
        ...base,
        turnCompleted: { turn: e.turn, output: optPayload(e.output), state: optPayload(e.state) },
      };
    case 'TurnFailed':
      return { ...base, turnFailed: { turn: e.turn, failure: failureToProto(e.failure) } };
    case 'TurnSuspended':
      return {
        ...base,
        turnSuspended: { turn: e.turn, reason: e.reason, output: optPayload(e.output), state: optPayload(e.state) },
      };
    case 'TurnCancelled':
      return { ...base, turnCancelled: { turn: e.turn, reason: e.reason } };
    case 'TurnTimedOut':
      return { ...base, turnTimedOut: { turn: e.turn, cause: toNum(CAUSES, e.cause) } };
    case 'TurnExitedForRecovery':
      return { ...base, turnExitedForRecovery: { turn: e.turn, attempt: e.attempt, reason: e.reason } };
    case 'LeaseClaimed':
      return {
        ...base,
        leaseClaimed: {
          owner: e.owner,
          instance: e.instance,
          generation: e.generation,
          previousGeneration: e.previousGeneration,
          reason: e.reason,
          expiresAtMs: e.expiresAt,
        },
      };
    case 'TaskCompleted':
      return { ...base, taskCompleted: { outcome: toNum(OUTCOMES, e.outcome) } };
  }
}

const EMPTY_PAYLOAD: Payload = { metadata: {}, data: EMPTY };

function optPayload(p: Payload | undefined): PayloadMsg | null {
  return p ? payloadToProto(p) : null;
}

/** Encodes one event to protobuf bytes. */
export function encodeEvent(e: HistoryEvent): Uint8Array {
  return HistoryEventType.encode(eventToProto(e) as never).finish();
}

// The decoded message: protobufjs sets the oneof's virtual `attributes` field to the member name.
type EventMsg = Record<string, any> & { eventId: number; timeMs: number; generation: number; attributes?: string };

function failureOf(m: FailureMsg | null | undefined, at: Origin): FailureInfo {
  if (!m) throw new HistoryFormatError(at.taskId, at.eventId, HISTORY_FORMAT_VERSION, 'failure missing');
  return failureFromProto(m);
}

/** Maps a decoded protobuf message to the TS event. */
function eventFromProto(m: EventMsg, taskId: string): HistoryEvent {
  const eventId = m.eventId;
  const time = m.timeMs;
  const generation = m.generation;
  const at: Origin = { taskId, eventId };
  const kind = m.attributes;
  const a = kind === undefined ? undefined : m[kind];
  switch (kind) {
    case 'taskCreated':
      return {
        type: 'TaskCreated',
        eventId,
        time,
        generation,
        workflow: a.workflow,
        kind: fromNum(KINDS, a.kind, 'workflow kind', at),
        policy: policyFromProto(a.policy, at),
        formatVersion: a.formatVersion,
      };
    case 'inputQueued':
      return {
        type: 'InputQueued',
        eventId,
        time,
        generation,
        inputId: a.inputId,
        input: payloadFromProto(a.input) ?? EMPTY_PAYLOAD,
        steering: a.steering,
      };
    case 'inputWithdrawn':
      return { type: 'InputWithdrawn', eventId, time, generation, inputId: a.inputId, reason: a.reason };
    case 'turnStarted':
      return {
        type: 'TurnStarted',
        eventId,
        time,
        generation,
        turn: a.turn,
        attempt: a.attempt,
        inputIds: a.inputIds,
        entryMode: fromNum(ENTRY_MODES, a.entryMode, 'entry mode', at),
        steered: a.steered,
        owner: a.owner,
        instance: a.instance,
        executor: fromNum(EXECUTORS, a.executor, 'executor', at),
        pid: a.pid,
        turnStartedAt: a.turnStartedAtMs,
        deadline: a.deadlineMs,
      };
    case 'stepCompleted': {
      const e: HistoryEvent = {
        type: 'StepCompleted',
        eventId,
        time,
        generation,
        turn: a.turn,
        attempt: a.attempt,
        seq: a.seq,
        name: a.name,
        durationMs: a.durationMs,
      };
      if (a.outcome === 'failure') e.failure = failureOf(a.failure, at);
      else e.result = payloadFromProto(a.result) ?? EMPTY_PAYLOAD;
      return e;
    }
    case 'inputsTaken':
      return { type: 'InputsTaken', eventId, time, generation, turn: a.turn, seq: a.seq, inputIds: a.inputIds };
    case 'checkpointed':
      return {
        type: 'Checkpointed',
        eventId,
        time,
        generation,
        turn: a.turn,
        seq: a.seq,
        data: payloadFromProto(a.data) ?? EMPTY_PAYLOAD,
      };
    case 'timeoutCancelRequested':
      return {
        type: 'TimeoutCancelRequested',
        eventId,
        time,
        generation,
        turn: a.turn,
        at: a.atMs,
        graceUntil: a.graceUntilMs,
      };
    case 'cancelRequested':
      return {
        type: 'CancelRequested',
        eventId,
        time,
        generation,
        scope: fromNum(SCOPES, a.scope, 'cancel scope', at),
        turn: a.turn,
        reason: a.reason,
      };
    case 'workerKilled':
      return {
        type: 'WorkerKilled',
        eventId,
        time,
        generation,
        turn: a.turn,
        pid: a.pid,
        signal: a.signal,
        reason: a.reason,
      };
    case 'workerCrashed':
      return {
        type: 'WorkerCrashed',
        eventId,
        time,
        generation,
        turn: a.turn,
        attempt: a.attempt,
        pid: a.pid,
        exitCode: a.exitCode < 0 ? null : a.exitCode,
        signal: a.signal === '' ? null : a.signal,
        message: a.message,
      };
    case 'turnCompleted': {
      const e: HistoryEvent = { type: 'TurnCompleted', eventId, time, generation, turn: a.turn };
      const output = payloadFromProto(a.output);
      const state = payloadFromProto(a.state);
      if (output) e.output = output;
      if (state) e.state = state;
      return e;
    }
    case 'turnFailed':
      return { type: 'TurnFailed', eventId, time, generation, turn: a.turn, failure: failureOf(a.failure, at) };
    case 'turnSuspended': {
      const e: HistoryEvent = { type: 'TurnSuspended', eventId, time, generation, turn: a.turn, reason: a.reason };
      const output = payloadFromProto(a.output);
      const state = payloadFromProto(a.state);
      if (output) e.output = output;
      if (state) e.state = state;
      return e;
    }
    case 'turnCancelled':
      return { type: 'TurnCancelled', eventId, time, generation, turn: a.turn, reason: a.reason };
    case 'turnTimedOut':
      return {
        type: 'TurnTimedOut',
        eventId,
        time,
        generation,
        turn: a.turn,
        cause: fromNum(CAUSES, a.cause, 'timeout cause', at),
      };
    case 'turnExitedForRecovery':
      return {
        type: 'TurnExitedForRecovery',
        eventId,
        time,
        generation,
        turn: a.turn,
        attempt: a.attempt,
        reason: a.reason,
      };
    case 'leaseClaimed':
      return {
        type: 'LeaseClaimed',
        eventId,
        time,
        generation,
        owner: a.owner,
        instance: a.instance,
        previousGeneration: a.previousGeneration,
        reason: a.reason,
        expiresAt: a.expiresAtMs,
      };
    case 'taskCompleted':
      return {
        type: 'TaskCompleted',
        eventId,
        time,
        generation,
        outcome: fromNum(OUTCOMES, a.outcome, 'task outcome', at),
      };
    default:
      // An event type added by a newer turnlog: proto3 keeps it as an unknown field.
      throw new HistoryFormatError(taskId, eventId, HISTORY_FORMAT_VERSION, 'unknown event type');
  }
}

// ---------------------------------------------------------------------------------------------
// Fast path: StepCompleted with a result is most of a long history. Decoding it by hand, straight
// into the TS event, doubles decode + fold throughput (bench/replay). Anything unusual (a failure,
// an unknown field, a repeated oneof, event id 0) returns undefined and takes the generic path.

const { Reader } = protobuf;
const STEP_FIELD = 14;

function fastPayload(r: protobuf.Reader, end: number): Payload {
  const metadata: Record<string, Uint8Array> = {};
  let data: Uint8Array = EMPTY;
  while (r.pos < end) {
    const t = r.uint32();
    if (t === 10) {
      // map<string, bytes> entry: key = 1, value = 2.
      const e = r.uint32() + r.pos;
      let k = '';
      let v: Uint8Array = EMPTY;
      while (r.pos < e) {
        const t2 = r.uint32();
        if (t2 === 10) k = r.string();
        else if (t2 === 18) v = r.bytes();
        else r.skipType(t2 & 7);
      }
      metadata[k] = v;
    } else if (t === 18) data = r.bytes();
    else r.skipType(t & 7);
  }
  if (r.pos !== end) throw new RangeError('payload overruns its length');
  return { metadata, data };
}

function decodeStepFast(bytes: Uint8Array): HistoryEvent | undefined {
  const r = Reader.create(bytes);
  let eventId = 0;
  let time = 0;
  let generation = 0;
  let stepStart = -1;
  let stepEnd = -1;
  while (r.pos < r.len) {
    const t = r.uint32();
    switch (t) {
      case 8:
        eventId = r.uint32();
        break;
      case 17:
        time = r.double();
        break;
      case 24:
        generation = r.uint32();
        break;
      case (STEP_FIELD << 3) | 2: {
        if (stepStart >= 0) return undefined;
        const len = r.uint32();
        stepStart = r.pos;
        stepEnd = stepStart + len;
        if (stepEnd > r.len) throw new RangeError('index out of range');
        r.pos = stepEnd;
        break;
      }
      default:
        return undefined;
    }
  }
  if (stepStart < 0 || eventId === 0) return undefined;
  r.pos = stepStart;
  let turn = 0;
  let attempt = 0;
  let seq = 0;
  let name = '';
  let durationMs = 0;
  let result: Payload | undefined;
  while (r.pos < stepEnd) {
    const t = r.uint32();
    switch (t) {
      case 8:
        turn = r.uint32();
        break;
      case 16:
        attempt = r.uint32();
        break;
      case 24:
        seq = r.uint32();
        break;
      case 34:
        name = r.string();
        break;
      case 42: {
        if (result !== undefined) return undefined;
        const len = r.uint32();
        result = fastPayload(r, r.pos + len);
        break;
      }
      case 57:
        durationMs = r.double();
        break;
      default:
        return undefined;
    }
  }
  if (r.pos !== stepEnd) throw new RangeError('step overruns its length');
  if (result === undefined) return undefined;
  return { type: 'StepCompleted', eventId, time, generation, turn, attempt, seq, name, durationMs, result };
}

/**
 * Decodes one stored event. `key` names the record in errors; `taskId` names the task.
 * Truncated or garbled bytes give HistoryCorruptError; a well-formed event of a type
 * this build does not know gives HistoryFormatError.
 */
export function decodeEvent(bytes: Uint8Array, taskId: string, key = `${taskId}/?`): HistoryEvent {
  let m: EventMsg;
  try {
    const fast = decodeStepFast(bytes);
    if (fast !== undefined) return fast;
    m = HistoryEventType.decode(bytes) as unknown as EventMsg;
  } catch (err) {
    throw new HistoryCorruptError(key, (err as Error).message, { cause: err });
  }
  if (m.eventId === 0) throw new HistoryCorruptError(key, 'event id 0');
  return eventFromProto(m, taskId);
}

/** Length-delimited encoding (history files, the worker protocol's framing). */
export function encodeEventDelimited(e: HistoryEvent): Uint8Array {
  return HistoryEventType.encodeDelimited(eventToProto(e) as never).finish();
}

/** The proto3 JSON mapping of an event (history files in JSON, `turnlog events --json`). */
export function eventToJSON(e: HistoryEvent): Record<string, unknown> {
  const msg = HistoryEventType.fromObject(eventToProto(e));
  return HistoryEventType.toObject(msg, { enums: String, bytes: String, defaults: false, oneofs: false }) as Record<
    string,
    unknown
  >;
}

/** Inverse of {@link eventToJSON}. */
export function eventFromJSON(json: Record<string, unknown>, taskId: string): HistoryEvent {
  let msg: EventMsg;
  try {
    msg = HistoryEventType.toObject(HistoryEventType.fromObject(json), {
      enums: Number,
      defaults: true,
      oneofs: true,
      arrays: true,
    }) as EventMsg;
  } catch (err) {
    throw new HistoryCorruptError(`${taskId}/json`, (err as Error).message, { cause: err });
  }
  // toObject with defaults fills every oneof member with null defaults; keep only the set one.
  return eventFromProto(msg, taskId);
}
