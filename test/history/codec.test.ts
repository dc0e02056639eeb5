import fc from 'fast-check';
import { failureArbitrary } from '../helpers/arbitraries.js';
import { describe, expect, it } from 'vitest';
import { isTurnlogError } from '../../src/errors.js';
import { decodeEvent, encodeEvent, eventFromJSON, eventToJSON } from '../../src/history/codec.js';
import {
  ALL_EVENT_TYPES,
  type EventType,
  type HistoryEvent,
  type Payload,
  type TurnPolicy,
} from '../../src/history/events.js';
import { DefaultPayloadConverter, type PayloadCodec } from '../../src/history/payload.js';

// Arbitraries produce the canonical form of each event: the one the codec decodes back
// (proto3 drops defaults, so e.g. an absent optional and its empty default read the same).
const str = fc.string({ unit: 'grapheme', maxLength: 16 });
const nonEmpty = fc.string({ unit: 'grapheme', minLength: 1, maxLength: 16 });
const u32 = fc.nat({ max: 0xffffffff });
const small = fc.nat({ max: 1_000_000 });
const ms = fc.integer({ min: 0, max: 2 ** 48 });
const dbl = fc.double({ noNaN: true, noDefaultInfinity: true, min: -1e12, max: 1e12 }).filter((x) => !Object.is(x, -0));
const ids = fc.array(nonEmpty, { maxLength: 5 });

const metadataKey = fc.string({ minLength: 1, maxLength: 12 }).filter((k) => k !== '__proto__');
const payload: fc.Arbitrary<Payload> = fc.record({
  metadata: fc.dictionary(metadataKey, fc.uint8Array({ maxLength: 16 }), { maxKeys: 3 }),
  data: fc.uint8Array({ maxLength: 64 }),
});

const failure = failureArbitrary({ message: str, type: nonEmpty, stack: nonEmpty, nonRetryable: fc.constant(true), code: nonEmpty, details: payload, encodedAttributes: payload });

const policy: fc.Arbitrary<TurnPolicy> = fc.record({
  turnTimeoutMs: dbl,
  graceMs: dbl,
  maxRecoveries: u32,
  maxWorkerCrashes: u32,
  steeringMaxQueued: u32,
  executor: fc.constantFrom('inline', 'process'),
  stepRetry: fc.record({
    maxAttempts: u32,
    initialIntervalMs: dbl,
    backoffCoefficient: dbl,
    maxIntervalMs: dbl,
    nonRetryableTypes: ids,
  }),
});

const base = { eventId: fc.integer({ min: 1, max: 0xffffffff }), time: ms, generation: u32 };
const optionalPayloads = { output: payload, state: payload };

const arbitraries: { [T in EventType]: fc.Arbitrary<Extract<HistoryEvent, { type: T }>> } = {
  TaskCreated: fc.record({
    type: fc.constant('TaskCreated'),
    ...base,
    workflow: str,
    kind: fc.constantFrom('one-shot', 'multi-turn'),
    policy,
    formatVersion: u32,
  }),
  InputQueued: fc.record({ type: fc.constant('InputQueued'), ...base, inputId: str, input: payload, steering: fc.boolean() }),
  InputWithdrawn: fc.record({ type: fc.constant('InputWithdrawn'), ...base, inputId: str, reason: str }),
  TurnStarted: fc.record({
    type: fc.constant('TurnStarted'),
    ...base,
    turn: small,
    attempt: small,
    inputIds: ids,
    entryMode: fc.constantFrom('fresh', 'resumed', 'recovered'),
    steered: fc.boolean(),
    owner: str,
    instance: str,
    executor: fc.constantFrom('inline', 'process'),
    pid: u32,
    turnStartedAt: ms,
    deadline: ms,
  }),
  StepCompleted: fc
    .tuple(
      fc.record({ type: fc.constant('StepCompleted'), ...base, turn: small, attempt: small, seq: small, name: str, durationMs: dbl }),
      fc.oneof(payload.map((result) => ({ result })), failure.map((f) => ({ failure: f }))),
    )
    .map(([e, outcome]) => ({ ...e, ...outcome })),
  InputsTaken: fc.record({ type: fc.constant('InputsTaken'), ...base, turn: small, seq: small, inputIds: ids }),
  Checkpointed: fc.record({ type: fc.constant('Checkpointed'), ...base, turn: small, seq: small, data: payload }),
  TimeoutCancelRequested: fc.record({ type: fc.constant('TimeoutCancelRequested'), ...base, turn: small, at: ms, graceUntil: ms }),
  CancelRequested: fc.record({ type: fc.constant('CancelRequested'), ...base, scope: fc.constantFrom('task', 'turn'), turn: small, reason: str }),
  WorkerKilled: fc.record({ type: fc.constant('WorkerKilled'), ...base, turn: small, pid: u32, signal: str, reason: str }),
  WorkerCrashed: fc.record({
    type: fc.constant('WorkerCrashed'),
    ...base,
    turn: small,
    attempt: small,
    pid: u32,
    exitCode: fc.option(fc.integer({ min: 0, max: 255 }), { nil: null }),
    signal: fc.option(nonEmpty, { nil: null }),
    message: str,
  }),
  TurnCompleted: fc.record({ type: fc.constant('TurnCompleted'), ...base, turn: small, ...optionalPayloads }, {
    requiredKeys: ['type', 'eventId', 'time', 'generation', 'turn'],
  }),
  TurnFailed: fc.record({ type: fc.constant('TurnFailed'), ...base, turn: small, failure }),
  TurnSuspended: fc.record({ type: fc.constant('TurnSuspended'), ...base, turn: small, reason: str, ...optionalPayloads }, {
    requiredKeys: ['type', 'eventId', 'time', 'generation', 'turn', 'reason'],
  }),
  TurnCancelled: fc.record({ type: fc.constant('TurnCancelled'), ...base, turn: small, reason: str }),
  TurnTimedOut: fc.record({
    type: fc.constant('TurnTimedOut'),
    ...base,
    turn: small,
    cause: fc.constantFrom('cooperative', 'hard_cap', 'recovery_marker', 'recovery_backstop'),
  }),
  TurnExitedForRecovery: fc.record({ type: fc.constant('TurnExitedForRecovery'), ...base, turn: small, attempt: small, reason: str }),
  LeaseClaimed: fc.record({
    type: fc.constant('LeaseClaimed'),
    ...base,
    owner: str,
    instance: str,
    previousGeneration: u32,
    reason: str,
    expiresAt: ms,
  }),
  TaskCompleted: fc.record({ type: fc.constant('TaskCompleted'), ...base, outcome: fc.constantFrom('succeeded', 'failed', 'cancelled', 'timed_out') }),
};

const anyEvent: fc.Arbitrary<HistoryEvent> = fc.oneof(...ALL_EVENT_TYPES.map((t) => arbitraries[t] as fc.Arbitrary<HistoryEvent>));

/** Bytes fields decode as Uint8Array views; compare them by content. */
function plain(v: unknown): unknown {
  if (v instanceof Uint8Array) return [...v];
  if (Array.isArray(v)) return v.map(plain);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
  return v;
}

describe('codec', () => {
  it('has an arbitrary for every event type', () => {
    expect(Object.keys(arbitraries).sort()).toEqual([...ALL_EVENT_TYPES].sort());
  });

  for (const type of ALL_EVENT_TYPES) {
    it(`round-trips ${type} through protobuf`, () => {
      fc.assert(
        fc.property(arbitraries[type] as fc.Arbitrary<HistoryEvent>, (e) => {
          expect(plain(decodeEvent(encodeEvent(e), 'task'))).toEqual(plain(e));
        }),
        { seed: 1337, numRuns: 150 },
      );
    });
  }

  it('round-trips every event type through the proto3 JSON mapping (and JSON text)', () => {
    fc.assert(
      fc.property(anyEvent, (e) => {
        const json = JSON.parse(JSON.stringify(eventToJSON(e))) as Record<string, unknown>;
        expect(plain(eventFromJSON(json, 'task'))).toEqual(plain(e));
      }),
      { seed: 1337, numRuns: 500 },
    );
  });

  it('an event type this build does not know gives HistoryFormatError naming task and event id', () => {
    // event_id = 7 (field 1), then field 99 (length-delimited, empty): a oneof member from a newer build.
    const bytes = new Uint8Array([0x08, 0x07, 0x9a, 0x06, 0x00]);
    let err: unknown;
    try {
      decodeEvent(bytes, 'task-9', 'events/task-9/7');
    } catch (e) {
      err = e;
    }
    expect(isTurnlogError(err, 'TURNLOG_HISTORY_FORMAT')).toBe(true);
    expect(err).toMatchObject({ taskId: 'task-9', eventId: 7 });
    expect((err as Error).message).toContain('task-9');
    expect((err as Error).message).toContain('event 7');
  });

  it('garbage bytes give HistoryCorruptError naming the key', () => {
    for (const bytes of [new Uint8Array([0x0a, 0xff, 0xff, 0xff, 0x0f, 0x01]), new Uint8Array([0xff]), new Uint8Array()]) {
      let err: unknown;
      try {
        decodeEvent(bytes, 'task-1', 'events/task-1/3');
      } catch (e) {
        err = e;
      }
      expect(isTurnlogError(err, 'TURNLOG_HISTORY_CORRUPT')).toBe(true);
      expect(err).toMatchObject({ key: 'events/task-1/3' });
    }
  });
});

describe('payload converter', () => {
  const conv = new DefaultPayloadConverter();
  const encodingOf = (p: Payload) => new TextDecoder().decode(p.metadata['encoding']);

  it('converts JSON values both ways with encoding json/plain', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (v) => {
        const p = conv.toPayload(v);
        expect(encodingOf(p)).toBe('json/plain');
        // JSON itself turns -0 into 0.
        expect(conv.fromPayload(p)).toEqual(JSON.parse(JSON.stringify(v)));
      }),
      { seed: 1337, numRuns: 200 },
    );
  });

  it('passes a Uint8Array through as binary/plain', () => {
    const p = conv.toPayload(new Uint8Array([1, 2, 250]));
    expect(encodingOf(p)).toBe('binary/plain');
    expect([...conv.fromPayload<Uint8Array>(p)]).toEqual([1, 2, 250]);
  });

  it('stores undefined as binary/null', () => {
    const p = conv.toPayload(undefined);
    expect(encodingOf(p)).toBe('binary/null');
    expect(p.data.length).toBe(0);
    expect(conv.fromPayload(p)).toBeUndefined();
  });

  it('applies a codec to every payload on the way in and reverses it on the way out', () => {
    const xor: PayloadCodec = {
      encode: (p) => ({
        metadata: { ...p.metadata, encoding: new TextEncoder().encode('binary/xor'), inner: p.metadata['encoding']! },
        data: p.data.map((b) => b ^ 0x5a),
      }),
      decode: (p) => {
        const { inner, ...rest } = p.metadata;
        return { metadata: { ...rest, encoding: inner! }, data: p.data.map((b) => b ^ 0x5a) };
      },
    };
    const withCodec = new DefaultPayloadConverter([xor]);
    const p = withCodec.toPayload({ secret: 'agent' });
    expect(encodingOf(p)).toBe('binary/xor');
    expect(new TextDecoder().decode(p.data)).not.toContain('agent');
    expect(withCodec.fromPayload(p)).toEqual({ secret: 'agent' });
    // Without the codec the payload cannot be read, and the error says why.
    expect(() => conv.fromPayload(p)).toThrow(expect.objectContaining({ code: 'TURNLOG_PAYLOAD_ENCODING' }));
  });

  it('rejects values with no JSON form with TURNLOG_PAYLOAD_ENCODING', () => {
    const circular: Record<string, unknown> = {};
    circular['self'] = circular;
    for (const v of [circular, 10n, () => 1, Symbol('s')]) {
      let err: unknown;
      try {
        conv.toPayload(v);
      } catch (e) {
        err = e;
      }
      expect(isTurnlogError(err, 'TURNLOG_PAYLOAD_ENCODING'), String(typeof v)).toBe(true);
    }
  });
});
