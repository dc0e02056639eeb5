// The task cache loads a stored history FOLD_PAGE events at a time and folds each page as it
// comes (decoded events die young: bench/replay), and falls back to one whole read when the
// history moved between two pages (a compaction cut).
import { afterEach, expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import type { ReadOptions } from '../../src/store/history-store.js';
import { silentLogger } from '../../src/logger.js';
import { FOLD_PAGE, fold } from '../../src/replay/fold.js';
import { Engine } from '../../src/runtime/engine.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { longHistory } from '../helpers/histories.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A memory store that records every read and can move the history under the second page. */
class ReadLog extends MemoryHistoryStore {
  reads: { from: number; limit: number | undefined; got: number }[] = [];
  moveAtRead = -1;
  override async readEvents(taskId: string, options: ReadOptions = {}): Promise<HistoryEvent[]> {
    let events = await super.readEvents(taskId, options);
    // As if a compaction cut the event the read expected: the page starts one later.
    if (this.reads.length === this.moveAtRead) events = events.slice(1);
    this.reads.push({ from: options.fromEventId ?? 1, limit: options.limit, got: events.length });
    return events;
  }
}

async function storeWith(events: HistoryEvent[]): Promise<ReadLog> {
  const store = new ReadLog();
  await store.open();
  await store.append('t', events, { expectedLastEventId: 0, generation: events[0]!.generation });
  return store;
}

async function describe(store: ReadLog) {
  const engine = await Engine.open({ store, workflows: [], logger: silentLogger, scanIntervalMs: 0 });
  cleanups.push(() => engine.shutdown({ graceMs: 0 }));
  return engine.describe('t');
}

it('a history longer than a page (no snapshot) is read and folded a page at a time, to the state of the whole', async () => {
  const events = longHistory('t', 2 * FOLD_PAGE + 100);
  const store = await storeWith(events);
  const d = await describe(store);
  const whole = fold('t', events);
  expect(d.lastEventId).toBe(whole.lastEventId);
  expect(d.status).toBe('suspended');
  expect(d.turn).toBe(whole.turn);
  const loads = store.reads.filter((r) => r.limit !== undefined);
  expect(loads.map((r) => r.from)).toEqual([1, FOLD_PAGE + 1, 2 * FOLD_PAGE + 1]);
  expect(loads.every((r) => r.limit === FOLD_PAGE && r.got <= FOLD_PAGE)).toBe(true);
  expect(store.reads.some((r) => r.limit === undefined)).toBe(false);
});

it('a history that moved between two pages is folded again from one whole read', async () => {
  const events = longHistory('t', FOLD_PAGE + 100);
  const store = await storeWith(events);
  store.moveAtRead = 1; // the second page starts one event later than expected
  const d = await describe(store);
  expect(d.lastEventId).toBe(fold('t', events).lastEventId);
  expect(store.reads.map((r) => [r.from, r.limit])).toEqual([
    [1, FOLD_PAGE],
    [FOLD_PAGE + 1, FOLD_PAGE],
    [1, undefined],
  ]);
});
