/** The store contract suite (store-contract.ts), part: leases (expiry, takeover, a shared store fencing by instance) and the claim of due work. */
import type { HistoryEvent, Lease } from '../history/events.js';
import type { DueBatch, DueReason } from '../store/history-store.js';
import { queued, started, step, taskCompleted, turnCompleted } from './store-events.js';
import type { ContractSuite } from './store-contract.js';

/** Registers this part's tests; `suite.store` is the fixture's store of the running test. */
export function leaseContract(suite: ContractSuite): void {
  const { describe, it, expect, callerClockIt, rejectsWith, req, createTask, capabilities } = suite;
  describe('leases', () => {

    callerClockIt('row 1: no lease → generation 1', async () => {
      const l = await suite.store.claimLease('t1', req('a', 'i1', 0));
      expect(l).toEqual({ owner: 'a', instance: 'i1', generation: 1, expiresAt: 1_000 });
      expect(await suite.store.getLease('t1')).toEqual(l);
    });

    callerClockIt('row 2: same owner and instance → same generation (renewal)', async () => {
      await suite.store.claimLease('t1', req('a', 'i1', 0));
      const l = await suite.store.claimLease('t1', req('a', 'i1', 500));
      expect(l).toEqual({ owner: 'a', instance: 'i1', generation: 1, expiresAt: 1_500 });
    });

    if (capabilities.exclusive === false) {
      // A shared store fences by instance: two engines with one owner never take each other's turns.
      it('row 3 (shared store): same owner, new instance, live → LeaseHeldError, lease unchanged', async () => {
        const held = await suite.store.claimLease('t1', req('a', 'i1', 0));
        const err = await rejectsWith(suite.store.claimLease('t1', req('a', 'i2', 500)), 'TURNLOG_LEASE_HELD');
        expect(err.message).toContain('i1');
        expect(await suite.store.getLease('t1')).toEqual(held);
      });
    } else {
      it('row 3: same owner, new instance → generation + 1 (even while live)', async () => {
        await suite.store.claimLease('t1', req('a', 'i1', 0));
        const l = await suite.store.claimLease('t1', req('a', 'i2', 500));
        expect(l.generation).toBe(2);
        expect(l.instance).toBe('i2');
      });
    }

    callerClockIt('row 4: foreign owner, expired → generation + 1', async () => {
      await suite.store.claimLease('t1', req('a', 'i1', 0));
      const l = await suite.store.claimLease('t1', req('b', 'j1', 1_000));
      expect(l).toEqual({ owner: 'b', instance: 'j1', generation: 2, expiresAt: 2_000 });
    });

    it('row 5: foreign owner, live → LeaseHeldError, lease unchanged', async () => {
      const held = await suite.store.claimLease('t1', req('a', 'i1', 0));
      const err = await rejectsWith(suite.store.claimLease('t1', req('b', 'j1', 999)), 'TURNLOG_LEASE_HELD');
      expect(err).toMatchObject({ taskId: 't1', owner: 'a', instance: 'i1' });
      expect(await suite.store.getLease('t1')).toEqual(held);
    });

    it('a claim never goes below the generation already in the history', async () => {
      await createTask('t1', { gen: 4 });
      expect((await suite.store.claimLease('t1', req('a', 'i1', 0))).generation).toBe(4);
    });

    callerClockIt('claims in the same batch as an append', async () => {
      await createTask('t1');
      const lease: Lease = { owner: 'a', instance: 'i1', generation: 1, expiresAt: 5_000 };
      await suite.store.append('t1', [started(3, 1)], { expectedLastEventId: 2, generation: 1, lease });
      expect(await suite.store.getLease('t1')).toEqual(lease);
      // A new instance takes over with generation 2 in its TurnStarted append.
      const takeover: Lease = { owner: 'a', instance: 'i2', generation: 2, expiresAt: 9_000 };
      await suite.store.append('t1', [started(4, 1, { generation: 2, instance: 'i2' })], { expectedLastEventId: 3, generation: 2, lease: takeover });
      expect(await suite.store.getLease('t1')).toEqual(takeover);
      await rejectsWith(suite.store.append('t1', [step(5, 1)], { expectedLastEventId: 4, generation: 1 }), 'TURNLOG_STALE_GENERATION');
    });

    it('a claim-in-append against a foreign live lease is LeaseHeldError and writes nothing', async () => {
      await createTask('t1');
      const held = await suite.store.claimLease('t1', req('a', 'i1', 1_000, 10_000));
      const lease: Lease = { owner: 'b', instance: 'j1', generation: 2, expiresAt: 20_000 };
      await rejectsWith(
        suite.store.append('t1', [started(3, 1, { generation: 2, time: 2_000 })], { expectedLastEventId: 2, generation: 2, lease }),
        'TURNLOG_LEASE_HELD',
      );
      expect(await suite.store.getLease('t1')).toEqual(held);
      expect((await suite.store.readEvents('t1')).length).toBe(2);
    });

    it('a claim-in-append below the table generation is StaleGenerationError and writes nothing', async () => {
      await createTask('t1');
      await suite.store.claimLease('t1', req('a', 'i1', 0, 0));
      // New instance (the old lease expired), but it claims generation 1 where the table says 2.
      const lease: Lease = { owner: 'a', instance: 'i2', generation: 1, expiresAt: 9_000 };
      await rejectsWith(suite.store.append('t1', [started(3, 1)], { expectedLastEventId: 2, generation: 1, lease }), 'TURNLOG_STALE_GENERATION');
      expect((await suite.store.readEvents('t1')).length).toBe(2);
      expect((await suite.store.getLease('t1'))!.instance).toBe('i1');
    });

    callerClockIt('renews the holder and fences a zombie', async () => {
      const mine = await suite.store.claimLease('t1', req('a', 'i1', 0));
      const renewed = await suite.store.renewLease('t1', mine, 2_000, 800);
      expect(renewed).toEqual({ ...mine, expiresAt: 2_800 });
      // Another instance takes over after expiry; the old holder's renewal is stale.
      const theirs = await suite.store.claimLease('t1', req('b', 'j1', 3_000));
      await rejectsWith(suite.store.renewLease('t1', mine, 1_000, 3_100), 'TURNLOG_STALE_GENERATION');
      expect(await suite.store.getLease('t1')).toEqual(theirs);
    });

    it('renewal by a different holder at the same generation while live is LeaseHeldError', async () => {
      const mine = await suite.store.claimLease('t1', req('a', 'i1', 0));
      await rejectsWith(suite.store.renewLease('t1', { ...mine, owner: 'z' }, 1_000, 10), 'TURNLOG_LEASE_HELD');
    });

    callerClockIt('release expires the lease now; releasing a lease one no longer holds is a no-op', async () => {
      const mine = await suite.store.claimLease('t1', req('a', 'i1', 0, 10_000));
      await suite.store.releaseLease('t1', mine, 100);
      expect(await suite.store.getLease('t1')).toEqual({ ...mine, expiresAt: 100 });
      const theirs = await suite.store.claimLease('t1', req('b', 'j1', 200));
      expect(theirs.generation).toBe(2);
      await suite.store.releaseLease('t1', mine, 300);
      expect(await suite.store.getLease('t1')).toEqual(theirs);
      await suite.store.releaseLease('unknown', mine, 300);
    });

    callerClockIt('lists recoverable tasks: in progress with a missing, expired or other instance lease', async () => {
      const open = async (id: string) => {
        await createTask(id);
        await suite.store.append(id, [started(3, 1)], { expectedLastEventId: 2, generation: 1 });
      };
      await open('no-lease');
      await open('expired');
      await suite.store.claimLease('expired', req('e', 'i1', 0, 100));
      await open('other-instance');
      await suite.store.claimLease('other-instance', req('e', 'old', 0, 1_000_000));
      await open('mine');
      await suite.store.claimLease('mine', req('e', 'me', 0, 1_000_000));
      await createTask('pending');
      await open('done');
      await suite.store.append('done', [turnCompleted(4, 1), taskCompleted(5)], { expectedLastEventId: 3, generation: 1 });
      expect(await suite.store.listRecoverable(500, 'me')).toEqual(['expired', 'no-lease', 'other-instance']);
    });
  });

  describe('claimDueWork', () => {
    /** One task of each kind; returns nothing, the ids say what they are. */
    async function population() {
      const open = async (id: string) => {
        await createTask(id);
        await suite.store.append(id, [started(3, 1)], { expectedLastEventId: 2, generation: 1 });
      };
      await open('run-1');
      await open('run-2');
      await createTask('pend-1');
      await createTask('pend-2');
      for (const id of ['idle', 'wait-1', 'wait-2']) {
        await createTask(id, { kind: 'multi-turn' });
        // The turn takes the first input, so the task is suspended with nothing queued.
        await suite.store.append(id, [{ ...started(3, 1), inputIds: ['in-1'] } as HistoryEvent, turnCompleted(4, 1)], { expectedLastEventId: 2, generation: 1 });
      }
      for (const [n, id] of ['wait-1', 'wait-2'].entries()) await suite.store.append(id, [queued(5, `more-${n}`)], { expectedLastEventId: 4, generation: 1 });
      for (const [id, time] of [['old', 10_000], ['new', 90_000]] as const) {
        await createTask(id);
        await suite.store.append(id, [started(3, 1), turnCompleted(4, 1), taskCompleted(5, { time })], { expectedLastEventId: 2, generation: 1 });
      }
    }
    const all = async (request: { limit: number; retentionMs?: number; now?: number; reasons?: DueReason[] }) => {
      const seen: DueBatch['tasks'] = [];
      let cursor: string | undefined;
      for (let batches = 0; batches < 50; batches++) {
        const batch = await suite.store.claimDueWork({ now: request.now ?? 100_000, instance: 'me', ...request, ...(cursor === undefined ? {} : { cursor }) });
        expect(batch.tasks.length).toBeLessThanOrEqual(request.limit);
        seen.push(...batch.tasks);
        if (batch.next === undefined) return seen;
        cursor = batch.next;
      }
      throw new Error('claimDueWork never ended');
    };

    it('hands out in-progress tasks without a lease, pending tasks and suspended ones with queued inputs, in that order', async () => {
      await population();
      expect(await all({ limit: 100 })).toEqual([
        { taskId: 'run-1', reason: 'in-progress' },
        { taskId: 'run-2', reason: 'in-progress' },
        { taskId: 'pend-1', reason: 'pending' },
        { taskId: 'pend-2', reason: 'pending' },
        { taskId: 'wait-1', reason: 'queued' },
        { taskId: 'wait-2', reason: 'queued' },
      ]);
    });

    it('with a retention, also completed tasks older than it, never one marked corrupt', async () => {
      await population();
      const retention = (await all({ limit: 100, retentionMs: 50_000 })).filter((d) => d.reason === 'retention');
      expect(retention).toEqual([{ taskId: 'old', reason: 'retention' }]);
      await suite.store.markCorrupt({ taskId: 'old', key: 'events/old/2', code: 'TURNLOG_HISTORY_CORRUPT', message: 'garbled', time: 5 });
      expect((await all({ limit: 100, retentionMs: 50_000 })).filter((d) => d.reason === 'retention')).toEqual([]);
      // A claim deletes nothing itself.
      expect(await suite.store.getSummary('old')).toBeDefined();
    });

    it('bounded batches: each due task once, whatever the batch size', async () => {
      await population();
      const whole = await all({ limit: 100, retentionMs: 50_000 });
      for (const limit of [1, 2, 3, 7]) expect(await all({ limit, retentionMs: 50_000 })).toEqual(whole);
    });

    callerClockIt('judges leases: expired and other instances are due on an exclusive store, its own live lease is not', async () => {
      await population();
      await suite.store.claimLease('run-1', req('e', 'me', 0, 1_000_000));
      await suite.store.claimLease('run-2', req('e', 'old', 0, 100));
      const due = (await all({ limit: 100 })).filter((d) => d.reason === 'in-progress').map((d) => d.taskId);
      expect(due).toEqual(['run-2']);
    });

    it('reasons: only tasks due for those', async () => {
      await population();
      const due = await all({ limit: 2, retentionMs: 50_000, reasons: ['queued', 'retention'] });
      expect(due).toEqual([
        { taskId: 'wait-1', reason: 'queued' },
        { taskId: 'wait-2', reason: 'queued' },
        { taskId: 'old', reason: 'retention' },
      ]);
    });

    it('a suspended task with a task cancel pending (summary.cancelRequested) is due as queued until TaskCompleted', async () => {
      await createTask('stuck', { kind: 'multi-turn' });
      await suite.store.append('stuck', [{ ...started(3, 1), inputIds: ['in-1'] } as HistoryEvent, turnCompleted(4, 1)], { expectedLastEventId: 2, generation: 1 });
      expect(await all({ limit: 100 })).toEqual([]);
      // The cancel alone, as an engine before d2d1d42 wrote it at shutdown (docs/recovery.md).
      const cancel: HistoryEvent = { type: 'CancelRequested', eventId: 5, time: 1_005, generation: 1, scope: 'task', turn: 0, reason: 'closed' };
      const r = await suite.store.append('stuck', [cancel], { expectedLastEventId: 4, generation: 1 });
      expect(r.summary).toMatchObject({ status: 'suspended', queued: 0, cancelRequested: true });
      expect((await suite.store.getSummary('stuck'))!.cancelRequested).toBe(true);
      expect(await all({ limit: 100 })).toEqual([{ taskId: 'stuck', reason: 'queued' }]);
      const done = await suite.store.append('stuck', [{ ...taskCompleted(6), outcome: 'cancelled' } as HistoryEvent], { expectedLastEventId: 5, generation: 1 });
      expect(done.summary.cancelRequested).toBeUndefined();
      expect((await suite.store.getSummary('stuck'))!.cancelRequested).toBeUndefined();
      expect(await all({ limit: 100 })).toEqual([]);
    });

    it('a store that claims (supports.claim) hands a task to one instance until released', async () => {
      if (!suite.store.supports.claim) return;
      await population();
      const claim = (instance: string) => suite.store.claimDueWork({ now: 100_000, instance, limit: 100, claimMs: 600_000 });
      const mine = (await claim('a')).tasks.map((d) => d.taskId);
      expect(mine).toEqual(['run-1', 'run-2', 'pend-1', 'pend-2', 'wait-1', 'wait-2']);
      expect((await claim('b')).tasks).toEqual([]);
      // Its own claims come back to the same instance (a later pass of the same engine).
      expect((await claim('a')).tasks.map((d) => d.taskId)).toEqual(mine);
      await suite.store.releaseDueWork!(['pend-1', 'wait-2'], 'a');
      await suite.store.releaseDueWork!(['run-1'], 'b'); // not b's: left alone
      expect((await claim('b')).tasks.map((d) => d.taskId)).toEqual(['pend-1', 'wait-2']);
    });

    it('refuses a limit below 1 and a cursor it did not make', async () => {
      await rejectsWith(suite.store.claimDueWork({ now: 0, instance: 'me', limit: 1, claimMs: 0 }), 'TURNLOG_INVALID_ARGUMENT');
      await rejectsWith(suite.store.claimDueWork({ now: 0, instance: 'me', limit: 0 }), 'TURNLOG_INVALID_ARGUMENT');
      await rejectsWith(suite.store.claimDueWork({ now: 0, instance: 'me', limit: 1, cursor: 'nonsense' }), 'TURNLOG_INVALID_ARGUMENT');
    });
  });
}
