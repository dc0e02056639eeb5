/** The events of recorded calls (attempt/calls.ts): steps, inputs taken, checkpoints, patches, timers, children, waits. */
import type { HistoryEvent } from './events.js';
import { CHILD_STATUSES, EMPTY_PAYLOAD, failureOf, failureToProto, fromNum, type FromProtoTable, optPayload, payloadFromProto, payloadToProto, toNum, type ToProtoTable } from './codec-messages.js';

export type CallEventType =
  | 'StepCompleted'
  | 'InputsTaken'
  | 'Checkpointed'
  | 'PatchMarked'
  | 'TimerStarted'
  | 'ChildStarted'
  | 'ChildEnded'
  | 'WaitStarted'
  | 'WaitEnded';

export const CALL_TO_PROTO: ToProtoTable<CallEventType> = {
  StepCompleted: (e, eventId, timeMs, generation) => {
    const step: Record<string, unknown> = {
      turn: e.turn,
      attempt: e.attempt,
      seq: e.seq,
      name: e.name,
      durationMs: e.durationMs,
    };
    if (e.failure) step['failure'] = failureToProto(e.failure);
    else step['result'] = payloadToProto(e.result ?? EMPTY_PAYLOAD);
    if (e.limit !== undefined) Object.assign(step, { limit: e.limit, waitedMs: e.waitedMs ?? 0 });
    return { eventId, timeMs, generation, stepCompleted: step };
  },
  InputsTaken: (e, eventId, timeMs, generation) => ({ eventId, timeMs, generation, inputsTaken: { turn: e.turn, seq: e.seq, inputIds: e.inputIds } }),
  Checkpointed: (e, eventId, timeMs, generation) => ({ eventId, timeMs, generation, checkpointed: { turn: e.turn, seq: e.seq, data: payloadToProto(e.data) } }),
  PatchMarked: (e, eventId, timeMs, generation) => ({ eventId, timeMs, generation, patchMarked: { turn: e.turn, seq: e.seq, patchId: e.patchId, deprecated: e.deprecated } }),
  TimerStarted: (e, eventId, timeMs, generation) => ({ eventId, timeMs, generation, timerStarted: { turn: e.turn, seq: e.seq, durationMs: e.durationMs, fireAtMs: e.fireAt } }),
  ChildStarted: (e, eventId, timeMs, generation) => ({ eventId, timeMs, generation, childStarted: { turn: e.turn, seq: e.seq, childId: e.childId, workflow: e.workflow, detached: e.detached } }),
  ChildEnded: (e, eventId, timeMs, generation) => ({
    eventId, timeMs, generation,
    childEnded: {
      turn: e.turn, seq: e.seq, childId: e.childId, status: toNum(CHILD_STATUSES, e.status),
      output: optPayload(e.output), failure: e.failure ? failureToProto(e.failure) : null, reason: e.reason ?? '',
    },
  }),
  WaitStarted: (e, eventId, timeMs, generation) => ({
    eventId, timeMs, generation,
    waitStarted: { turn: e.turn, seq: e.seq, name: e.name, ...(e.timeoutMs === undefined ? {} : { timeoutMs: e.timeoutMs }), ...(e.deadline === undefined ? {} : { deadlineMs: e.deadline }) },
  }),
  WaitEnded: (e, eventId, timeMs, generation) => ({ eventId, timeMs, generation, waitEnded: { turn: e.turn, seq: e.seq, signalId: e.signalId, timedOut: e.timedOut } }),
};

export const CALL_FROM_PROTO: FromProtoTable<CallEventType> = {
  stepCompleted: (a, eventId, time, generation, at) => {
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
    if (a.limit) Object.assign(e, { limit: a.limit, waitedMs: a.waitedMs ?? 0 });
    return e;
  },
  inputsTaken: (a, eventId, time, generation) => ({ type: 'InputsTaken', eventId, time, generation, turn: a.turn, seq: a.seq, inputIds: a.inputIds }),
  checkpointed: (a, eventId, time, generation) => ({
    type: 'Checkpointed',
    eventId,
    time,
    generation,
    turn: a.turn,
    seq: a.seq,
    data: payloadFromProto(a.data) ?? EMPTY_PAYLOAD,
  }),
  patchMarked: (a, eventId, time, generation) => ({ type: 'PatchMarked', eventId, time, generation, turn: a.turn, seq: a.seq, patchId: a.patchId, deprecated: a.deprecated === true }),
  timerStarted: (a, eventId, time, generation) => ({ type: 'TimerStarted', eventId, time, generation, turn: a.turn, seq: a.seq, durationMs: a.durationMs, fireAt: a.fireAtMs }),
  childStarted: (a, eventId, time, generation) => ({ type: 'ChildStarted', eventId, time, generation, turn: a.turn, seq: a.seq, childId: a.childId, workflow: a.workflow, detached: a.detached === true }),
  childEnded: (a, eventId, time, generation, at) => {
    const e: HistoryEvent = { type: 'ChildEnded', eventId, time, generation, turn: a.turn, seq: a.seq, childId: a.childId, status: fromNum(CHILD_STATUSES, a.status, 'child status', at) };
    const output = payloadFromProto(a.output);
    if (output) e.output = output;
    if (a.failure) e.failure = failureOf(a.failure, at);
    if (a.reason) e.reason = a.reason;
    return e;
  },
  waitStarted: (a, eventId, time, generation) => {
    const e: HistoryEvent = { type: 'WaitStarted', eventId, time, generation, turn: a.turn, seq: a.seq, name: a.name };
    if (a.timeoutMs != null) e.timeoutMs = a.timeoutMs;
    if (a.deadlineMs != null) e.deadline = a.deadlineMs;
    return e;
  },
  waitEnded: (a, eventId, time, generation) => ({ type: 'WaitEnded', eventId, time, generation, turn: a.turn, seq: a.seq, signalId: a.signalId, timedOut: a.timedOut === true }),
};
