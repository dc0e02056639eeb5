/** The task, input, signal and lease events: what happens to a task between and around its turns. */
import type { HistoryEvent } from './events.js';
import { EMPTY_PAYLOAD, fromNum, type FromProtoTable, KINDS, OUTCOMES, payloadFromProto, payloadToProto, policyFromProto, policyToProto, SCOPES, toNum, type ToProtoTable, traceOf } from './codec-messages.js';

export type TaskEventType =
  | 'TaskCreated'
  | 'InputQueued'
  | 'InputWithdrawn'
  | 'SignalReceived'
  | 'CancelRequested'
  | 'LeaseClaimed'
  | 'TaskCompleted';

export const TASK_TO_PROTO: ToProtoTable<TaskEventType> = {
  TaskCreated: (e, eventId, timeMs, generation) => ({
    eventId, timeMs, generation,
    taskCreated: {
      workflow: e.workflow,
      kind: toNum(KINDS, e.kind),
      policy: policyToProto(e.policy),
      formatVersion: e.formatVersion,
      forkedFrom: e.forkedFrom ? { taskId: e.forkedFrom.taskId, turn: e.forkedFrom.turn, eventId: e.forkedFrom.eventId } : null,
      parent: e.parent ? { taskId: e.parent.taskId, turn: e.parent.turn, seq: e.parent.seq, detached: e.parent.detached } : null,
    },
  }),
  InputQueued: (e, eventId, timeMs, generation) => ({
    eventId, timeMs, generation,
    inputQueued: {
      inputId: e.inputId,
      input: payloadToProto(e.input),
      steering: e.steering,
      ...(e.deliverAt === undefined ? {} : { deliverAtMs: e.deliverAt }),
      ...(e.trace === undefined ? {} : { traceparent: e.trace.traceparent, tracestate: e.trace.tracestate ?? '' }),
    },
  }),
  InputWithdrawn: (e, eventId, timeMs, generation) => ({ eventId, timeMs, generation, inputWithdrawn: { inputId: e.inputId, reason: e.reason } }),
  SignalReceived: (e, eventId, timeMs, generation) => ({ eventId, timeMs, generation, signalReceived: { signalId: e.signalId, name: e.name, value: payloadToProto(e.value) } }),
  CancelRequested: (e, eventId, timeMs, generation) => ({ eventId, timeMs, generation, cancelRequested: { scope: toNum(SCOPES, e.scope), turn: e.turn, reason: e.reason } }),
  LeaseClaimed: (e, eventId, timeMs, generation) => ({
    eventId, timeMs, generation,
    leaseClaimed: {
      owner: e.owner,
      instance: e.instance,
      generation: e.generation,
      previousGeneration: e.previousGeneration,
      reason: e.reason,
      expiresAtMs: e.expiresAt,
    },
  }),
  TaskCompleted: (e, eventId, timeMs, generation) => ({ eventId, timeMs, generation, taskCompleted: { outcome: toNum(OUTCOMES, e.outcome) } }),
};

export const TASK_FROM_PROTO: FromProtoTable<TaskEventType> = {
  taskCreated: (a, eventId, time, generation, at) => {
    const e: HistoryEvent = {
      type: 'TaskCreated',
      eventId,
      time,
      generation,
      workflow: a.workflow,
      kind: fromNum(KINDS, a.kind, 'workflow kind', at),
      policy: policyFromProto(a.policy, at),
      formatVersion: a.formatVersion,
    };
    const f = a.forkedFrom;
    if (f) e.forkedFrom = { taskId: f.taskId ?? '', turn: f.turn ?? 0, eventId: f.eventId ?? 0 };
    const p = a.parent;
    if (p) e.parent = { taskId: p.taskId ?? '', turn: p.turn ?? 0, seq: p.seq ?? 0, detached: p.detached === true };
    return e;
  },
  inputQueued: (a, eventId, time, generation) => ({
    type: 'InputQueued',
    eventId,
    time,
    generation,
    inputId: a.inputId,
    input: payloadFromProto(a.input) ?? EMPTY_PAYLOAD,
    steering: a.steering,
    ...(a.deliverAtMs ? { deliverAt: a.deliverAtMs } : {}),
    ...(a.traceparent ? { trace: traceOf(a.traceparent, a.tracestate) } : {}),
  }),
  inputWithdrawn: (a, eventId, time, generation) => ({ type: 'InputWithdrawn', eventId, time, generation, inputId: a.inputId, reason: a.reason }),
  signalReceived: (a, eventId, time, generation) => ({ type: 'SignalReceived', eventId, time, generation, signalId: a.signalId, name: a.name, value: payloadFromProto(a.value) ?? EMPTY_PAYLOAD }),
  cancelRequested: (a, eventId, time, generation, at) => ({
    type: 'CancelRequested',
    eventId,
    time,
    generation,
    scope: fromNum(SCOPES, a.scope, 'cancel scope', at),
    turn: a.turn,
    reason: a.reason,
  }),
  leaseClaimed: (a, eventId, time, generation) => ({
    type: 'LeaseClaimed',
    eventId,
    time,
    generation,
    owner: a.owner,
    instance: a.instance,
    previousGeneration: a.previousGeneration,
    reason: a.reason,
    expiresAt: a.expiresAtMs,
  }),
  taskCompleted: (a, eventId, time, generation, at) => ({
    type: 'TaskCompleted',
    eventId,
    time,
    generation,
    outcome: fromNum(OUTCOMES, a.outcome, 'task outcome', at),
  }),
};
