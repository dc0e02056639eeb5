/**
 * History mutations for replay tests (Temporal's test-replay mutates one field and expects a
 * determinism error). Each returns a new array; event ids stay dense.
 */
import { readFileSync } from 'node:fs';
import type { HistoryEvent, NewEvent } from '../../src/history/events.js';
import { parseHistoryFile } from '../../src/history/history-file.js';

export function loadEvents(path: string): HistoryEvent[] {
  return parseHistoryFile(readFileSync(path), path).tasks[0]!.events;
}

export function eventAt(events: readonly HistoryEvent[], eventId: number): HistoryEvent {
  const e = events[eventId - 1];
  if (!e || e.eventId !== eventId) throw new Error(`no event ${eventId}`);
  return e;
}

/** Replaces event `eventId` with `change(event)`. */
export function mutate(events: readonly HistoryEvent[], eventId: number, change: (e: HistoryEvent) => HistoryEvent): HistoryEvent[] {
  return events.map((e) => (e.eventId === eventId ? change(e) : e));
}

/** Removes event `eventId` and renumbers the ones after it. */
export function remove(events: readonly HistoryEvent[], eventId: number): HistoryEvent[] {
  return events.filter((e) => e.eventId !== eventId).map((e) => (e.eventId > eventId ? { ...e, eventId: e.eventId - 1 } : e));
}

/** Inserts `event` (its id is set) after event `afterEventId`, renumbering the ones after it. */
export function insertAfter(events: readonly HistoryEvent[], afterEventId: number, event: NewEvent): HistoryEvent[] {
  const out: HistoryEvent[] = [];
  for (const e of events) {
    if (e.eventId <= afterEventId) out.push(e);
    else out.push({ ...e, eventId: e.eventId + 1 });
    if (e.eventId === afterEventId) out.push({ ...event, eventId: afterEventId + 1 } as HistoryEvent);
  }
  return out;
}

/** Swaps the name and result of two StepCompleted events, keeping their ids and seqs. */
export function swapSteps(events: readonly HistoryEvent[], a: number, b: number): HistoryEvent[] {
  const ea = eventAt(events, a);
  const eb = eventAt(events, b);
  if (ea.type !== 'StepCompleted' || eb.type !== 'StepCompleted') throw new Error('swapSteps needs two StepCompleted events');
  const body = (e: typeof ea) => {
    const { name, result, failure } = e;
    return { name, ...(result ? { result } : {}), ...(failure ? { failure } : {}) };
  };
  const strip = (e: typeof ea) => {
    const { result: _r, failure: _f, ...rest } = e;
    return rest;
  };
  return mutate(mutate(events, a, () => ({ ...strip(ea), ...body(eb) })), b, () => ({ ...strip(eb), ...body(ea) }));
}
