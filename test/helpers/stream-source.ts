// A StreamHub source for the hub's unit tests: a history kept in an array, payloads passed
// through as they are, real timers. Each test overrides what it needs (reads counted, a store
// another engine writes, a poll that never fires).
import type { HistoryEvent } from '../../src/history/events.js';
import type { StreamSource } from '../../src/stream/hub.js';

/** A source over `events` (read from `from` on): this engine writes the task, real timers. */
export function stubSource(events: HistoryEvent[] = [], overrides: Partial<StreamSource> = {}): StreamSource {
  return {
    readEvents: async (_taskId, from) => events.filter((e) => e.eventId >= from),
    writesHere: () => true,
    decoder: { value: (p) => p, failure: (f) => f, chunk: (p) => p },
    setTimer: (fn, ms) => {
      const t = setTimeout(fn, ms);
      return { cancel: () => clearTimeout(t) };
    },
    ...overrides,
  };
}

/** A StepCompleted event whose id, seq and time are `eventId`. */
export const stepEvent = (eventId: number): HistoryEvent =>
  ({ type: 'StepCompleted', eventId, generation: 1, time: eventId, turn: 1, seq: eventId, name: `s${eventId}` }) as HistoryEvent;

/** A TaskCompleted (succeeded) event at `eventId`. */
export const completedEvent = (eventId: number): HistoryEvent =>
  ({ type: 'TaskCompleted', eventId, generation: 1, time: eventId, outcome: 'succeeded' }) as unknown as HistoryEvent;
