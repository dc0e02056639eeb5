/**
 * codec.ts encodes the events of every turn by hand with protobufjs's Writer (an append-path
 * speed-up). The stored format must not move: for every event type, the fast path must give
 * exactly the bytes of the generated protobufjs encoder. The arbitraries here are wider than the
 * round-trip ones in codec.test.ts: zeros, -0, NaN and infinities, empty strings and payloads,
 * unicode (lone surrogates included), long strings and payloads (multi-byte length prefixes),
 * metadata maps with several keys, integer-like keys among them (Object.keys order).
 */
import fc from 'fast-check';
import { failureArbitrary } from '../helpers/arbitraries.js';
import { describe, expect, it } from 'vitest';
import {
  decodeEvent,
  encodeEvent,
  encodeEventDelimited,
  encodeEventDelimitedGeneric,
  encodeEventGeneric,
} from '../../src/history/codec.js';
import { ALL_EVENT_TYPES, type EventType, type HistoryEvent, type Payload, type TurnPolicy } from '../../src/history/events.js';

const RUNS = { seed: 4242, numRuns: 300 };

const str = fc.oneof(
  fc.constant(''),
  fc.string({ unit: 'grapheme', maxLength: 12 }),
  fc.string({ unit: 'binary', maxLength: 12 }),
  // Writer.string switches strategy at 40 and 128 UTF-16 units.
  fc.string({ unit: 'binary', minLength: 38, maxLength: 140 }),
  fc.string({ unit: 'grapheme-ascii', minLength: 120, maxLength: 300 }),
);
const u32 = fc.oneof(fc.constant(0), fc.constant(0xffffffff), fc.nat({ max: 0xffffffff }), fc.nat({ max: 200 }));
const dbl = fc.oneof(
  fc.constantFrom(0, -0, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 1_700_000_000_123.5),
  fc.double(),
  fc.integer({ min: 0, max: 2 ** 48 }),
);
const bytes = fc.oneof(fc.uint8Array({ maxLength: 8 }), fc.uint8Array({ minLength: 120, maxLength: 400 }));
const metadataKey = fc.oneof(
  fc.constantFrom('encoding', 'inner', '0', '1', '42', 'ü', ''),
  fc.string({ unit: 'binary', maxLength: 10 }),
).filter((k) => k !== '__proto__');
const payload: fc.Arbitrary<Payload> = fc.record({
  metadata: fc.dictionary(metadataKey, fc.uint8Array({ maxLength: 16 }), { maxKeys: 5 }),
  data: bytes,
});
const ids = fc.array(str, { maxLength: 4 });

const failure = failureArbitrary({ message: str, type: str, stack: str, nonRetryable: fc.boolean(), code: str, details: payload });

const policy: fc.Arbitrary<TurnPolicy> = fc.record({
  turnTimeoutMs: dbl,
  graceMs: dbl,
  maxRecoveries: u32,
  maxWorkerCrashes: u32,
  steeringMaxQueued: u32,
  executor: fc.constantFrom('inline', 'process'),
  stepRetry: fc.record(
    { maxAttempts: u32, initialIntervalMs: dbl, backoffCoefficient: dbl, maxIntervalMs: dbl, nonRetryableTypes: ids, jitter: dbl },
    { requiredKeys: ['maxAttempts', 'initialIntervalMs', 'backoffCoefficient', 'maxIntervalMs', 'nonRetryableTypes'] },
  ),
});

const base = { eventId: u32, time: dbl, generation: u32 };
const optionalPayloads = { output: payload, state: payload };

const arbitraries: { [T in EventType]: fc.Arbitrary<Extract<HistoryEvent, { type: T }>> } = {
  TaskCreated: fc.record({ type: fc.constant('TaskCreated'), ...base, workflow: str, kind: fc.constantFrom('one-shot', 'multi-turn'), policy, formatVersion: u32 }),
  InputQueued: fc.record({ type: fc.constant('InputQueued'), ...base, inputId: str, input: payload, steering: fc.boolean() }),
  InputWithdrawn: fc.record({ type: fc.constant('InputWithdrawn'), ...base, inputId: str, reason: str }),
  OperatorAction: fc.record({
    type: fc.constant('OperatorAction'),
    ...base,
    action: fc.constantFrom('cancel-task', 'cancel-turn', 'withdraw', 'resend', 'resume'),
    by: str,
    reason: str,
    turn: u32,
    inputId: str,
    newInputId: str,
  }),
  TurnStarted: fc.record({
    type: fc.constant('TurnStarted'),
    ...base,
    turn: u32,
    attempt: u32,
    inputIds: ids,
    entryMode: fc.constantFrom('fresh', 'resumed', 'recovered'),
    steered: fc.boolean(),
    owner: str,
    instance: str,
    executor: fc.constantFrom('inline', 'process'),
    pid: u32,
    turnStartedAt: dbl,
    deadline: dbl,
    workflowVersion: fc.integer({ min: 1, max: 0xffffffff }),
  }, { requiredKeys: ['type', 'eventId', 'time', 'generation', 'turn', 'attempt', 'inputIds', 'entryMode', 'steered', 'owner', 'instance', 'executor', 'pid', 'turnStartedAt', 'deadline'] }),
  StepCompleted: fc
    .tuple(
      fc.record({ type: fc.constant('StepCompleted'), ...base, turn: u32, attempt: u32, seq: u32, name: str, durationMs: dbl }),
      // An absent result encodes as an empty one; a failure takes the generic path.
      fc.oneof(payload.map((result) => ({ result })), fc.constant({}), failure.map((f) => ({ failure: f }))),
    )
    .map(([e, outcome]) => ({ ...e, ...outcome })),
  InputsTaken: fc.record({ type: fc.constant('InputsTaken'), ...base, turn: u32, seq: u32, inputIds: ids }),
  Checkpointed: fc.record({ type: fc.constant('Checkpointed'), ...base, turn: u32, seq: u32, data: payload }),
  PatchMarked: fc.record({ type: fc.constant('PatchMarked'), ...base, turn: u32, seq: u32, patchId: str, deprecated: fc.boolean() }),
  TimerStarted: fc.record({ type: fc.constant('TimerStarted'), ...base, turn: u32, seq: u32, durationMs: dbl, fireAt: dbl }),
  ChildStarted: fc.record({ type: fc.constant('ChildStarted'), ...base, turn: u32, seq: u32, childId: str, workflow: str, detached: fc.boolean() }),
  ChildEnded: fc.record(
    {
      type: fc.constant('ChildEnded'),
      ...base,
      turn: u32,
      seq: u32,
      childId: str,
      status: fc.constantFrom('completed', 'suspended', 'failed', 'cancelled', 'timed_out'),
      output: payload,
      failure,
      reason: str.filter((s) => s !== ''),
    },
    { requiredKeys: ['type', 'eventId', 'time', 'generation', 'turn', 'seq', 'childId', 'status'] },
  ),
  SignalReceived: fc.record({ type: fc.constant('SignalReceived'), ...base, signalId: str, name: str, value: payload }),
  WaitStarted: fc.record(
    { type: fc.constant('WaitStarted'), ...base, turn: u32, seq: u32, name: str, timeoutMs: dbl, deadline: dbl },
    { requiredKeys: ['type', 'eventId', 'time', 'generation', 'turn', 'seq', 'name'] },
  ),
  WaitEnded: fc.record({ type: fc.constant('WaitEnded'), ...base, turn: u32, seq: u32, signalId: str, timedOut: fc.boolean() }),
  TimeoutCancelRequested: fc.record({ type: fc.constant('TimeoutCancelRequested'), ...base, turn: u32, at: dbl, graceUntil: dbl }),
  CancelRequested: fc.record({ type: fc.constant('CancelRequested'), ...base, scope: fc.constantFrom('task', 'turn'), turn: u32, reason: str }),
  WorkerKilled: fc.record({ type: fc.constant('WorkerKilled'), ...base, turn: u32, pid: u32, signal: str, reason: str }),
  WorkerCrashed: fc.record({
    type: fc.constant('WorkerCrashed'),
    ...base,
    turn: u32,
    attempt: u32,
    pid: u32,
    exitCode: fc.option(fc.integer({ min: 0, max: 255 }), { nil: null }),
    signal: fc.option(str, { nil: null }),
    message: str,
  }),
  TurnCompleted: fc.record({ type: fc.constant('TurnCompleted'), ...base, turn: u32, ...optionalPayloads }, {
    requiredKeys: ['type', 'eventId', 'time', 'generation', 'turn'],
  }),
  TurnFailed: fc.record({ type: fc.constant('TurnFailed'), ...base, turn: u32, failure }),
  TurnSuspended: fc.record({ type: fc.constant('TurnSuspended'), ...base, turn: u32, reason: str, ...optionalPayloads }, {
    requiredKeys: ['type', 'eventId', 'time', 'generation', 'turn', 'reason'],
  }),
  TurnCancelled: fc.record({ type: fc.constant('TurnCancelled'), ...base, turn: u32, reason: str }),
  TurnTimedOut: fc.record({
    type: fc.constant('TurnTimedOut'),
    ...base,
    turn: u32,
    cause: fc.constantFrom('cooperative', 'hard_cap', 'recovery_marker', 'recovery_backstop'),
  }),
  TurnExitedForRecovery: fc.record({ type: fc.constant('TurnExitedForRecovery'), ...base, turn: u32, attempt: u32, reason: str }),
  LeaseClaimed: fc.record({ type: fc.constant('LeaseClaimed'), ...base, owner: str, instance: str, previousGeneration: u32, reason: str, expiresAt: dbl }),
  TaskCompleted: fc.record({ type: fc.constant('TaskCompleted'), ...base, outcome: fc.constantFrom('succeeded', 'failed', 'cancelled', 'timed_out') }),
  StateMigrated: fc.record({ type: fc.constant('StateMigrated'), ...base, fromVersion: u32, toVersion: u32, state: payload }, {
    requiredKeys: ['type', 'eventId', 'time', 'generation', 'fromVersion', 'toVersion'],
  }),
  HistoryCompacted: fc.record(
    { type: fc.constant('HistoryCompacted'), ...base, throughEventId: u32, state: fc.uint8Array({ maxLength: 32 }), turns: u32, droppedEvents: u32, droppedInputIds: fc.array(str, { minLength: 1, maxLength: 4 }) },
    { requiredKeys: ['type', 'eventId', 'time', 'generation', 'throughEventId', 'state', 'turns', 'droppedEvents'] },
  ),
};

const hex = (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex');

describe('codec encode fast path', () => {
  it('has an arbitrary for every event type', () => {
    expect(Object.keys(arbitraries).sort()).toEqual([...ALL_EVENT_TYPES].sort());
  });

  for (const type of ALL_EVENT_TYPES) {
    it(`${type}: the same bytes as the generated encoder, plain and length-delimited`, () => {
      fc.assert(
        fc.property(arbitraries[type] as fc.Arbitrary<HistoryEvent>, (e) => {
          expect(hex(encodeEvent(e))).toBe(hex(encodeEventGeneric(e)));
          expect(hex(encodeEventDelimited(e))).toBe(hex(encodeEventDelimitedGeneric(e)));
        }),
        RUNS,
      );
    });
  }

  it('interleaved event types share the writer without leaking bytes between encodes', () => {
    const anyEvent = fc.oneof(...ALL_EVENT_TYPES.map((t) => arbitraries[t] as fc.Arbitrary<HistoryEvent>));
    fc.assert(
      fc.property(fc.array(anyEvent, { minLength: 2, maxLength: 8 }), (events) => {
        const fast = events.map((e) => hex(encodeEvent(e)));
        expect(fast).toEqual(events.map((e) => hex(encodeEventGeneric(e))));
      }),
      { seed: 4243, numRuns: 200 },
    );
  });

  it('returns bytes the caller owns: a later encode does not overwrite them', () => {
    const step = (data: number[]): HistoryEvent => ({
      type: 'StepCompleted',
      eventId: 2,
      time: 5,
      generation: 1,
      turn: 1,
      attempt: 1,
      seq: 1,
      name: 's',
      durationMs: 1,
      result: { metadata: {}, data: new Uint8Array(data) },
    });
    const a = encodeEvent(step([1, 2, 3]));
    const copy = hex(a);
    encodeEvent(step([9, 9, 9]));
    expect(hex(a)).toBe(copy);
    expect(Buffer.isBuffer(a)).toBe(Buffer.isBuffer(encodeEventGeneric(step([1]))));
  });

  it('recovers after an encode that throws half-way, and after a very large event', () => {
    const bad = {
      type: 'TurnStarted',
      eventId: 3,
      time: 1,
      generation: 1,
      turn: 1,
      attempt: 1,
      inputIds: ['a'],
      entryMode: 'sideways',
      steered: false,
      owner: 'o',
      instance: 'i',
      executor: 'inline',
      pid: 1,
      turnStartedAt: 1,
      deadline: 2,
    } as unknown as HistoryEvent;
    expect(() => encodeEvent(bad)).toThrow(expect.objectContaining({ code: 'TURNLOG_INVALID_ARGUMENT' }));
    const noInput = { type: 'InputQueued', eventId: 2, time: 1, generation: 1, inputId: 'x', steering: false } as unknown as HistoryEvent;
    expect(() => encodeEvent(noInput)).toThrow(TypeError);
    const big: HistoryEvent = {
      type: 'TurnCompleted',
      eventId: 4,
      time: 1,
      generation: 1,
      turn: 1,
      output: { metadata: { encoding: new Uint8Array([1]) }, data: new Uint8Array(200_000).fill(7) },
    };
    expect(hex(encodeEvent(big))).toBe(hex(encodeEventGeneric(big)));
    const small: HistoryEvent = { type: 'TaskCompleted', eventId: 5, time: 2, generation: 1, outcome: 'succeeded' };
    expect(hex(encodeEvent(small))).toBe(hex(encodeEventGeneric(small)));
    expect(decodeEvent(encodeEvent(small), 't')).toEqual(small);
  });
});
