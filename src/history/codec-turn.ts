/** The turn and attempt events: a turn starts, ends (one terminal event), times out or loses its worker. */
import type { HistoryEvent } from './events.js';
import { CAUSES, deltaFromProto, deltaToProto, ENTRY_MODES, EXECUTORS, failureOf, failureToProto, fromNum, type FromProto, type FromProtoTable, optPayload, payloadFromProto, toNum, type ToProtoTable } from './codec-messages.js';

export type TurnEventType =
  | 'TurnStarted'
  | 'TurnCompleted'
  | 'TurnFailed'
  | 'TurnSuspended'
  | 'TurnCancelled'
  | 'TurnTimedOut'
  | 'TurnExitedForRecovery'
  | 'TimeoutCancelRequested'
  | 'WorkerKilled'
  | 'WorkerCrashed';

export const TURN_TO_PROTO: ToProtoTable<TurnEventType> = {
  TurnStarted: (e, eventId, timeMs, generation) => ({
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
      workflowVersion: e.workflowVersion,
    },
  }),
  TurnCompleted: (e, eventId, timeMs, generation) => ({
    eventId, timeMs, generation,
    turnCompleted: { turn: e.turn, output: optPayload(e.output), state: optPayload(e.state), stateDelta: deltaToProto(e.stateDelta) },
  }),
  TurnFailed: (e, eventId, timeMs, generation) => ({ eventId, timeMs, generation, turnFailed: { turn: e.turn, failure: failureToProto(e.failure) } }),
  TurnSuspended: (e, eventId, timeMs, generation) => ({
    eventId, timeMs, generation,
    turnSuspended: {
      turn: e.turn,
      reason: e.reason,
      output: optPayload(e.output),
      state: optPayload(e.state),
      stateDelta: deltaToProto(e.stateDelta),
    },
  }),
  TurnCancelled: (e, eventId, timeMs, generation) => ({ eventId, timeMs, generation, turnCancelled: { turn: e.turn, reason: e.reason } }),
  TurnTimedOut: (e, eventId, timeMs, generation) => ({ eventId, timeMs, generation, turnTimedOut: { turn: e.turn, cause: toNum(CAUSES, e.cause) } }),
  TurnExitedForRecovery: (e, eventId, timeMs, generation) => ({ eventId, timeMs, generation, turnExitedForRecovery: { turn: e.turn, attempt: e.attempt, reason: e.reason } }),
  TimeoutCancelRequested: (e, eventId, timeMs, generation) => ({ eventId, timeMs, generation, timeoutCancelRequested: { turn: e.turn, atMs: e.at, graceUntilMs: e.graceUntil } }),
  WorkerKilled: (e, eventId, timeMs, generation) => ({ eventId, timeMs, generation, workerKilled: { turn: e.turn, pid: e.pid, signal: e.signal, reason: e.reason } }),
  WorkerCrashed: (e, eventId, timeMs, generation) => ({
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
  }),
};

export const TURN_FROM_PROTO: FromProtoTable<TurnEventType> = {
  turnStarted: (a, eventId, time, generation, at) => {
    const e: HistoryEvent = {
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
    if (a.workflowVersion) e.workflowVersion = a.workflowVersion;
    return e;
  },
  turnCompleted: (a, eventId, time, generation) => {
    const e: HistoryEvent = { type: 'TurnCompleted', eventId, time, generation, turn: a.turn };
    return withTurnEnd(e, a);
  },
  turnFailed: (a, eventId, time, generation, at) => ({ type: 'TurnFailed', eventId, time, generation, turn: a.turn, failure: failureOf(a.failure, at) }),
  turnSuspended: (a, eventId, time, generation) => {
    const e: HistoryEvent = { type: 'TurnSuspended', eventId, time, generation, turn: a.turn, reason: a.reason };
    return withTurnEnd(e, a);
  },
  turnCancelled: (a, eventId, time, generation) => ({ type: 'TurnCancelled', eventId, time, generation, turn: a.turn, reason: a.reason }),
  turnTimedOut: (a, eventId, time, generation, at) => ({
    type: 'TurnTimedOut',
    eventId,
    time,
    generation,
    turn: a.turn,
    cause: fromNum(CAUSES, a.cause, 'timeout cause', at),
  }),
  turnExitedForRecovery: (a, eventId, time, generation) => ({
    type: 'TurnExitedForRecovery',
    eventId,
    time,
    generation,
    turn: a.turn,
    attempt: a.attempt,
    reason: a.reason,
  }),
  timeoutCancelRequested: (a, eventId, time, generation) => ({
    type: 'TimeoutCancelRequested',
    eventId,
    time,
    generation,
    turn: a.turn,
    at: a.atMs,
    graceUntil: a.graceUntilMs,
  }),
  workerKilled: (a, eventId, time, generation) => ({
    type: 'WorkerKilled',
    eventId,
    time,
    generation,
    turn: a.turn,
    pid: a.pid,
    signal: a.signal,
    reason: a.reason,
  }),
  workerCrashed: (a, eventId, time, generation) => ({
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
  }),
};

/** The output, state and state delta that a completed or suspended turn carries, each when present. */
function withTurnEnd(e: Extract<HistoryEvent, { type: 'TurnCompleted' | 'TurnSuspended' }>, a: Parameters<FromProto>[0]): HistoryEvent {
  const output = payloadFromProto(a.output);
  const state = payloadFromProto(a.state);
  const stateDelta = deltaFromProto(a.stateDelta);
  if (output) e.output = output;
  if (state) e.state = state;
  if (stateDelta) e.stateDelta = stateDelta;
  return e;
}
