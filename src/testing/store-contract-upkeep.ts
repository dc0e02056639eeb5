/** The store contract suite (store-contract.ts), part: compaction, deletion and retention, corrupt marks, group commit and the store's lifecycle. */
import { isTurnlogError } from '../errors.js';
import { compaction } from '../replay/compact.js';
import { historyBuilder } from './history-builder.js';
import { created, started, step, taskCompleted, turnCompleted } from './store-events.js';
import type { ContractSuite } from './store-contract.js';

/** Registers this part's tests; `suite.store` is the fixture's store of the running test. */
export function upkeepContract(suite: ContractSuite): void {
  const { describe, it, expect, rejectsWith, createTask, capabilities } = suite;
  describe('compaction', () => {
    // Stores without the optional compactHistory skip compaction; nothing to prove then.
    it('compactHistory replaces events 2..N and keeps the dropped input ids (across a reopen)', async () => {
      if (!suite.store.compactHistory) return;
      const b = historyBuilder('c1').created({ kind: 'multi-turn' });
      for (let i = 1; i <= 4; i++) b.input(`m${i}`, { id: `req-${i}` }).turnStarted().suspended('waiting', { state: { n: i } });
      const events = b.build();
      await suite.store.append('c1', events, { expectedLastEventId: 0, generation: 1 });
      const c = compaction('c1', events, 2)!;
      await suite.store.compactHistory('c1', c);
      const read = async () => (await suite.store.readEvents('c1')).map((e) => e.eventId);
      const kept = events.filter((e) => e.eventId > c.throughEventId).map((e) => e.eventId);
      expect(await read()).toEqual([1, 2, ...kept]);
      const second = (await suite.store.readEvents('c1', { fromEventId: 2, toEventId: 2 }))[0];
      expect(second).toMatchObject({ type: 'HistoryCompacted', throughEventId: c.throughEventId, droppedInputIds: ['req-1', 'req-2'] });
      if (suite.fx.reopen) {
        suite.store = await suite.fx.reopen();
        expect((await suite.store.readEvents('c1'))[1]).toMatchObject({ droppedInputIds: ['req-1', 'req-2'] });
      }
    });
  });

  describe('deletion and retention', () => {
    it('deleteTask removes history, summary, lease, snapshot and index entries', async () => {
      await createTask('t1');
      await suite.store.claimLease('t1', { owner: 'a', instance: 'i1', durationMs: 1_000, now: 0 });
      await suite.store.putSnapshot('t1', { eventId: 1, data: new Uint8Array([7]) });
      await createTask('t2');
      await suite.store.deleteTask('t1');
      expect(await suite.store.readEvents('t1')).toEqual([]);
      expect(await suite.store.getSummary('t1')).toBeUndefined();
      expect(await suite.store.getLease('t1')).toBeUndefined();
      expect(await suite.store.getSnapshot('t1')).toBeUndefined();
      expect((await suite.store.listTasks()).tasks.map((t) => t.taskId)).toEqual(['t2']);
      expect((await suite.store.listTasks({ status: 'pending' })).tasks.map((t) => t.taskId)).toEqual(['t2']);
      expect((await suite.store.listTasks({ workflow: 'wf' })).tasks.map((t) => t.taskId)).toEqual(['t2']);
      // The id can be used again.
      await createTask('t1');
      expect((await suite.store.readEvents('t1')).length).toBe(2);
      await suite.store.deleteTask('never-existed');
    });

    it('purgeCompleted deletes only completed tasks older than the retention', async () => {
      const finish = async (id: string, time: number) => {
        await createTask(id);
        await suite.store.append(id, [started(3, 1), turnCompleted(4, 1), taskCompleted(5, { time })], { expectedLastEventId: 2, generation: 1 });
      };
      await finish('old', 10_000);
      await finish('recent', 90_000);
      await createTask('running');
      const purged = await suite.store.purgeCompleted(50_000, 100_000);
      expect(purged).toEqual(['old']);
      expect(await suite.store.readEvents('old')).toEqual([]);
      expect(await suite.store.getSummary('recent')).toMatchObject({ status: 'completed' });
      expect(await suite.store.getSummary('running')).toMatchObject({ status: 'pending' });
      expect(await suite.store.purgeCompleted(50_000, 100_000)).toEqual([]);
    });
  });

  describe('corrupt marks', () => {
    const mark = (taskId: string) => ({ taskId, key: `events/${taskId}/2`, code: 'TURNLOG_HISTORY_CORRUPT', message: 'garbled', time: 5 });

    it('records a mark without touching the task, shows it in listTasks, keeps it from retention', async () => {
      await createTask('a');
      await createTask('b');
      await suite.store.append('b', [started(3, 1), turnCompleted(4, 1), taskCompleted(5, { time: 10 })], { expectedLastEventId: 2, generation: 1 });
      const before = await suite.store.readEvents('b');
      expect(await suite.store.listCorrupt()).toEqual([]);
      await suite.store.markCorrupt(mark('b'));
      expect(await suite.store.listCorrupt()).toEqual([mark('b')]);
      expect(await suite.store.readEvents('b')).toEqual(before);
      const tasks = (await suite.store.listTasks()).tasks;
      expect(tasks.find((t) => t.taskId === 'b')?.corrupt).toEqual({ key: 'events/b/2', code: 'TURNLOG_HISTORY_CORRUPT', message: 'garbled' });
      expect(tasks.find((t) => t.taskId === 'a')?.corrupt).toBeUndefined();
      expect((await suite.store.listTasks({ status: 'completed' })).tasks[0]?.corrupt?.key).toBe('events/b/2');
      expect(await suite.store.purgeCompleted(0, 1e12)).toEqual([]);
      expect(await suite.store.getSummary('b')).toBeDefined();
      // Deleting the task (for example to import a repaired copy) clears its mark.
      await suite.store.deleteTask('b');
      expect(await suite.store.listCorrupt()).toEqual([]);
    });

    it('refuses a mark for an invalid task id', async () => {
      await rejectsWith(suite.store.markCorrupt(mark('x\ud800')), 'TURNLOG_INVALID_ARGUMENT');
    });
  });

  describe('group commit', () => {
    it('100 concurrent appenders: each task keeps its order and nothing is lost', async () => {
      const tasks = Array.from({ length: 100 }, (_, i) => `task-${String(i).padStart(3, '0')}`);
      await Promise.all(
        tasks.map(async (id) => {
          await suite.store.append(id, [created(1)], { expectedLastEventId: 0, generation: 1 });
          for (let n = 2; n <= 10; n++) await suite.store.append(id, [step(n, n - 1)], { expectedLastEventId: n - 1, generation: 1 });
        }),
      );
      for (const id of tasks) {
        expect((await suite.store.readEvents(id)).map((e) => e.eventId)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        expect((await suite.store.getSummary(id))!.lastEventId).toBe(10);
      }
      expect((await suite.store.listTasks({ limit: 1_000 })).tasks).toHaveLength(100);
    });

    it('pipelined appends to one task (not awaited) land in order', async () => {
      await suite.store.append('t1', [created(1)], { expectedLastEventId: 0, generation: 1 });
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) => suite.store.append('t1', [step(i + 2, i + 1)], { expectedLastEventId: i + 1, generation: 1 })),
      );
      expect(results.map((r) => r.lastEventId)).toEqual(Array.from({ length: 20 }, (_, i) => i + 2));
      expect((await suite.store.readEvents('t1')).map((e) => e.eventId)).toEqual(Array.from({ length: 21 }, (_, i) => i + 1));
    });

    it('one invalid append among 100 concurrent ones fails alone; the others land', async () => {
      const tasks = Array.from({ length: 100 }, (_, i) => `g-${i}`);
      for (const id of tasks) await suite.store.append(id, [created(1)], { expectedLastEventId: 0, generation: 1 });
      const settled = await Promise.allSettled(
        tasks.map((id, i) =>
          suite.store.append(id, [step(2, 1), step(3, 2)], { expectedLastEventId: i === 42 ? 5 : 1, generation: 1 }),
        ),
      );
      const rejected = settled.flatMap((s, i) => (s.status === 'rejected' ? [[i, s.reason] as const] : []));
      expect(rejected).toHaveLength(1);
      expect(rejected[0]![0]).toBe(42);
      expect(isTurnlogError(rejected[0]![1], 'TURNLOG_CONCURRENCY')).toBe(true);
      for (const [i, id] of tasks.entries()) {
        expect((await suite.store.readEvents(id)).length).toBe(i === 42 ? 1 : 3);
      }
    });
  });

  describe('lifecycle', () => {
    it('a closed store rejects calls with TURNLOG_STORE_CLOSED', async () => {
      await suite.store.close();
      await rejectsWith(suite.store.append('t1', [created(1)], { expectedLastEventId: 0, generation: 1 }), 'TURNLOG_STORE_CLOSED');
      await rejectsWith(suite.store.readEvents('t1'), 'TURNLOG_STORE_CLOSED');
      await rejectsWith(suite.store.listTasks(), 'TURNLOG_STORE_CLOSED');
    });

    // Registered only for persistent backends, so no test is reported as skipped.
    if (capabilities.persistent) it('keeps everything across a reopen, including fencing state', async () => {
      if (!suite.fx.reopen) throw new Error('a persistent backend fixture must provide reopen()');
      await createTask('t1', { gen: 2 });
      await suite.store.claimLease('t1', { owner: 'a', instance: 'i1', durationMs: 1_000, now: 0 });
      await suite.store.putSnapshot('t1', { eventId: 2, data: new Uint8Array([5]) });
      await createTask('t2');
      suite.store = await suite.fx.reopen();
      expect((await suite.store.readEvents('t1')).map((e) => e.type)).toEqual(['TaskCreated', 'InputQueued']);
      expect(await suite.store.getSummary('t1')).toMatchObject({ lastEventId: 2, status: 'pending' });
      expect(await suite.store.getLease('t1')).toMatchObject({ owner: 'a', generation: 2 });
      expect((await suite.store.getSnapshot('t1'))!.eventId).toBe(2);
      await rejectsWith(suite.store.append('t1', [step(3, 1)], { expectedLastEventId: 2, generation: 1 }), 'TURNLOG_STALE_GENERATION');
      await rejectsWith(suite.store.append('t1', [step(3, 1, { generation: 2 })], { expectedLastEventId: 1, generation: 2 }), 'TURNLOG_CONCURRENCY');
      await suite.store.append('t1', [step(3, 1, { generation: 2 })], { expectedLastEventId: 2, generation: 2 });
      expect((await suite.store.listTasks()).tasks.map((t) => t.taskId)).toEqual(['t1', 't2']);
    });
  });
}
