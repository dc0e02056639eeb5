// A store with readTaskStart (PostgreSQL) serves a task's first load in one read: snapshot, the
// first page after it and the lease. The task cache uses that page only where its fold starts
// (the snapshot decoded), re-reads the lease when more pages followed, and falls back to the three
// reads when the read fails.
import { afterEach, expect, it } from 'vitest';
import type { HistoryEvent, Lease } from '../../src/history/events.js';
import { encodeState } from '../../src/history/state-codec.js';
import type { ReadOptions, StoredSnapshot, TaskStart } from '../../src/store/history-store.js';
import { silentLogger } from '../../src/logger.js';
import { FOLD_PAGE, fold } from '../../src/replay/fold.js';
import { Engine } from '../../src/runtime/engine.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { longHistory } from '../helpers/histories.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A memory store with readTaskStart made of the three reads, logging every read. */
class StartLog extends MemoryHistoryStore {
  log: string[] = [];
  failStart = false;
  override async readEvents(taskId: string, options: ReadOptions = {}): Promise<HistoryEvent[]> {
    this.log.push(`events ${options.fromEventId ?? 1}`);
    return super.readEvents(taskId, options);
  }
  override async getSnapshot(taskId: string): Promise<StoredSnapshot | undefined> {
    this.log.push('snapshot');
    return super.getSnapshot(taskId);
  }
  override async getLease(taskId: string): Promise<Lease | undefined> {
    this.log.push('lease');
    return super.getLease(taskId);
  }
  async readTaskStart(taskId: string, limit: number): Promise<TaskStart> {
    this.log.push(`start ${limit}`);
    if (this.failStart) throw new Error('connection lost');
    const snapshot = await super.getSnapshot(taskId);
    const events = await super.readEvents(taskId, { fromEventId: (snapshot?.eventId ?? 0) + 1, limit });
    return { snapshot, events, lease: await super.getLease(taskId) };
  }
}

async function storeWith(events: HistoryEvent[], snapshotAt?: number, data?: Uint8Array): Promise<StartLog> {
  const store = new StartLog();
  await store.open();
  await store.append('t', events, { expectedLastEventId: 0, generation: 1 });
  await store.claimLease('t', { owner: 'old', instance: 'dead', durationMs: 0, now: 0 });
  if (snapshotAt !== undefined) {
    await store.putSnapshot('t', { eventId: snapshotAt, data: data ?? encodeState(fold('t', events.slice(0, snapshotAt))) });
  }
  store.log = [];
  return store;
}

async function describe(store: StartLog) {
  const engine = await Engine.open({ store, workflows: [], logger: silentLogger, scanIntervalMs: 0 });
  cleanups.push(() => engine.shutdown({ graceMs: 0 }));
  return engine.describe('t');
}

it('a history within a page of its snapshot loads in the one read', async () => {
  const events = longHistory('t', 200);
  const store = await storeWith(events, 100);
  const d = await describe(store);
  expect(store.log).toEqual([`start ${FOLD_PAGE}`]);
  expect(d.lastEventId).toBe(events.length);
  expect(d.turn).toBe(fold('t', events).turn);
  expect(d.status).toBe('suspended');
});

it('more pages after the first: read on, and the lease read again after them', async () => {
  const events = longHistory('t', FOLD_PAGE + 150);
  const store = await storeWith(events, 100);
  const d = await describe(store);
  expect(store.log).toEqual([`start ${FOLD_PAGE}`, `events ${101 + FOLD_PAGE}`, 'lease']);
  expect(d.lastEventId).toBe(events.length);
});

it('an unreadable snapshot: the page after it is not used, the history is folded from event 1', async () => {
  const events = longHistory('t', 200);
  const store = await storeWith(events, 100, new Uint8Array([0xff, 0xff, 0xff]));
  const d = await describe(store);
  expect(store.log).toEqual([`start ${FOLD_PAGE}`, 'events 1', 'lease']);
  expect(d.lastEventId).toBe(events.length);
  expect(d.turn).toBe(fold('t', events).turn);
});

it('a failed read falls back to the three reads', async () => {
  const events = longHistory('t', 200);
  const store = await storeWith(events, 100);
  store.failStart = true;
  const d = await describe(store);
  expect(store.log).toEqual([`start ${FOLD_PAGE}`, 'snapshot', 'events 101', 'lease']);
  expect(d.lastEventId).toBe(events.length);
});
