/** The store contract suite (store-contract.ts), part: appends and reads: order and paging, dense ids, and fencing that writes nothing when it rejects. */
import type { HistoryEvent } from '../history/events.js';
import { created, queued, started, step, steps } from './store-events.js';
import type { ContractSuite } from './store-contract.js';

/** Registers this part's tests; `suite.store` is the fixture's store of the running test. */
export function appendContract(suite: ContractSuite): void {
  const { describe, it, expect, rejectsWith, createTask } = suite;
  describe('append and read', () => {
    it('round-trips events and returns the new summary', async () => {
      const events: HistoryEvent[] = [created(1), queued(2, 'in-1'), started(3, 1), step(4, 1)];
      const res = await suite.store.append('t1', events, { expectedLastEventId: 0, generation: 1 });
      expect(res.lastEventId).toBe(4);
      expect(res.summary).toMatchObject({ taskId: 't1', workflow: 'wf', status: 'in_progress', lastEventId: 4, turn: 1 });
      expect(await suite.store.readEvents('t1')).toEqual(events);
    });

    it('reads nothing for an unknown task', async () => {
      expect(await suite.store.readEvents('nope')).toEqual([]);
      expect(await suite.store.getSummary('nope')).toBeUndefined();
      expect(await suite.store.getLease('nope')).toBeUndefined();
      expect(await suite.store.getSnapshot('nope')).toBeUndefined();
    });

    it('reads ranges: from, to and limit', async () => {
      await suite.store.append('t1', [created(1), ...steps(2, 9)], { expectedLastEventId: 0, generation: 1 });
      const ids = (evs: HistoryEvent[]) => evs.map((e) => e.eventId);
      expect(ids(await suite.store.readEvents('t1', { fromEventId: 4 }))).toEqual([4, 5, 6, 7, 8, 9, 10]);
      expect(ids(await suite.store.readEvents('t1', { fromEventId: 4, toEventId: 6 }))).toEqual([4, 5, 6]);
      expect(ids(await suite.store.readEvents('t1', { fromEventId: 2, limit: 3 }))).toEqual([2, 3, 4]);
      expect(ids(await suite.store.readEvents('t1', { fromEventId: 11 }))).toEqual([]);
      expect(ids(await suite.store.readEvents('t1', { limit: 0 }))).toEqual([]);
    });

    it('a limited read returns the whole range up to the limit: only a page shorter than the limit is the end', async () => {
      // The engine loads a history in pages of 2,048 and stops at the first short page.
      await suite.store.append('paged', [created(1)], { expectedLastEventId: 0, generation: 1 });
      let last = 1;
      while (last < 2_500) last = (await suite.store.append('paged', steps(last + 1, 500), { expectedLastEventId: last, generation: 1 })).lastEventId;
      const first = await suite.store.readEvents('paged', { fromEventId: 1, limit: 2_048 });
      expect(first.length).toBe(2_048);
      expect(first[2_047]!.eventId).toBe(2_048);
      const rest = await suite.store.readEvents('paged', { fromEventId: 2_049, limit: 2_048 });
      expect(rest.map((e) => e.eventId)).toEqual(Array.from({ length: last - 2_048 }, (_, i) => i + 2_049));
    });

    it('iterates a long history in order, across pages', async () => {
      await suite.store.append('long', [created(1)], { expectedLastEventId: 0, generation: 1 });
      let last = 1;
      for (let chunk = 0; chunk < 6; chunk++) {
        const res = await suite.store.append('long', steps(last + 1, 100), { expectedLastEventId: last, generation: 1 });
        last = res.lastEventId;
      }
      const seen: number[] = [];
      for await (const e of suite.store.iterateEvents('long')) seen.push(e.eventId);
      expect(seen).toEqual(Array.from({ length: 601 }, (_, i) => i + 1));
      const some: number[] = [];
      for await (const e of suite.store.iterateEvents('long', { fromEventId: 250, limit: 300 })) some.push(e.eventId);
      expect(some).toEqual(Array.from({ length: 300 }, (_, i) => i + 250));
    });

    it('keeps task ids apart even when one prefixes another', async () => {
      await suite.store.append('a', [created(1)], { expectedLastEventId: 0, generation: 1 });
      await suite.store.append('ab', [created(1), queued(2, 'x')], { expectedLastEventId: 0, generation: 1 });
      expect((await suite.store.readEvents('a')).map((e) => e.eventId)).toEqual([1]);
      expect((await suite.store.readEvents('ab')).map((e) => e.eventId)).toEqual([1, 2]);
    });

    it('is not corrupted by callers mutating what they passed or got back', async () => {
      const events: HistoryEvent[] = [created(1), queued(2, 'in-1')];
      await suite.store.append('t1', events, { expectedLastEventId: 0, generation: 1 });
      (events[1] as { inputId: string }).inputId = 'mutated';
      const read = await suite.store.readEvents('t1');
      expect((read[1] as { inputId: string }).inputId).toBe('in-1');
      (read[0] as { workflow: string }).workflow = 'mutated';
      const summary = (await suite.store.getSummary('t1'))!;
      summary.status = 'completed';
      expect((await suite.store.readEvents('t1'))[0]).toMatchObject({ workflow: 'wf' });
      expect((await suite.store.getSummary('t1'))!.status).toBe('pending');
    });

    it('rejects invalid task ids and empty appends', async () => {
      await rejectsWith(suite.store.append('', [created(1)], { expectedLastEventId: 0, generation: 1 }), 'TURNLOG_INVALID_ARGUMENT');
      await rejectsWith(suite.store.append('a\0b', [created(1)], { expectedLastEventId: 0, generation: 1 }), 'TURNLOG_INVALID_ARGUMENT');
      await rejectsWith(suite.store.append('t1', [], { expectedLastEventId: 0, generation: 1 }), 'TURNLOG_INVALID_ARGUMENT');
    });
  });

  describe('dense ids and fencing write nothing when they reject', () => {
    it('rejects ids that do not continue from expectedLastEventId + 1, naming the task', async () => {
      await createTask('t1');
      const err = await rejectsWith(
        suite.store.append('t1', [step(3, 1), step(5, 2)], { expectedLastEventId: 2, generation: 1 }),
        'TURNLOG_INVALID_ARGUMENT',
      );
      expect(err.message).toContain('t1');
      await rejectsWith(suite.store.append('t1', [step(2, 1)], { expectedLastEventId: 2, generation: 1 }), 'TURNLOG_INVALID_ARGUMENT');
      expect((await suite.store.readEvents('t1')).length).toBe(2);
      expect((await suite.store.getSummary('t1'))!.lastEventId).toBe(2);
    });

    it('rejects an event stamped with another generation than the append', async () => {
      await createTask('t1');
      await rejectsWith(
        suite.store.append('t1', [step(3, 1, { generation: 2 })], { expectedLastEventId: 2, generation: 1 }),
        'TURNLOG_INVALID_ARGUMENT',
      );
      expect((await suite.store.readEvents('t1')).length).toBe(2);
    });

    it('ConcurrencyError on a wrong expected id writes nothing', async () => {
      await createTask('t1');
      const before = await suite.store.getSummary('t1');
      const err = await rejectsWith(suite.store.append('t1', [step(2, 1)], { expectedLastEventId: 1, generation: 1 }), 'TURNLOG_CONCURRENCY');
      expect(err).toMatchObject({ taskId: 't1', expected: 1, actual: 2 });
      await rejectsWith(suite.store.append('new', [created(2)], { expectedLastEventId: 1, generation: 1 }), 'TURNLOG_CONCURRENCY');
      expect((await suite.store.readEvents('t1')).length).toBe(2);
      expect(await suite.store.getSummary('t1')).toEqual(before);
      expect(await suite.store.readEvents('new')).toEqual([]);
      expect(await suite.store.getSummary('new')).toBeUndefined();
    });

    it('StaleGenerationError below the lease generation writes nothing', async () => {
      await createTask('t1');
      // The first lease has expired, so the takeover is allowed on every store (shared ones fence by instance).
      await suite.store.claimLease('t1', { owner: 'engine', instance: 'i1', durationMs: 0, now: 0 });
      const next = await suite.store.claimLease('t1', { owner: 'engine', instance: 'i2', durationMs: 1_000, now: 10 });
      expect(next.generation).toBe(2);
      const err = await rejectsWith(suite.store.append('t1', [step(3, 1)], { expectedLastEventId: 2, generation: 1 }), 'TURNLOG_STALE_GENERATION');
      expect(err).toMatchObject({ taskId: 't1', generation: 1, current: 2 });
      expect((await suite.store.readEvents('t1')).length).toBe(2);
      expect((await suite.store.getSummary('t1'))!.lastEventId).toBe(2);
      await suite.store.append('t1', [step(3, 1, { generation: 2 })], { expectedLastEventId: 2, generation: 2 });
    });

    it('StaleGenerationError below the highest generation in the history, even without a lease', async () => {
      await createTask('t1', { gen: 3 });
      await rejectsWith(suite.store.append('t1', [step(3, 1, { generation: 2 })], { expectedLastEventId: 2, generation: 2 }), 'TURNLOG_STALE_GENERATION');
      expect((await suite.store.readEvents('t1')).length).toBe(2);
    });

    it('fencing order: checks the generation before the expected id (a zombie is fenced, not told to retry)', async () => {
      await createTask('t1', { gen: 2 });
      const err = await rejectsWith(suite.store.append('t1', [step(2, 1)], { expectedLastEventId: 1, generation: 1 }), 'TURNLOG_STALE_GENERATION');
      expect(err).toMatchObject({ taskId: 't1', generation: 1, current: 2 });
      expect((await suite.store.readEvents('t1')).length).toBe(2);
    });

    it('fencing order: a zombie that missed a takeover gets StaleGenerationError, and nothing of it is written', async () => {
      await createTask('t1');
      const zombie = await suite.store.claimLease('t1', { owner: 'engine', instance: 'i1', durationMs: 0, now: 0 });
      const next = await suite.store.claimLease('t1', { owner: 'engine', instance: 'i2', durationMs: 1_000, now: 10 });
      await suite.store.append('t1', [step(3, 1, { generation: next.generation })], { expectedLastEventId: 2, generation: next.generation });
      // The zombie still believes the history ends at 2: both checks fail, fencing wins.
      await rejectsWith(suite.store.append('t1', [step(3, 1)], { expectedLastEventId: 2, generation: zombie.generation }), 'TURNLOG_STALE_GENERATION');
      expect((await suite.store.readEvents('t1')).map((e) => e.generation)).toEqual([1, 1, 2]);
    });

    it('a current generation with a wrong expected id is still a ConcurrencyError', async () => {
      await createTask('t1', { gen: 2 });
      await rejectsWith(suite.store.append('t1', [step(2, 1, { generation: 2 })], { expectedLastEventId: 1, generation: 2 }), 'TURNLOG_CONCURRENCY');
      expect((await suite.store.readEvents('t1')).length).toBe(2);
    });
  });
}
