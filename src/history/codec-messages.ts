/**
 * The messages every event family shares, between their TS types and protobuf: enum tables,
 * Payload, Failure, TurnPolicy and state deltas (history/codec.ts maps the events with them).
 */
import { HistoryFormatError, TurnlogError } from '../errors.js';
import { lookupType } from '../internal/proto/root.js';
import * as pb from '../internal/wire/fields.js';
import { CODE_PREFIX, EMPTY_BYTES as EMPTY, setOwn } from '../internal/wire/wire.js';
import {
  HISTORY_FORMAT_VERSION,
  type CancelScope,
  type ChildStatus,
  type EntryMode,
  type EventType,
  type ExecutorKind,
  type FailureInfo,
  type HistoryEvent,
  type Payload,
  type RetryPolicy,
  type StateDelta,
  type StateDeltaPiece,
  type TaskOutcome,
  type TimeoutCause,
  type TraceContext,
  type TurnPolicy,
  type WorkflowKind,
} from './events.js';
import { wellFormedFailure, wellFormedPayload, wellFormedPolicy } from './well-formed.js';

const TurnPolicyType = lookupType('turnlog.v1.TurnPolicy');
const PayloadType = lookupType('temporal.api.common.v1.Payload');
const FailureType = lookupType('temporal.api.failure.v1.Failure');

// Enum maps, generated from history.proto (src/internal/wire/fields.ts): index = proto enum number.
export const KINDS: readonly (WorkflowKind | undefined)[] = pb.WORKFLOW_KINDS;
export const ENTRY_MODES: readonly (EntryMode | undefined)[] = pb.ENTRY_MODES;
export const EXECUTORS: readonly (ExecutorKind | undefined)[] = pb.EXECUTOR_KINDS;
export const OUTCOMES: readonly (TaskOutcome | undefined)[] = pb.TASK_OUTCOMES;
export const CAUSES: readonly (TimeoutCause | undefined)[] = pb.TIMEOUT_CAUSES;
export const SCOPES: readonly (CancelScope | undefined)[] = pb.CANCEL_SCOPES;
export const CHILD_STATUSES: readonly (ChildStatus | undefined)[] = pb.CHILD_STATUSES;

export function toNum<T>(table: readonly (T | undefined)[], v: T): number {
  const i = table.indexOf(v);
  if (i <= 0) throw new TurnlogError('TURNLOG_INVALID_ARGUMENT', `Cannot encode enum value ${String(v)}.`);
  return i;
}

/** Where an event came from, for error messages. */
export interface Origin {
  taskId: string;
  eventId: number;
}

export function fromNum<T>(table: readonly (T | undefined)[], n: number, what: string, at: Origin): T {
  const v = table[n];
  if (v === undefined) {
    throw new HistoryFormatError(at.taskId, at.eventId, HISTORY_FORMAT_VERSION, `unknown ${what} value ${n}`);
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// Payload and Failure

export interface PayloadMsg {
  metadata?: Record<string, Uint8Array>;
  data?: Uint8Array;
}

export function payloadToProto(p: Payload): PayloadMsg {
  return { metadata: p.metadata, data: p.data };
}

export function payloadFromProto(m: PayloadMsg | null | undefined): Payload | undefined {
  if (!m) return undefined;
  // protobufjs 8 decodes an absent bytes field to its prototype default, a shared JS Array
  // `[]`, and an absent map to a shared frozen object: normalize both (test: review2).
  const metadata: Record<string, Uint8Array> = {};
  if (m.metadata) for (const k of Object.keys(m.metadata)) setOwn(metadata, k, asBytes(m.metadata[k]));
  return { metadata, data: asBytes(m.data) };
}

export function asBytes(v: unknown): Uint8Array {
  return v instanceof Uint8Array && v.length > 0 ? v : EMPTY;
}


export interface FailureMsg {
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
  jitter?: number | null;
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

export function policyToProto(p: TurnPolicy): PolicyMsg {
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
    // Absent in histories recorded before jitter existed: they keep reading as before (default).
    ...(m?.jitter != null ? { jitter: m.jitter } : {}),
  };
}

export function policyFromProto(m: PolicyMsg | null | undefined, at: Origin): TurnPolicy {
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

export const EMPTY_PAYLOAD: Payload = { metadata: {}, data: EMPTY };

export function optPayload(p: Payload | undefined): PayloadMsg | null {
  return p ? payloadToProto(p) : null;
}

interface DeltaPieceMsg {
  literal?: Uint8Array;
  source?: number;
  offset?: number;
  length?: number;
}

// Proto's `source` is the TS index + 1, so 0 (the proto3 default) means a literal.
export function deltaToProto(d: StateDelta | undefined): { prefix: number; suffix: number; pieces: DeltaPieceMsg[] } | null {
  if (d === undefined) return null;
  const pieces = d.pieces.map((p): DeltaPieceMsg =>
    'literal' in p ? { literal: p.literal } : { source: p.source + 1, offset: p.offset, length: p.length },
  );
  return { prefix: d.prefix, suffix: d.suffix, pieces };
}

export function deltaFromProto(m: { prefix: number; suffix: number; pieces?: DeltaPieceMsg[] | null } | null | undefined): StateDelta | undefined {
  if (!m) return undefined;
  const pieces = (m.pieces ?? []).map((p): StateDeltaPiece =>
    p.source ? { source: p.source - 1, offset: p.offset ?? 0, length: p.length ?? 0 } : { literal: asBytes(p.literal) },
  );
  return { prefix: m.prefix ?? 0, suffix: m.suffix ?? 0, pieces };
}

export function failureOf(m: FailureMsg | null | undefined, at: Origin): FailureInfo {
  if (!m) throw new HistoryFormatError(at.taskId, at.eventId, HISTORY_FORMAT_VERSION, 'failure missing');
  return failureFromProto(m);
}

/** A recorded trace context; an empty tracestate is absent (proto3 has no presence for strings). */
export function traceOf(traceparent: string, tracestate: string | undefined): TraceContext {
  return tracestate ? { traceparent, tracestate } : { traceparent };
}

// ---------------------------------------------------------------------------------------------
// The generic mapping of one event family (history/codec-<family>.ts): one entry per event type.

/** The TS event of one type. */
export type EventOf<K extends EventType> = Extract<HistoryEvent, { type: K }>;

/**
 * Maps a TS event to the plain object protobufjs encodes. Each entry builds one object literal:
 * an object made by spreading a shared base (`{ ...base, x }`) made the generated encoder about
 * 10x slower (≈ 6 µs for a TaskCompleted against ≈ 0.7 µs), as V8 no longer saw a stable shape.
 */
export type ToProto<K extends EventType> = (e: EventOf<K>, eventId: number, timeMs: number, generation: number) => Record<string, unknown>;

/** Maps the decoded oneof member `a` (protobufjs' message, untyped) to the TS event. */
export type FromProto = (a: any, eventId: number, time: number, generation: number, at: Origin) => HistoryEvent;

/** The encode entries of a family of event types. */
export type ToProtoTable<K extends EventType> = { [T in K]: ToProto<T> };
/** The decode entries of a family, keyed by the oneof member's name (the type, uncapitalized). */
export type FromProtoTable<K extends EventType> = { [T in K as Uncapitalize<T>]: FromProto };
