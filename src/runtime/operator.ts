/**
 * Operator actions (docs/cli.md#operator-actions), the pure part: which inputs a failed turn
 * took, and the `OperatorAction` draft that records who acted. The engine carries them out under
 * the task's lock, in the same append as the action's effect.
 */
import { TurnlogError, invalidArgument } from '../errors.js';
import type { HistoryEvent, InputQueued, OperatorActionKind } from '../history/events.js';
import { decodeState } from '../history/state-codec.js';
import type { Draft } from './drafts.js';

/** Arguments every action takes: who, and an optional reason. */
export interface ActionArgs {
  taskId: string;
  by: string;
  reason?: string;
}

export function operatorDraft(kind: OperatorActionKind, args: ActionArgs, target: { turn?: number; inputId?: string; newInputId?: string } = {}): Draft {
  return {
    type: 'OperatorAction',
    action: kind,
    by: args.by,
    reason: args.reason ?? '',
    turn: target.turn ?? 0,
    inputId: target.inputId ?? '',
    newInputId: target.newInputId ?? '',
  };
}

/** The turn an action re-sends, with the inputs it took, as stored. */
export interface EndedTurnInputs {
  turn: number;
  terminal: 'TurnFailed' | 'TurnTimedOut';
  inputs: InputQueued[];
  /** The failure's code for a failed turn (TURNLOG_NON_DETERMINISM after a code change). */
  failureCode?: string;
}

/**
 * The inputs of `turn` (default: the last ended turn), which must have ended failed or timed
 * out: re-sending a completed turn's input would run it twice on purpose, which is `send`'s job.
 */
export function failedTurnInputs(taskId: string, events: readonly HistoryEvent[], turn?: number): EndedTurnInputs {
  const queued = new Map<string, InputQueued>();
  const taken = new Map<number, string[]>();
  const ended = new Map<number, HistoryEvent>();
  for (const e of events) {
    if (e.type === 'InputQueued') queued.set(e.inputId, e);
    else if (e.type === 'HistoryCompacted') {
      // Inputs still queued at the cut live in its state: a kept turn may have taken one.
      for (const q of decodeState(e.state).queue) {
        queued.set(q.inputId, { type: 'InputQueued', eventId: q.eventId, time: q.time, generation: e.generation, inputId: q.inputId, input: q.input, steering: q.steering });
      }
    }
    else if (e.type === 'TurnStarted' && e.attempt === 1) taken.set(e.turn, [...e.inputIds]);
    else if (e.type === 'InputsTaken') taken.get(e.turn)?.push(...e.inputIds);
    else if (e.type === 'TurnCompleted' || e.type === 'TurnFailed' || e.type === 'TurnSuspended' || e.type === 'TurnCancelled' || e.type === 'TurnTimedOut') ended.set(e.turn, e);
  }
  const which = turn ?? Math.max(0, ...ended.keys());
  const end = ended.get(which);
  if (!end) {
    throw new TurnlogError(
      'TURNLOG_INVALID_ARGUMENT',
      which === 0 ? `Task ${taskId} has no ended turn to re-send.` : `Task ${taskId}, turn ${which} has not ended (or does not exist). Re-send only a turn that failed or timed out; \`turnlog show ${taskId}\` lists the turns.`,
    );
  }
  if (end.type !== 'TurnFailed' && end.type !== 'TurnTimedOut') {
    throw invalidArgument(`Task ${taskId}, turn ${which} ended with ${end.type}, not a failure: only a failed or timed-out turn's input is re-sent. To run it again anyway, send the input yourself.`);
  }
  const inputs = (taken.get(which) ?? []).map((id) => queued.get(id)).filter((q): q is InputQueued => q !== undefined);
  if (inputs.length === 0) throw invalidArgument(`Task ${taskId}, turn ${which} took no input, so there is nothing to re-send.`);
  const out: EndedTurnInputs = { turn: which, terminal: end.type, inputs };
  if (end.type === 'TurnFailed' && end.failure.code) out.failureCode = end.failure.code;
  return out;
}
