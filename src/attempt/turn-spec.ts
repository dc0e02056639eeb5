/**
 * The TurnSpec for a task's open turn: what an attempt is given. One function, used by the
 * engine to start attempts and by replay testing to re-execute recorded ones.
 */
import type { FailureInfo, Payload } from '../history/events.js';
import type { RecordedCall, TaskState } from '../history/state.js';
import { callSpec } from './calls.js';
import type { TurnSpec } from './host.js';

/**
 * Builds the spec of `s.openTurn` as of now: its input (the first of the turn's inputs, or
 * `emptyInput()`, called only for a turn without one), the state before the turn, every recorded call, taken inputs, the latest
 * checkpoint and the cancel state. `codec` undoes payload codecs (engine side only).
 */
export function turnSpecFor(s: TaskState, emptyInput: () => Payload, codec?: SpecDecoder): TurnSpec {
  const ot = s.openTurn;
  if (!ot) throw new Error(`turnSpecFor: task ${s.taskId} has no open turn`);
  const decode = codec?.decode;
  const p = decode ?? ((x: Payload) => x);
  const first = ot.inputs[0];
  const spec: TurnSpec = {
    taskId: s.taskId,
    workflow: s.workflow,
    kind: s.kind,
    turn: ot.turn,
    attempt: ot.attempt,
    entryMode: ot.entryMode,
    steered: ot.steered,
    inputId: first?.inputId ?? '',
    input: first ? p(first.input) : emptyInput(),
    calls: codec ? ot.calls.map((c) => decodeCall(c, codec)) : ot.calls,
    taken: decode ? ot.taken.map((q) => ({ ...q, input: decode(q.input) })) : ot.taken,
    turnStartedAt: ot.turnStartedAt,
    deadline: ot.deadline,
    recoveryCount: s.recoveryCount,
    stepRetry: s.policy.stepRetry,
    timeoutExceeded: ot.marker !== undefined,
    cancelRequested: ot.cancelRequested !== undefined,
  };
  if (s.state) spec.state = p(s.state);
  if (ot.checkpoint) spec.checkpoint = p(ot.checkpoint);
  return spec;
}

/** Undoes payload codecs: payloads, and failures (details, encoded message and stack). */
export interface SpecDecoder {
  decode(p: Payload): Payload;
  decodeFailure(f: FailureInfo): FailureInfo;
}

function decodeCall(c: RecordedCall, codec: SpecDecoder): RecordedCall {
  return callSpec(c.kind).decoded(c as never, codec);
}
