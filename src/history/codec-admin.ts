/** The operator and maintenance events: operator actions, compaction, state migrations. */
import { HistoryFormatError } from '../errors.js';
import { HISTORY_FORMAT_VERSION, type HistoryEvent, type OperatorActionKind } from './events.js';
import { asBytes, deltaFromProto, deltaToProto, type FromProtoTable, optPayload, type Origin, payloadFromProto, type ToProtoTable } from './codec-messages.js';

export type AdminEventType =
  | 'OperatorAction'
  | 'HistoryCompacted'
  | 'StateMigrated';

const OPERATOR_ACTIONS: readonly OperatorActionKind[] = ['cancel-task', 'cancel-turn', 'withdraw', 'resend', 'resume'];

function operatorActionKind(s: string, at: Origin): OperatorActionKind {
  if ((OPERATOR_ACTIONS as readonly string[]).includes(s)) return s as OperatorActionKind;
  throw new HistoryFormatError(at.taskId, at.eventId, HISTORY_FORMAT_VERSION, `unknown operator action ${JSON.stringify(s)}`);
}

export const ADMIN_TO_PROTO: ToProtoTable<AdminEventType> = {
  OperatorAction: (e, eventId, timeMs, generation) => ({
    eventId, timeMs, generation,
    operatorAction: { action: e.action, by: e.by, reason: e.reason, turn: e.turn, inputId: e.inputId, newInputId: e.newInputId },
  }),
  HistoryCompacted: (e, eventId, timeMs, generation) => ({
    eventId, timeMs, generation,
    historyCompacted: { throughEventId: e.throughEventId, state: e.state, turns: e.turns, droppedEvents: e.droppedEvents, droppedInputIds: e.droppedInputIds ?? [] },
  }),
  StateMigrated: (e, eventId, timeMs, generation) => ({
    eventId, timeMs, generation,
    stateMigrated: { fromVersion: e.fromVersion, toVersion: e.toVersion, state: optPayload(e.state), stateDelta: deltaToProto(e.stateDelta) },
  }),
};

export const ADMIN_FROM_PROTO: FromProtoTable<AdminEventType> = {
  operatorAction: (a, eventId, time, generation, at) => ({
    type: 'OperatorAction',
    eventId,
    time,
    generation,
    action: operatorActionKind(a.action, at),
    by: a.by,
    reason: a.reason,
    turn: a.turn,
    inputId: a.inputId,
    newInputId: a.newInputId,
  }),
  historyCompacted: (a, eventId, time, generation) => ({
    type: 'HistoryCompacted',
    eventId,
    time,
    generation,
    throughEventId: a.throughEventId,
    state: asBytes(a.state),
    turns: a.turns,
    droppedEvents: a.droppedEvents,
    ...(a.droppedInputIds?.length ? { droppedInputIds: [...a.droppedInputIds] } : {}),
  }),
  stateMigrated: (a, eventId, time, generation) => {
    const e: HistoryEvent = { type: 'StateMigrated', eventId, time, generation, fromVersion: a.fromVersion, toVersion: a.toVersion };
    const state = payloadFromProto(a.state);
    const stateDelta = deltaFromProto(a.stateDelta);
    if (state) e.state = state;
    if (stateDelta) e.stateDelta = stateDelta;
    return e;
  },
};
