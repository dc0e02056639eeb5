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
import { wellFormedEvent, wellFormedFailure, wellFormedPayload, wellFormedPolicy } from './well-formed.js';

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
  // protobufjs 8 decodes an absent bytes field to its prototype default, a shared JS Array
  // `[]`, and an absent map to a shared frozen object: normalize both (test: review2).
  const metadata: Record<string, Uint8Array> = {};
  if (m.metadata) for (const k of Object.keys(m.metadata)) setOwn(metadata, k, asBytes(m.metadata[k]));
  return { metadata, data: asBytes(m.data) };
}

const EMPTY = new Uint8Array(0);

function asBytes(v: unknown): Uint8Array {
  return v instanceof Uint8Array && v.length > 0 ? v : EMPTY;
}

/** `o[k] = v`, except that a `__proto__` key becomes an own property, as protobufjs decodes it. */
export function setOwn<T>(o: Record<string, T>, k: string, v: T): void {
  if (k === '__proto__') Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
  else o[k] = v;
}

interface FailureMsg {
  message?: string;
  source?: string;
  stackTrace?: string;
  encodedAttributes?: PayloadMsg | null;
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
  if (f.encodedAttributes) msg.encodedAttributes = payloadToProto(f.encodedAttributes);
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
  const encoded = payloadFromProto(m.encodedAttributes);
  if (encoded) f.encodedAttributes = encoded;
  if (m.cause) f.cause = failureFromProto(m.cause);
  return f;
}

/** Encodes a Failure alone (worker protocol, exports). */
export function encodeFailure(f: FailureInfo): Uint8Array {
  return FailureType.encode(failureToProto(wellFormedFailure(f)) as never).finish();
}
export function decodeFailure(bytes: Uint8Array): FailureInfo {
  return failureFromProto(FailureType.decode(bytes) as unknown as FailureMsg);
}
export function encodePayload(p: Payload): Uint8Array {
  return PayloadType.encode(payloadToProto(wellFormedPayload(p)) as never).finish();
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
  return TurnPolicyType.encode(policyToProto(wellFormedPolicy(p)) as never).finish();
}
export function decodePolicy(bytes: Uint8Array): TurnPolicy {
  return policyFromProto(TurnPolicyType.decode(bytes) as unknown as PolicyMsg, { taskId: '?', eventId: 0 });
}

// ---------------------------------------------------------------------------------------------
// Events

/**
 * Maps a TS event to the plain object protobufjs encodes. Each case builds one object literal:
 * an object made by spreading a shared base (`{ ...base, x }`) made the generated encoder about
 * 10x slower (≈ 6 µs for a TaskCompleted against ≈ 0.7 µs), as V8 no longer saw a stable shape.
 */
function eventToProto(e: HistoryEvent): Record<string, unknown> {
  const eventId = e.eventId;
  const timeMs = e.time;
  const generation = e.generation;
  switch (e.type) {
    case 'TaskCreated':
      return {
        eventId, timeMs, generation,
        taskCreated: {
          workflow: e.workflow,
          kind: toNum(KINDS, e.kind),
          policy: policyToProto(e.policy),
          formatVersion: e.formatVersion,
        },
      };
    case 'InputQueued':
      return { eventId, timeMs, generation, inputQueued: { inputId: e.inputId, input: payloadToProto(e.input), steering: e.steering } };
    case 'InputWithdrawn':
      return { eventId, timeMs, generation, inputWithdrawn: { inputId: e.inputId, reason: e.reason } };
    case 'TurnStarted':
      return {
        eventId, timeMs, generation,
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
      return { eventId, timeMs, generation, stepCompleted: step };
    }
    case 'InputsTaken':
      return { eventId, timeMs, generation, inputsTaken: { turn: e.turn, seq: e.seq, inputIds: e.inputIds } };
    case 'Checkpointed':
      return { eventId, timeMs, generation, checkpointed: { turn: e.turn, seq: e.seq, data: payloadToProto(e.data) } };
    case 'TimeoutCancelRequested':
      return { eventId, timeMs, generation, timeoutCancelRequested: { turn: e.turn, atMs: e.at, graceUntilMs: e.graceUntil } };
    case 'CancelRequested':
      return { eventId, timeMs, generation, cancelRequested: { scope: toNum(SCOPES, e.scope), turn: e.turn, reason: e.reason } };
    case 'WorkerKilled':
      return { eventId, timeMs, generation, workerKilled: { turn: e.turn, pid: e.pid, signal: e.signal, reason: e.reason } };
    case 'WorkerCrashed':
      return {
        eventId, timeMs, generation,
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
        eventId, timeMs, generation,
        turnCompleted: { turn: e.turn, output: optPayload(e.output), state: optPayload(e.state) },
      };
    case 'TurnFailed':
      return { eventId, timeMs, generation, turnFailed: { turn: e.turn, failure: failureToProto(e.failure) } };
    case 'TurnSuspended':
      return {
        eventId, timeMs, generation,
        turnSuspended: { turn: e.turn, reason: e.reason, output: optPayload(e.output), state: optPayload(e.state) },
      };
    case 'TurnCancelled':
      return { eventId, timeMs, generation, turnCancelled: { turn: e.turn, reason: e.reason } };
    case 'TurnTimedOut':
      return { eventId, timeMs, generation, turnTimedOut: { turn: e.turn, cause: toNum(CAUSES, e.cause) } };
    case 'TurnExitedForRecovery':
      return { eventId, timeMs, generation, turnExitedForRecovery: { turn: e.turn, attempt: e.attempt, reason: e.reason } };
    case 'LeaseClaimed':
      return {
        eventId, timeMs, generation,
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
      return { eventId, timeMs, generation, taskCompleted: { outcome: toNum(OUTCOMES, e.outcome) } };
  }
}

const EMPTY_PAYLOAD: Payload = { metadata: {}, data: EMPTY };
/** HistoryEvent.step_completed. */
const STEP_FIELD_NUMBER = 14;

function optPayload(p: Payload | undefined): PayloadMsg | null {
  return p ? payloadToProto(p) : null;
}

// ---------------------------------------------------------------------------------------------
// Encode fast path: the events of every turn (InputQueued, LeaseClaimed, TurnStarted, a
// StepCompleted with a result, TurnCompleted, TaskCompleted, TimeoutCancelRequested) are
// written by hand with protobufjs's Writer, field by field in field-number order, straight from
// the TS event: no intermediate object, no per-call Writer. The bytes are identical to the
// generated encoder's (test/history/codec-encode.test.ts compares both on every event type),
// which means following its proto3 rules exactly:
// - uint32/enum: written unless null/undefined or 0; string: unless "" ; bool: unless false;
// - double: unless 0 (`Object.is`, so -0 and NaN are written);
// - a message field (payload, oneof member): written whenever not null/undefined, even empty;
// - map<string, bytes>: one entry per Object.keys() key, key and value always written;
// - repeated string: every element, nothing for an empty array.
// Everything else (failures, rare events) takes the generic path.

const { Writer } = protobuf;

/**
 * One Writer reused by every encode. Encoding is synchronous, but a payload getter or Proxy
 * could call encodeEvent from inside another encode: `encoding` sends such a nested call to the
 * generated encoder, so it never resets the outer call's writer (test: review2).
 */
let shared: protobuf.Writer | null = null;
let encoding = false;
/** A Writer that grew past this is dropped after use, so one huge event is not kept alive. */
const SHARED_MAX = 64 * 1024;

function sharedWriter(): protobuf.Writer {
  const w = shared ?? (shared = Writer.create());
  // A throw in the middle of an earlier encode (a bad enum, a missing payload) left state behind.
  w.pos = 0;
  const states = w.states;
  if (states !== null && states.length !== 0) states.length = 0;
  return w;
}

/**
 * Copies the bytes out into a Buffer of their size, as `Writer.finish()` does under Node, minus
 * its `subarray` (a Buffer subarray is a costly FastBuffer construction): a loop copies small
 * events faster than `set`.
 */
function finishShared(w: protobuf.Writer): Uint8Array {
  const n = w.pos;
  const src = w.buf;
  const out = Buffer.allocUnsafe(n);
  if (n <= 256) for (let i = 0; i < n; i++) out[i] = src[i]!;
  else out.set(src.subarray(0, n));
  if (src.length > SHARED_MAX) shared = null;
  return out;
}

function writePayload(w: protobuf.Writer, tag: number, p: Payload): void {
  w.uint32(tag).fork();
  const md = p.metadata;
  if (md != null) {
    const keys = Object.keys(md);
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i]!;
      w.uint32(10).fork().uint32(10).string(k).uint32(18).bytes(md[k]!).ldelim();
    }
  }
  const data = p.data;
  if (data != null && data.length) w.uint32(18).bytes(data);
  w.ldelim();
}

function writeU32(w: protobuf.Writer, tag: number, v: number): void {
  if (v != null && v !== 0) w.uint32(tag).uint32(v);
}
function writeDouble(w: protobuf.Writer, tag: number, v: number): void {
  if (v != null && !Object.is(v, 0)) w.uint32(tag).double(v);
}
function writeString(w: protobuf.Writer, tag: number, v: string): void {
  if (v != null && v !== '') w.uint32(tag).string(v);
}
function writeEnum(w: protobuf.Writer, tag: number, v: number): void {
  if (v !== 0) w.uint32(tag).int32(v);
}

/** HistoryEvent fields 1–3, then opens the oneof member `tag`. */
function openEvent(w: protobuf.Writer, e: HistoryEvent, tag: number): void {
  writeU32(w, 8, e.eventId);
  writeDouble(w, 17, e.time);
  writeU32(w, 24, e.generation);
  w.uint32(tag).fork();
}

// Field tags: (field number << 3) | wire type (0 varint, 1 fixed64, 2 length-delimited).
const TAG_INPUT_QUEUED = (11 << 3) | 2;
const TAG_TURN_STARTED = (13 << 3) | 2;
const TAG_STEP_COMPLETED = (STEP_FIELD_NUMBER << 3) | 2;
const TAG_TIMEOUT_CANCEL = (16 << 3) | 2;
const TAG_TURN_COMPLETED = (20 << 3) | 2;
const TAG_LEASE_CLAIMED = (26 << 3) | 2;
const TAG_TASK_COMPLETED = (27 << 3) | 2;

/** Writes a hot event into `w` and returns true, or returns false (nothing written) for the generic path. */
function writeEventFast(w: protobuf.Writer, e: HistoryEvent): boolean {
  switch (e.type) {
    case 'StepCompleted': {
      if (e.failure) return false;
      openEvent(w, e, TAG_STEP_COMPLETED);
      writeU32(w, 8, e.turn);
      writeU32(w, 16, e.attempt);
      writeU32(w, 24, e.seq);
      writeString(w, 34, e.name);
      writePayload(w, 42, e.result ?? EMPTY_PAYLOAD);
      writeDouble(w, 57, e.durationMs);
      break;
    }
    case 'TurnStarted': {
      const entryMode = toNum(ENTRY_MODES, e.entryMode);
      const executor = toNum(EXECUTORS, e.executor);
      openEvent(w, e, TAG_TURN_STARTED);
      writeU32(w, 8, e.turn);
      writeU32(w, 16, e.attempt);
      const ids = e.inputIds;
      if (ids != null && ids.length) for (let i = 0; i < ids.length; i++) w.uint32(26).string(ids[i]!);
      writeEnum(w, 32, entryMode);
      if (e.steered != null && e.steered !== false) w.uint32(40).bool(e.steered);
      writeString(w, 50, e.owner);
      writeString(w, 58, e.instance);
      writeEnum(w, 64, executor);
      writeU32(w, 72, e.pid);
      writeDouble(w, 81, e.turnStartedAt);
      writeDouble(w, 89, e.deadline);
      break;
    }
    case 'InputQueued': {
      const input = e.input;
      if (input == null) return false;
      openEvent(w, e, TAG_INPUT_QUEUED);
      writeString(w, 10, e.inputId);
      writePayload(w, 18, input);
      if (e.steering != null && e.steering !== false) w.uint32(24).bool(e.steering);
      break;
    }
    case 'TurnCompleted':
      openEvent(w, e, TAG_TURN_COMPLETED);
      writeU32(w, 8, e.turn);
      if (e.output) writePayload(w, 18, e.output);
      if (e.state) writePayload(w, 26, e.state);
      break;
    case 'LeaseClaimed':
      openEvent(w, e, TAG_LEASE_CLAIMED);
      writeString(w, 10, e.owner);
      writeString(w, 18, e.instance);
      writeU32(w, 24, e.generation);
      writeU32(w, 32, e.previousGeneration);
      writeString(w, 42, e.reason);
      writeDouble(w, 49, e.expiresAt);
      break;
    case 'TaskCompleted': {
      const outcome = toNum(OUTCOMES, e.outcome);
      openEvent(w, e, TAG_TASK_COMPLETED);
      writeEnum(w, 8, outcome);
      break;
    }
    case 'TimeoutCancelRequested':
      openEvent(w, e, TAG_TIMEOUT_CANCEL);
      writeU32(w, 8, e.turn);
      writeDouble(w, 17, e.at);
      writeDouble(w, 25, e.graceUntil);
      break;
    default:
      return false;
  }
  w.ldelim();
  return true;
}

/**
 * Encodes one event to protobuf bytes. Free text is made well-formed first and an ill-formed id
 * is refused (TURNLOG_INVALID_ARGUMENT): nothing is ever encoded that cannot be decoded.
 */
export function encodeEvent(event: HistoryEvent): Uint8Array {
  if (encoding) return encodeEventGeneric(event);
  const e = wellFormedEvent(event);
  encoding = true;
  try {
    const w = sharedWriter();
    if (writeEventFast(w, e)) return finishShared(w);
  } finally {
    encoding = false;
  }
  return HistoryEventType.encode(eventToProto(e) as never).finish();
}

/**
 * The generated protobufjs encoder alone, without the fast path: the reference the fast path
 * must match byte for byte (tests, benchmarks). Not exported from the package.
 */
export function encodeEventGeneric(e: HistoryEvent): Uint8Array {
  return HistoryEventType.encode(eventToProto(wellFormedEvent(e)) as never).finish();
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
const STEP_FIELD = STEP_FIELD_NUMBER;

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
      setOwn(metadata, k, v);
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
export function encodeEventDelimited(event: HistoryEvent): Uint8Array {
  if (encoding) return encodeEventDelimitedGeneric(event);
  const e = wellFormedEvent(event);
  encoding = true;
  try {
    const w = sharedWriter();
    if (writeEventFast(w, e)) {
      // Not forked: ldelim() prefixes everything written with its length, as encodeDelimited does.
      w.ldelim();
      return finishShared(w);
    }
  } finally {
    encoding = false;
  }
  return HistoryEventType.encodeDelimited(eventToProto(e) as never).finish();
}

/** {@link encodeEventDelimited} through the generated encoder alone (tests). */
export function encodeEventDelimitedGeneric(e: HistoryEvent): Uint8Array {
  return HistoryEventType.encodeDelimited(eventToProto(wellFormedEvent(e)) as never).finish();
}

/** The proto3 JSON mapping of an event (history files in JSON, `turnlog events --json`). */
export function eventToJSON(e: HistoryEvent): Record<string, unknown> {
  const msg = HistoryEventType.fromObject(eventToProto(wellFormedEvent(e)));
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
