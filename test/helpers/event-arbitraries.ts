/**
 * fast-check arbitraries of every history event type, with the string domain as a parameter:
 * the codec round-trip tests use graphemes, the well-formedness tests any UTF-16 code units.
 */
import fc from 'fast-check';
import { ALL_EVENT_TYPES, type EventType, type HistoryEvent, type Payload, type TurnPolicy } from '../../src/history/events.js';
import { failureArbitrary } from './arbitraries.js';

export type EventArbitraries = { [T in EventType]: fc.Arbitrary<Extract<HistoryEvent, { type: T }>> };

/** Strings of any UTF-16 code units, lone surrogates included (and often: half an emoji). */
export const codeUnit: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom('\ud83d', '\ude00', '\udfff', '\ud800', '😀', 'a'),
  fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)),
);

/** One arbitrary per event type and one for any event, strings built from `unit`. */
export function eventArbitraries(unit: fc.Arbitrary<string> | 'grapheme' = 'grapheme'): { arbitraries: EventArbitraries; anyEvent: fc.Arbitrary<HistoryEvent> } {
  const str = fc.string({ unit, maxLength: 16 });
  const nonEmpty = fc.string({ unit, minLength: 1, maxLength: 16 });
  // Arbitraries produce the canonical form of each event: the one the codec decodes back
  // (proto3 drops defaults, so e.g. an absent optional and its empty default read the same).
  const u32 = fc.nat({ max: 0xffffffff });
  const small = fc.nat({ max: 1_000_000 });
  const ms = fc.integer({ min: 0, max: 2 ** 48 });
  const dbl = fc.double({ noNaN: true, noDefaultInfinity: true, min: -1e12, max: 1e12 }).filter((x) => !Object.is(x, -0));
  const ids = fc.array(nonEmpty, { maxLength: 5 });

  const metadataKey = fc.string({ unit: unit === 'grapheme' ? 'grapheme-ascii' : unit, minLength: 1, maxLength: 12 }).filter((k) => k !== '__proto__');
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
    stepRetry: fc.record(
      {
        maxAttempts: u32,
        initialIntervalMs: dbl,
        backoffCoefficient: dbl,
        maxIntervalMs: dbl,
        nonRetryableTypes: ids,
        jitter: fc.double({ min: 0, max: 1, noNaN: true }),
      },
      { requiredKeys: ['maxAttempts', 'initialIntervalMs', 'backoffCoefficient', 'maxIntervalMs', 'nonRetryableTypes'] },
    ),
  });

  const base = { eventId: fc.integer({ min: 1, max: 0xffffffff }), time: ms, generation: u32 };
  // A state delta (format 2): literals and copies, as the codec carries them (not necessarily applicable).
  const stateDelta = fc.record({
    prefix: fc.nat({ max: 1 << 20 }),
    suffix: fc.nat({ max: 1 << 20 }),
    pieces: fc.array(
      fc.oneof(
        fc.uint8Array({ minLength: 1, maxLength: 24 }).map((literal) => ({ literal })),
        fc.record({ source: fc.nat({ max: 1000 }), offset: fc.nat({ max: 1 << 20 }), length: fc.nat({ max: 1 << 20 }) }),
      ),
      { maxLength: 4 },
    ),
  });
  const optionalPayloads = { output: payload, state: payload, stateDelta };

  const arbitraries: { [T in EventType]: fc.Arbitrary<Extract<HistoryEvent, { type: T }>> } = {
    TaskCreated: fc.record({
      type: fc.constant('TaskCreated'),
      ...base,
      workflow: str,
      kind: fc.constantFrom('one-shot', 'multi-turn'),
      policy,
      formatVersion: u32,
    }),
    InputQueued: fc.record(
      {
        type: fc.constant('InputQueued'),
        ...base,
        inputId: str,
        input: payload,
        steering: fc.boolean(),
        // The sender's trace context (turnlog/otel); an empty tracestate reads back as absent.
        trace: fc.record({ traceparent: fc.stringMatching(/^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/), tracestate: fc.stringMatching(/^[a-z]{1,8}=[a-z0-9]{1,8}$/) }, { requiredKeys: ['traceparent'] }),
      },
      { requiredKeys: ['type', 'eventId', 'time', 'generation', 'inputId', 'input', 'steering'] },
    ),
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
      workflowVersion: fc.integer({ min: 1, max: 0xffffffff }),
    }, { requiredKeys: ['type', 'eventId', 'time', 'generation', 'turn', 'attempt', 'inputIds', 'entryMode', 'steered', 'owner', 'instance', 'executor', 'pid', 'turnStartedAt', 'deadline'] }),
    StepCompleted: fc
      .tuple(
        fc.record({ type: fc.constant('StepCompleted'), ...base, turn: small, attempt: small, seq: small, name: str, durationMs: dbl }),
        fc.oneof(payload.map((result) => ({ result })), failure.map((f) => ({ failure: f }))),
        // A flow limit's name and wait (fields 8, 9), or none (a name is never empty when set).
        fc.option(fc.record({ limit: str.filter((s) => s !== ''), waitedMs: dbl }), { nil: undefined }),
      )
      .map(([e, outcome, limited]) => ({ ...e, ...outcome, ...limited })),
    InputsTaken: fc.record({ type: fc.constant('InputsTaken'), ...base, turn: small, seq: small, inputIds: ids }),
    Checkpointed: fc.record({ type: fc.constant('Checkpointed'), ...base, turn: small, seq: small, data: payload }),
    PatchMarked: fc.record({ type: fc.constant('PatchMarked'), ...base, turn: small, seq: small, patchId: str, deprecated: fc.boolean() }),
    TimerStarted: fc.record({ type: fc.constant('TimerStarted'), ...base, turn: small, seq: small, durationMs: ms, fireAt: ms }),
    ChildStarted: fc.record({ type: fc.constant('ChildStarted'), ...base, turn: small, seq: small, childId: nonEmpty, workflow: nonEmpty, detached: fc.boolean() }),
    ChildEnded: fc.record(
      {
        type: fc.constant('ChildEnded'),
        ...base,
        turn: small,
        seq: small,
        childId: nonEmpty,
        status: fc.constantFrom('completed', 'suspended', 'failed', 'cancelled', 'timed_out'),
        output: payload,
        failure,
        reason: nonEmpty,
      },
      { requiredKeys: ['type', 'eventId', 'time', 'generation', 'turn', 'seq', 'childId', 'status'] },
    ),
    SignalReceived: fc.record({ type: fc.constant('SignalReceived'), ...base, signalId: str, name: str, value: payload }),
    WaitStarted: fc.record(
      { type: fc.constant('WaitStarted'), ...base, turn: small, seq: small, name: str, timeoutMs: ms, deadline: ms },
      { requiredKeys: ['type', 'eventId', 'time', 'generation', 'turn', 'seq', 'name'] },
    ),
    WaitEnded: fc.record({ type: fc.constant('WaitEnded'), ...base, turn: small, seq: small, signalId: str, timedOut: fc.boolean() }),
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
    StateMigrated: fc.record({ type: fc.constant('StateMigrated'), ...base, fromVersion: u32, toVersion: u32, state: payload, stateDelta }, {
      requiredKeys: ['type', 'eventId', 'time', 'generation', 'fromVersion', 'toVersion'],
    }),
    HistoryCompacted: fc.record(
      { type: fc.constant('HistoryCompacted'), ...base, throughEventId: u32, state: fc.uint8Array({ maxLength: 32 }), turns: u32, droppedEvents: u32, droppedInputIds: fc.array(nonEmpty, { minLength: 1, maxLength: 5 }) },
      { requiredKeys: ['type', 'eventId', 'time', 'generation', 'throughEventId', 'state', 'turns', 'droppedEvents'] },
    ),
  };

  const anyEvent: fc.Arbitrary<HistoryEvent> = fc.oneof(...ALL_EVENT_TYPES.map((t) => arbitraries[t] as fc.Arbitrary<HistoryEvent>));
  return { arbitraries, anyEvent };
}
