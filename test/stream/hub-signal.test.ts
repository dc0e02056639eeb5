// The stream hub's abort signal: a reader ends when its signal aborts, also when the abort comes
// while the reader is reading (then finds nothing new and would go back to waiting).
import { describe, expect, it } from 'vitest';
import { StreamHub } from '../../src/stream/hub.js';
import { stubSource } from '../helpers/stream-source.js';
import type { HistoryEvent } from '../../src/history/events.js';

describe('StreamHub read and its signal', () => {
  it('an abort while the reader reads the store (nothing new comes back) ends it at once, not at the next wake or poll', async () => {
    let reads = 0;
    let answer!: (events: HistoryEvent[]) => void;
    const src = stubSource([], {
      // The first read answers at once (an empty task); the second waits for the test.
      readEvents: () => (reads++ === 0 ? Promise.resolve([]) : new Promise<HistoryEvent[]>((r) => (answer = r))),
      // Another engine writes the task: every read goes to the store, and a poll timer backs the wait.
      writesHere: () => false,
      // A poll that never fires: only a wake or the signal can end a wait.
      setTimer: () => ({ cancel: () => undefined }),
    });
    const hub = new StreamHub(src);
    const stop = new AbortController();
    const reader = hub.read('t', { signal: stop.signal });
    let settled: IteratorResult<unknown> | undefined;
    const next = reader.next().then((r) => (settled = r));
    await new Promise((r) => setImmediate(r));
    expect(reads).toBe(1); // read the (empty) task, now waiting
    // Live output after an event the reader has not read yet: a wake, and nothing to yield.
    hub.output('t', 5, 1, 1, { kind: 'step-started', seq: 1, name: 's' }, 0);
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setImmediate(r));
    expect(reads).toBe(2); // woken: reading the store again
    stop.abort();
    answer([]);
    for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
    expect(settled).toEqual({ done: true, value: undefined });
    await next;
  });
});
