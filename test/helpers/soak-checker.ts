/**
 * The soak test's checker (test/runtime/postgres-soak.test.ts): what must hold of every history
 * after engines were killed, turns cancelled and inputs sent through any engine, and of the step
 * bodies that ran (logged by the engine processes). Returns the problems found, each naming the
 * task and the event; empty when the history is sound.
 */
import type { HistoryEvent } from '../../src/history/events.js';
import { isTurnTerminal } from '../../src/history/events.js';
import { wellFormedEvent } from '../../src/history/well-formed.js';
import { fold } from '../../src/replay/index.js';

export interface SoakInputs {
  /** Inputs whose send (or start) returned: each must be queued exactly once. */
  accepted: readonly string[];
  /** Inputs whose send's answer was lost (the engine was killed): queued at most once. */
  uncertain: readonly string[];
  /** Check the step runs given (they were logged for this task). */
  checkRuns?: boolean;
}

/** A step body that ran (logged before it ran): its turn, name and the attempt that ran it. */
export interface SoakStepRun {
  turn: number;
  name: string;
  attempt: number;
}

export function checkSoakHistory(taskId: string, events: readonly HistoryEvent[], inputs: SoakInputs, runs: readonly SoakStepRun[] = []): string[] {
  const problems: string[] = [];
  const at = (e: HistoryEvent | undefined, what: string) => problems.push(`${taskId}${e ? ` event ${e.eventId} (${e.type})` : ''}: ${what}`);

  // Well-formed: every event on its own, then the whole history folds (dense ids, order rules).
  for (const e of events) {
    try {
      wellFormedEvent(e, taskId);
    } catch (err) {
      at(e, `not well-formed: ${(err as Error).message}`);
    }
  }
  let state: ReturnType<typeof fold> | undefined;
  try {
    state = fold(taskId, events);
  } catch (err) {
    at(undefined, `does not fold: ${(err as Error).message}`);
  }

  // Turns: numbered 1..T, attempts 1..k, exactly one terminal event each, after its start.
  const attempts = new Map<number, number[]>();
  const terminals = new Map<number, HistoryEvent[]>();
  for (const e of events) {
    if (e.type === 'TurnStarted') attempts.set(e.turn, [...(attempts.get(e.turn) ?? []), e.attempt]);
    if (isTurnTerminal(e)) {
      if (!attempts.has(e.turn)) at(e, `ends turn ${e.turn}, which never started`);
      terminals.set(e.turn, [...(terminals.get(e.turn) ?? []), e]);
    }
  }
  const turns = [...attempts.keys()];
  if (turns.some((t, i) => t !== i + 1)) at(undefined, `turns ${turns.join(',')} are not 1..${turns.length}`);
  for (const [turn, list] of attempts) {
    if (list.some((a, i) => a !== i + 1)) at(undefined, `turn ${turn} attempts ${list.join(',')} are not 1..${list.length}`);
    const ends = terminals.get(turn) ?? [];
    const open = state?.openTurn?.turn === turn;
    if (ends.length !== (open ? 0 : 1)) at(ends[1], `turn ${turn} has ${ends.length} terminal events${open ? ' and is still open' : ''}`);
  }

  // Steps: each (turn, seq) recorded once, whatever the attempts (a re-run replays, never re-records).
  const steps = new Set<string>();
  for (const e of events) {
    if (e.type !== 'StepCompleted') continue;
    const key = `${e.turn}/${e.seq}`;
    if (steps.has(key)) at(e, `step ${key} recorded twice`);
    steps.add(key);
  }

  // Step bodies: a recorded step ran in the attempt that recorded it, and never in a later one
  // (a later attempt replays the record). Earlier attempts may have run it and died unrecorded.
  if (inputs.checkRuns) {
    for (const e of events) {
      if (e.type !== 'StepCompleted') continue;
      const same = runs.filter((r) => r.turn === e.turn && r.name === e.name);
      if (!same.some((r) => r.attempt === e.attempt)) at(e, `step ${e.name} of turn ${e.turn} was recorded by attempt ${e.attempt}, whose run of it was never logged`);
      for (const r of same) if (r.attempt > e.attempt) at(e, `step ${e.name} of turn ${e.turn}, recorded by attempt ${e.attempt}, ran again in attempt ${r.attempt}`);
    }
  }

  // Inputs: each accepted one queued exactly once, nothing unknown queued, each taken by at most one turn.
  const queued = new Map<string, number>();
  for (const e of events) if (e.type === 'InputQueued') queued.set(e.inputId, (queued.get(e.inputId) ?? 0) + 1);
  for (const id of inputs.accepted) if (queued.get(id) !== 1) at(undefined, `accepted input ${id} is queued ${queued.get(id) ?? 0} times`);
  const known = new Set([...inputs.accepted, ...inputs.uncertain]);
  for (const [id, n] of queued) {
    if (!known.has(id)) at(undefined, `input ${id} is queued but was never sent`);
    else if (n > 1) at(undefined, `input ${id} is queued ${n} times`);
  }
  const takenBy = new Map<string, Set<number>>();
  const take = (id: string, turn: number) => takenBy.set(id, (takenBy.get(id) ?? new Set()).add(turn));
  for (const e of events) {
    if (e.type === 'TurnStarted') for (const id of e.inputIds) take(id, e.turn);
    if (e.type === 'InputsTaken') for (const id of e.inputIds) take(id, e.turn);
  }
  for (const [id, set] of takenBy) if (set.size > 1) at(undefined, `input ${id} ran in turns ${[...set].join(',')}`);
  // Nothing left behind: a task that is not completed ends with an empty queue and no open turn.
  if (state && state.status !== 'completed') {
    if (state.queue.length > 0) at(undefined, `${state.queue.length} inputs still queued (${state.queue.map((q) => q.inputId).join(',')})`);
    if (state.openTurn) at(undefined, `turn ${state.openTurn.turn} still open`);
  }
  return problems;
}
