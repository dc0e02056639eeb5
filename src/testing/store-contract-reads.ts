/** The store contract suite (store-contract.ts), part: summaries, listing tasks, snapshots and a task's first load (readTaskStart). */
import type { HistoryEvent } from '../history/events.js';
import { created, started, steps, taskCompleted, turnCompleted } from './store-events.js';
import type { ContractSuite } from './store-contract.js';

/** Registers this part's tests; `suite.store` is the fixture's store of the running test. */
export function readContract(suite: ContractSuite): void {
  const { describe, it, expect, beforeEach, rejectsWith, createTask } = suite;
  describe('summaries', () => {
    it('follows a one-shot task to completion', async () => {
      await createTask('t1');
      expect(await suite.store.getSummary('t1')).toMatchObject({ status: 'pending', queued: 1, lastInputId: 'in-1', turn: 0, createdAt: 1_000 });
      await suite.store.append('t1', [{ ...started(3, 1), inputIds: ['in-1'] } as HistoryEvent], { expectedLastEventId: 2, generation: 1 });
      expect(await suite.store.getSummary('t1')).toMatchObject({ status: 'in_progress', queued: 0, turn: 1 });
      await suite.store.append('t1', [turnCompleted(4, 1), taskCompleted(5, { time: 9_000 })], { expectedLastEventId: 3, generation: 1 });
      expect(await suite.store.getSummary('t1')).toMatchObject({ status: 'completed', outcome: 'succeeded', lastEventId: 5, updatedAt: 9_000 });
    });

    it('leaves a multi-turn task suspended after a turn', async () => {
      await createTask('m1', { kind: 'multi-turn' });
      await suite.store.append('m1', [started(3, 1), turnCompleted(4, 1)], { expectedLastEventId: 2, generation: 1 });
      expect(await suite.store.getSummary('m1')).toMatchObject({ kind: 'multi-turn', status: 'suspended', turn: 1 });
    });
  });

  describe('listTasks', () => {
    beforeEach(async () => {
      for (let i = 0; i < 7; i++) await createTask(`a-${i}`, { workflow: 'alpha' });
      for (let i = 0; i < 5; i++) await createTask(`b-${i}`, { workflow: 'beta' });
      for (const id of ['a-1', 'a-3', 'b-2']) {
        await suite.store.append(id, [started(3, 1)], { expectedLastEventId: 2, generation: 1 });
      }
    });
    const ids = (page: { tasks: { taskId: string }[] }) => page.tasks.map((t) => t.taskId);

    it('lists all, by status, by workflow and by both', async () => {
      expect(ids(await suite.store.listTasks())).toHaveLength(12);
      expect(ids(await suite.store.listTasks({ status: 'in_progress' })).sort()).toEqual(['a-1', 'a-3', 'b-2']);
      expect(ids(await suite.store.listTasks({ workflow: 'beta' }))).toEqual(['b-0', 'b-1', 'b-2', 'b-3', 'b-4']);
      expect(ids(await suite.store.listTasks({ status: 'pending', workflow: 'alpha' }))).toEqual(['a-0', 'a-2', 'a-4', 'a-5', 'a-6']);
      expect(ids(await suite.store.listTasks({ status: 'completed' }))).toEqual([]);
      expect(ids(await suite.store.listTasks({ workflow: 'gamma' }))).toEqual([]);
    });

    it('pages with a cursor, each task once', async () => {
      for (const filter of [{}, { status: 'pending' as const }, { workflow: 'alpha' }, { status: 'pending' as const, workflow: 'alpha' }]) {
        const all = ids(await suite.store.listTasks({ ...filter, limit: 1_000 }));
        const seen: string[] = [];
        let cursor: string | undefined;
        for (let pages = 0; pages < 20; pages++) {
          const page = await suite.store.listTasks({ ...filter, limit: 2, ...(cursor === undefined ? {} : { cursor }) });
          expect(page.tasks.length).toBeLessThanOrEqual(2);
          seen.push(...ids(page));
          if (page.next === undefined) break;
          cursor = page.next;
        }
        expect(seen).toEqual(all);
        expect(new Set(seen).size).toBe(seen.length);
      }
    });

    it('moves a task between status lists as it changes', async () => {
      await suite.store.append('a-1', [turnCompleted(4, 1), taskCompleted(5)], { expectedLastEventId: 3, generation: 1 });
      expect(ids(await suite.store.listTasks({ status: 'completed' }))).toEqual(['a-1']);
      expect(ids(await suite.store.listTasks({ status: 'in_progress' })).sort()).toEqual(['a-3', 'b-2']);
    });
  });

  describe('snapshots', () => {
    it('stores and returns a snapshot; rejects one beyond the history', async () => {
      await createTask('t1');
      await suite.store.putSnapshot('t1', { eventId: 2, data: new Uint8Array([1, 2, 3]) });
      const snap = (await suite.store.getSnapshot('t1'))!;
      expect(snap.eventId).toBe(2);
      expect([...snap.data]).toEqual([1, 2, 3]);
      snap.data[0] = 9;
      expect([...(await suite.store.getSnapshot('t1'))!.data]).toEqual([1, 2, 3]);
      await rejectsWith(suite.store.putSnapshot('t1', { eventId: 3, data: new Uint8Array() }), 'TURNLOG_INVALID_ARGUMENT');
      await rejectsWith(suite.store.putSnapshot('none', { eventId: 1, data: new Uint8Array() }), 'TURNLOG_INVALID_ARGUMENT');
    });
  });

  describe('readTaskStart', () => {
    // Optional: a store without it is read by getSnapshot, readEvents and getLease instead.
    it('equals getSnapshot, the limited readEvents after the snapshot and getLease', async () => {
      const readTaskStart = suite.store.readTaskStart?.bind(suite.store);
      if (!readTaskStart) return;
      const ids = (evs: HistoryEvent[]) => evs.map((e) => e.eventId);
      expect(await readTaskStart('t1', 100)).toEqual({ snapshot: undefined, events: [], lease: undefined });
      const events = [created(1), ...steps(2, 9)];
      await suite.store.append('t1', events, { expectedLastEventId: 0, generation: 1 });
      await suite.store.append('t10', [created(1, { workflow: 'other' }), ...steps(2, 20)], { expectedLastEventId: 0, generation: 1 });
      await suite.store.putSnapshot('t10', { eventId: 5, data: new Uint8Array([5]) });
      await suite.store.claimLease('t10', { owner: 'o', instance: 'i10', durationMs: 1_000, now: 0 });
      expect(await readTaskStart('t1', 4)).toEqual({ snapshot: undefined, events: events.slice(0, 4), lease: undefined });
      expect(await readTaskStart('t1', 100)).toEqual({ snapshot: undefined, events, lease: undefined });
      await suite.store.putSnapshot('t1', { eventId: 3, data: new Uint8Array([1, 2, 3]) });
      const lease = await suite.store.claimLease('t1', { owner: 'engine', instance: 'i1', durationMs: 1_000, now: 0 });
      const full = await readTaskStart('t1', 4);
      expect(ids(full.events)).toEqual([4, 5, 6, 7]);
      expect(full).toEqual({ snapshot: await suite.store.getSnapshot('t1'), events: await suite.store.readEvents('t1', { fromEventId: 4, limit: 4 }), lease: await suite.store.getLease('t1') });
      expect(full.lease).toMatchObject({ owner: 'engine', instance: 'i1', generation: lease.generation });
      expect(full.snapshot!.eventId).toBe(3);
      expect([...full.snapshot!.data]).toEqual([1, 2, 3]);
      const rest = await readTaskStart('t1', 100);
      expect(rest.events).toEqual(events.slice(3));
      expect((await readTaskStart('t1', 0)).events).toEqual([]);
      await rejectsWith(readTaskStart('t1', -1), 'TURNLOG_INVALID_ARGUMENT');
      await rejectsWith(readTaskStart('bad\0id', 1), 'TURNLOG_INVALID_ARGUMENT');
    });
  });
}
