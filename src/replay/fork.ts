/**
 * Fork and rewind (pure): the history of a new task that is the original up to the end of one
 * of its turns, so a conversation can be retried from that point. `Engine.fork` and
 * `turnlog fork` write what this returns; the original is never touched. docs/history.md#forks.
 */
import { TurnlogError } from '../errors.js';
import { isTurnTerminal, type HistoryEvent } from '../history/events.js';
import { decodeState, encodeState } from '../history/state-codec.js';
import { fold } from './fold.js';

/** Where a fork comes from. */
export interface ForkOptions {
  /** The turn whose end the fork starts from (≥ 1; it must have ended). */
  atTurn: number;
  /** The new task's id. */
  newTaskId: string;
}

/**
 * The new task's events: the original's up to and including turn `atTurn`'s terminal event,
 * without the inputs still queued then and a task cancel still pending then (they belong to the
 * original's future), renumbered densely. `TaskCreated` records the origin (`forkedFrom`).
 * Throws TURNLOG_WRONG_KIND for a one-shot task, TURNLOG_TURN_NOT_ENDED for a turn that has not
 * ended (or does not exist, or a compaction dropped it).
 */
export function forkEvents(taskId: string, events: readonly HistoryEvent[], options: ForkOptions): HistoryEvent[] {
  const { atTurn, newTaskId } = options;
  const created = events[0];
  if (created?.type !== 'TaskCreated') throw new TurnlogError('TURNLOG_TASK_NOT_FOUND', `Task ${taskId} does not exist; nothing was forked.`);
  if (created.kind !== 'multi-turn') {
    throw new TurnlogError('TURNLOG_WRONG_KIND', `Task ${taskId} is one-shot: a fork continues a multi-turn conversation from a turn's end. Start a new task with the same input instead.`);
  }
  const end = Number.isInteger(atTurn) && atTurn >= 1 ? events.findIndex((e) => isTurnTerminal(e) && e.turn === atTurn) : -1;
  if (end < 0) {
    const ended = events.filter(isTurnTerminal).at(-1)?.turn ?? 0;
    // Turns a compaction dropped are kept only as their folded state: there is no end to fork at.
    const compacted = events[1]?.type === 'HistoryCompacted' ? events[1].turns : 0;
    const first = compacted + 1;
    const range = ended >= first ? `Pass --at-turn/atTurn from ${first} to ${ended}.` : `Pass --at-turn/atTurn ${first} or later once it has ended.`;
    const what = Number.isInteger(atTurn) && atTurn >= 1 && atTurn <= compacted
      ? `turn ${atTurn} was compacted away (turns 1..${compacted} are kept only as their folded state)`
      : `turn ${atTurn} has not ended (${ended >= first ? `turns ${first}..${ended} have` : 'no turn has'}${compacted > 0 ? `; turns 1..${compacted} were compacted away` : ''})`;
    throw new TurnlogError('TURNLOG_TURN_NOT_ENDED', `Task ${taskId}: ${what}; nothing was forked to ${newTaskId}. ${range}`);
  }
  const prefix = events.slice(0, end + 1);
  const at = fold(taskId, prefix);
  const queued = new Set(at.queue.map((q) => q.inputId));
  const pendingCancel = at.cancelRequested !== undefined;
  const out: HistoryEvent[] = [];
  for (const e of prefix) {
    if (e.type === 'InputQueued' && queued.has(e.inputId)) continue;
    if (pendingCancel && e.type === 'CancelRequested' && e.scope === 'task') continue;
    const copy = { ...e, eventId: out.length + 1 };
    // A compacted prefix: the next copied event follows it directly.
    if (copy.type === 'HistoryCompacted') {
      copy.throughEventId = copy.eventId;
      // Inputs queued (or a task cancel requested) before the cut live in the compacted state,
      // not as events: they belong to the original's future just the same.
      const inner = decodeState(copy.state);
      const queue = inner.queue.filter((q) => !queued.has(q.inputId));
      const cancel = pendingCancel && inner.cancelRequested?.scope === 'task';
      // Their ids go too: a send to the fork with one of them is a new input there.
      const dropped = copy.droppedInputIds?.filter((id) => !queued.has(id));
      if (dropped?.length) copy.droppedInputIds = dropped;
      else delete copy.droppedInputIds;
      if (queue.length !== inner.queue.length || cancel) {
        inner.queue = queue;
        // The last input the fork has: a dropped one was queued after every kept one (the queue
        // drains from its head); a kept input queued in the tail after the cut overrides this.
        if (inner.lastInputId !== undefined && queued.has(inner.lastInputId) && queue.length > 0) inner.lastInputId = queue[queue.length - 1]!.inputId;
        if (cancel) delete inner.cancelRequested;
        copy.state = encodeState(inner);
      }
    }
    if (copy.type === 'TaskCreated') copy.forkedFrom = { taskId, turn: atTurn, eventId: prefix[prefix.length - 1]!.eventId };
    out.push(copy);
  }
  return out;
}
