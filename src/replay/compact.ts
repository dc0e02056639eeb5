/**
 * Compaction (pure): the `HistoryCompacted` event that replaces a history's events 2..N, where
 * N is the terminal event of the last turn to drop. The engine writes it through the store's
 * `compactHistory` (docs/history.md#compaction).
 */
import { isTurnTerminal, type HistoryCompacted, type HistoryEvent } from '../history/events.js';
import { encodeState } from '../history/state-codec.js';
import { fold } from './fold.js';

/**
 * The compaction of `events` (a whole history, as stored) that keeps the last `keepTurns` ended
 * turns, or undefined when fewer than `keepTurns` more turns than already compacted could go
 * (compaction runs every `keepTurns` turns, not after each).
 */
export function compaction(taskId: string, events: readonly HistoryEvent[], keepTurns: number): HistoryCompacted | undefined {
  const ends = events.filter(isTurnTerminal);
  const cutTurn = (ends.at(-1)?.turn ?? 0) - keepTurns;
  const prior = events[1]?.type === 'HistoryCompacted' ? events[1].turns : 0;
  if (cutTurn < 1 || cutTurn - prior < keepTurns) return undefined;
  const cut = ends.find((e) => e.turn === cutTurn);
  if (cut === undefined) return undefined;
  const k = events.indexOf(cut);
  const at = fold(taskId, events.slice(0, k + 1));
  const droppedInputIds = droppedInputs(events.slice(1, k + 1));
  return {
    type: 'HistoryCompacted',
    eventId: 2,
    time: cut.time,
    generation: at.highestGeneration,
    throughEventId: cut.eventId,
    state: encodeState(at),
    turns: cutTurn,
    droppedEvents: cut.eventId - 1,
    ...(droppedInputIds.length > 0 ? { droppedInputIds } : {}),
  };
}

/**
 * The ids of the inputs queued in `dropped` (events 2..cut), with those an earlier compaction
 * (`dropped[0]`) recorded: an idempotent send must still find them (docs/history.md#compaction).
 */
function droppedInputs(dropped: readonly HistoryEvent[]): string[] {
  const ids = new Set<string>();
  for (const e of dropped) {
    if (e.type === 'InputQueued') ids.add(e.inputId);
    else if (e.type === 'HistoryCompacted') for (const id of e.droppedInputIds ?? []) ids.add(id);
  }
  return [...ids];
}
