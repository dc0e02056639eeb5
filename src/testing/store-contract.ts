/**
 * The HistoryStore contract suite, exported from `turnlog/testing` so a third-party store can
 * prove itself (abstract-level's pattern: the suite takes the test framework's functions and a
 * factory). The Level, memory and PostgreSQL stores run it through this export. See
 * docs/storage.md "Proving a store".
 *
 * @example
 * import * as vitest from 'vitest';
 * import { MemoryHistoryStore, storeContract } from 'turnlog/testing';
 * storeContract(vitest, 'MemoryHistoryStore', async () => {
 *   const store = new MemoryHistoryStore();
 *   await store.open();
 *   return { store, dispose: () => store.close() };
 * }, { callerClock: true });
 */
import { isTurnlogError, type ErrorCode } from '../errors.js';
import type { HistoryEvent, Lease } from '../history/events.js';
import { compaction } from '../replay/compact.js';
import type { DueBatch, DueReason, HistoryStore } from '../store/history-store.js';
import { historyBuilder } from './history-builder.js';
import { created, queued, started, step, steps, taskCompleted, turnCompleted } from './store-events.js';

/** The assertions the suite uses; vitest's and jest's `expect` have them. */
export interface ContractAssertion {
  toBe(expected: unknown): void;
  toEqual(expected: unknown): void;
  toMatchObject(expected: object): void;
  toBeUndefined(): void;
  toBeDefined(): void;
  toHaveLength(length: number): void;
  toBeLessThanOrEqual(n: number): void;
  toContain(item: unknown): void;
}

/**
 * The test framework's functions, e.g. `import * as vitest from 'vitest'` (the suite imports no
 * framework itself, so `turnlog/testing` does not depend on one).
 */
export interface ContractTestApi {
  describe(name: string, fn: () => void): void;
  it(name: string, fn: () => Promise<void> | void): void;
  beforeEach(fn: () => Promise<void>): void;
  afterEach(fn: () => Promise<void>): void;
  expect(actual: unknown, message?: string): ContractAssertion;
}

export interface StoreFixture {
  store: HistoryStore;
  /** Closes the store and opens the same data again (persistent backends only). */
  reopen?: () => Promise<HistoryStore>;
  dispose(): Promise<void>;
}


/** What a backend can do beyond the core contract; gates the tests that need it. */
export interface StoreCapabilities {
  /** Data survives close + open (the fixture provides `reopen`). */
  persistent?: boolean;
  /**
   * Lease expiry follows the caller's `now` (Level, memory). A store that decides expiry on its
   * own clock (PostgreSQL: the database's) runs the tests that need synthetic time in its own suite.
   */
  callerClock?: boolean;
  /** Opening proves earlier writers dead (`store.supports.exclusive`); default true. */
  exclusive?: boolean;
}

/** Registers the contract's tests (`describe`/`it`) for the store `factory` makes; call it at a test file's top level. */
export function storeContract(api: ContractTestApi, name: string, factory: () => Promise<StoreFixture>, capabilities: StoreCapabilities = {}): void {
  const { describe, it, beforeEach, afterEach, expect } = api;
  async function rejectsWith(p: Promise<unknown>, code: ErrorCode): Promise<Error> {
    const err = await p.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isTurnlogError(err, code), `expected ${code}, got ${String(err)}`).toBe(true);
    return err as Error;
  }
  // Registered only where expiry follows the caller's `now`, so no test is reported as skipped.
  const callerClockIt = capabilities.callerClock ? it : () => undefined;
  const req = (owner: string, instance: string, now: number, durationMs = 1_000) => ({ owner, instance, now, durationMs });
  describe(`HistoryStore contract: ${name}`, () => {
    let fx: StoreFixture;
    let store: HistoryStore;
    beforeEach(async () => {
      fx = await factory();
      store = fx.store;
    });
    afterEach(async () => {
      await fx.dispose();
    });

    /** Creates task `id` with TaskCreated + InputQueued under generation `gen`. */
    async function createTask(id: string, opts: { workflow?: string; kind?: 'one-shot' | 'multi-turn'; gen?: number } = {}) {
      const gen = opts.gen ?? 1;
      const c = { workflow: opts.workflow ?? 'wf', kind: opts.kind ?? 'one-shot', generation: gen };
      return store.append(id, [created(1, c), queued(2, 'in-1', { generation: gen })], {
        expectedLastEventId: 0,
        generation: gen,
      });
    }

    it(capabilities.exclusive === false ? 'is not exclusive' : 'is exclusive', () => {
      expect(store.exclusive).toBe(capabilities.exclusive !== false);
      expect(store.supports.exclusive).toBe(store.exclusive);
      for (const k of ['watch', 'claim', 'groupCommit'] as const) expect(typeof store.supports[k]).toBe('boolean');
      expect(typeof store.location).toBe('string');
    });

    describe('append and read', () => {
      it('round-trips events and returns the new summary', async () => {
        const events: HistoryEvent[] = [created(1), queued(2, 'in-1'), started(3, 1), step(4, 1)];
        const res = await store.append('t1', events, { expectedLastEventId: 0, generation: 1 });
        expect(res.lastEventId).toBe(4);
        expect(res.summary).toMatchObject({ taskId: 't1', workflow: 'wf', status: 'in_progress', lastEventId: 4, turn: 1 });
        expect(await store.readEvents('t1')).toEqual(events);
      });

      it('reads nothing for an unknown task', async () => {
        expect(await store.readEvents('nope')).toEqual([]);
        expect(await store.getSummary('nope')).toBeUndefined();
        expect(await store.getLease('nope')).toBeUndefined();
        expect(await store.getSnapshot('nope')).toBeUndefined();
      });

      it('reads ranges: from, to and limit', async () => {
        await store.append('t1', [created(1), ...steps(2, 9)], { expectedLastEventId: 0, generation: 1 });
        const ids = (evs: HistoryEvent[]) => evs.map((e) => e.eventId);
        expect(ids(await store.readEvents('t1', { fromEventId: 4 }))).toEqual([4, 5, 6, 7, 8, 9, 10]);
        expect(ids(await store.readEvents('t1', { fromEventId: 4, toEventId: 6 }))).toEqual([4, 5, 6]);
        expect(ids(await store.readEvents('t1', { fromEventId: 2, limit: 3 }))).toEqual([2, 3, 4]);
        expect(ids(await store.readEvents('t1', { fromEventId: 11 }))).toEqual([]);
        expect(ids(await store.readEvents('t1', { limit: 0 }))).toEqual([]);
      });

      it('a limited read returns the whole range up to the limit: only a page shorter than the limit is the end', async () => {
        // The engine loads a history in pages of 2,048 and stops at the first short page.
        await store.append('paged', [created(1)], { expectedLastEventId: 0, generation: 1 });
        let last = 1;
        while (last < 2_500) last = (await store.append('paged', steps(last + 1, 500), { expectedLastEventId: last, generation: 1 })).lastEventId;
        const first = await store.readEvents('paged', { fromEventId: 1, limit: 2_048 });
        expect(first.length).toBe(2_048);
        expect(first[2_047]!.eventId).toBe(2_048);
        const rest = await store.readEvents('paged', { fromEventId: 2_049, limit: 2_048 });
        expect(rest.map((e) => e.eventId)).toEqual(Array.from({ length: last - 2_048 }, (_, i) => i + 2_049));
      });

      it('iterates a long history in order, across pages', async () => {
        await store.append('long', [created(1)], { expectedLastEventId: 0, generation: 1 });
        let last = 1;
        for (let chunk = 0; chunk < 6; chunk++) {
          const res = await store.append('long', steps(last + 1, 100), { expectedLastEventId: last, generation: 1 });
          last = res.lastEventId;
        }
        const seen: number[] = [];
        for await (const e of store.iterateEvents('long')) seen.push(e.eventId);
        expect(seen).toEqual(Array.from({ length: 601 }, (_, i) => i + 1));
        const some: number[] = [];
        for await (const e of store.iterateEvents('long', { fromEventId: 250, limit: 300 })) some.push(e.eventId);
        expect(some).toEqual(Array.from({ length: 300 }, (_, i) => i + 250));
      });

      it('keeps task ids apart even when one prefixes another', async () => {
        await store.append('a', [created(1)], { expectedLastEventId: 0, generation: 1 });
        await store.append('ab', [created(1), queued(2, 'x')], { expectedLastEventId: 0, generation: 1 });
        expect((await store.readEvents('a')).map((e) => e.eventId)).toEqual([1]);
        expect((await store.readEvents('ab')).map((e) => e.eventId)).toEqual([1, 2]);
      });

      it('is not corrupted by callers mutating what they passed or got back', async () => {
        const events: HistoryEvent[] = [created(1), queued(2, 'in-1')];
        await store.append('t1', events, { expectedLastEventId: 0, generation: 1 });
        (events[1] as { inputId: string }).inputId = 'mutated';
        const read = await store.readEvents('t1');
        expect((read[1] as { inputId: string }).inputId).toBe('in-1');
        (read[0] as { workflow: string }).workflow = 'mutated';
        const summary = (await store.getSummary('t1'))!;
        summary.status = 'completed';
        expect((await store.readEvents('t1'))[0]).toMatchObject({ workflow: 'wf' });
        expect((await store.getSummary('t1'))!.status).toBe('pending');
      });

      it('rejects invalid task ids and empty appends', async () => {
        await rejectsWith(store.append('', [created(1)], { expectedLastEventId: 0, generation: 1 }), 'TURNLOG_INVALID_ARGUMENT');
        await rejectsWith(store.append('a\0b', [created(1)], { expectedLastEventId: 0, generation: 1 }), 'TURNLOG_INVALID_ARGUMENT');
        await rejectsWith(store.append('t1', [], { expectedLastEventId: 0, generation: 1 }), 'TURNLOG_INVALID_ARGUMENT');
      });
    });

    describe('dense ids and fencing write nothing when they reject', () => {
      it('rejects ids that do not continue from expectedLastEventId + 1, naming the task', async () => {
        await createTask('t1');
        const err = await rejectsWith(
          store.append('t1', [step(3, 1), step(5, 2)], { expectedLastEventId: 2, generation: 1 }),
          'TURNLOG_INVALID_ARGUMENT',
        );
        expect(err.message).toContain('t1');
        await rejectsWith(store.append('t1', [step(2, 1)], { expectedLastEventId: 2, generation: 1 }), 'TURNLOG_INVALID_ARGUMENT');
        expect((await store.readEvents('t1')).length).toBe(2);
        expect((await store.getSummary('t1'))!.lastEventId).toBe(2);
      });

      it('rejects an event stamped with another generation than the append', async () => {
        await createTask('t1');
        await rejectsWith(
          store.append('t1', [step(3, 1, { generation: 2 })], { expectedLastEventId: 2, generation: 1 }),
          'TURNLOG_INVALID_ARGUMENT',
        );
        expect((await store.readEvents('t1')).length).toBe(2);
      });

      it('ConcurrencyError on a wrong expected id writes nothing', async () => {
        await createTask('t1');
        const before = await store.getSummary('t1');
        const err = await rejectsWith(store.append('t1', [step(2, 1)], { expectedLastEventId: 1, generation: 1 }), 'TURNLOG_CONCURRENCY');
        expect(err).toMatchObject({ taskId: 't1', expected: 1, actual: 2 });
        await rejectsWith(store.append('new', [created(2)], { expectedLastEventId: 1, generation: 1 }), 'TURNLOG_CONCURRENCY');
        expect((await store.readEvents('t1')).length).toBe(2);
        expect(await store.getSummary('t1')).toEqual(before);
        expect(await store.readEvents('new')).toEqual([]);
        expect(await store.getSummary('new')).toBeUndefined();
      });

      it('StaleGenerationError below the lease generation writes nothing', async () => {
        await createTask('t1');
        // The first lease has expired, so the takeover is allowed on every store (shared ones fence by instance).
        await store.claimLease('t1', { owner: 'engine', instance: 'i1', durationMs: 0, now: 0 });
        const next = await store.claimLease('t1', { owner: 'engine', instance: 'i2', durationMs: 1_000, now: 10 });
        expect(next.generation).toBe(2);
        const err = await rejectsWith(store.append('t1', [step(3, 1)], { expectedLastEventId: 2, generation: 1 }), 'TURNLOG_STALE_GENERATION');
        expect(err).toMatchObject({ taskId: 't1', generation: 1, current: 2 });
        expect((await store.readEvents('t1')).length).toBe(2);
        expect((await store.getSummary('t1'))!.lastEventId).toBe(2);
        await store.append('t1', [step(3, 1, { generation: 2 })], { expectedLastEventId: 2, generation: 2 });
      });

      it('StaleGenerationError below the highest generation in the history, even without a lease', async () => {
        await createTask('t1', { gen: 3 });
        await rejectsWith(store.append('t1', [step(3, 1, { generation: 2 })], { expectedLastEventId: 2, generation: 2 }), 'TURNLOG_STALE_GENERATION');
        expect((await store.readEvents('t1')).length).toBe(2);
      });

      it('fencing order: checks the generation before the expected id (a zombie is fenced, not told to retry)', async () => {
        await createTask('t1', { gen: 2 });
        const err = await rejectsWith(store.append('t1', [step(2, 1)], { expectedLastEventId: 1, generation: 1 }), 'TURNLOG_STALE_GENERATION');
        expect(err).toMatchObject({ taskId: 't1', generation: 1, current: 2 });
        expect((await store.readEvents('t1')).length).toBe(2);
      });

      it('fencing order: a zombie that missed a takeover gets StaleGenerationError, and nothing of it is written', async () => {
        await createTask('t1');
        const zombie = await store.claimLease('t1', { owner: 'engine', instance: 'i1', durationMs: 0, now: 0 });
        const next = await store.claimLease('t1', { owner: 'engine', instance: 'i2', durationMs: 1_000, now: 10 });
        await store.append('t1', [step(3, 1, { generation: next.generation })], { expectedLastEventId: 2, generation: next.generation });
        // The zombie still believes the history ends at 2: both checks fail, fencing wins.
        await rejectsWith(store.append('t1', [step(3, 1)], { expectedLastEventId: 2, generation: zombie.generation }), 'TURNLOG_STALE_GENERATION');
        expect((await store.readEvents('t1')).map((e) => e.generation)).toEqual([1, 1, 2]);
      });

      it('a current generation with a wrong expected id is still a ConcurrencyError', async () => {
        await createTask('t1', { gen: 2 });
        await rejectsWith(store.append('t1', [step(2, 1, { generation: 2 })], { expectedLastEventId: 1, generation: 2 }), 'TURNLOG_CONCURRENCY');
        expect((await store.readEvents('t1')).length).toBe(2);
      });
    });

    describe('leases', () => {

      callerClockIt('row 1: no lease → generation 1', async () => {
        const l = await store.claimLease('t1', req('a', 'i1', 0));
        expect(l).toEqual({ owner: 'a', instance: 'i1', generation: 1, expiresAt: 1_000 });
        expect(await store.getLease('t1')).toEqual(l);
      });

      callerClockIt('row 2: same owner and instance → same generation (renewal)', async () => {
        await store.claimLease('t1', req('a', 'i1', 0));
        const l = await store.claimLease('t1', req('a', 'i1', 500));
        expect(l).toEqual({ owner: 'a', instance: 'i1', generation: 1, expiresAt: 1_500 });
      });

      if (capabilities.exclusive === false) {
        // A shared store fences by instance: two engines with one owner never take each other's turns.
        it('row 3 (shared store): same owner, new instance, live → LeaseHeldError, lease unchanged', async () => {
          const held = await store.claimLease('t1', req('a', 'i1', 0));
          const err = await rejectsWith(store.claimLease('t1', req('a', 'i2', 500)), 'TURNLOG_LEASE_HELD');
          expect(err.message).toContain('i1');
          expect(await store.getLease('t1')).toEqual(held);
        });
      } else {
        it('row 3: same owner, new instance → generation + 1 (even while live)', async () => {
          await store.claimLease('t1', req('a', 'i1', 0));
          const l = await store.claimLease('t1', req('a', 'i2', 500));
          expect(l.generation).toBe(2);
          expect(l.instance).toBe('i2');
        });
      }

      callerClockIt('row 4: foreign owner, expired → generation + 1', async () => {
        await store.claimLease('t1', req('a', 'i1', 0));
        const l = await store.claimLease('t1', req('b', 'j1', 1_000));
        expect(l).toEqual({ owner: 'b', instance: 'j1', generation: 2, expiresAt: 2_000 });
      });

      it('row 5: foreign owner, live → LeaseHeldError, lease unchanged', async () => {
        const held = await store.claimLease('t1', req('a', 'i1', 0));
        const err = await rejectsWith(store.claimLease('t1', req('b', 'j1', 999)), 'TURNLOG_LEASE_HELD');
        expect(err).toMatchObject({ taskId: 't1', owner: 'a', instance: 'i1' });
        expect(await store.getLease('t1')).toEqual(held);
      });

      it('a claim never goes below the generation already in the history', async () => {
        await createTask('t1', { gen: 4 });
        expect((await store.claimLease('t1', req('a', 'i1', 0))).generation).toBe(4);
      });

      callerClockIt('claims in the same batch as an append', async () => {
        await createTask('t1');
        const lease: Lease = { owner: 'a', instance: 'i1', generation: 1, expiresAt: 5_000 };
        await store.append('t1', [started(3, 1)], { expectedLastEventId: 2, generation: 1, lease });
        expect(await store.getLease('t1')).toEqual(lease);
        // A new instance takes over with generation 2 in its TurnStarted append.
        const takeover: Lease = { owner: 'a', instance: 'i2', generation: 2, expiresAt: 9_000 };
        await store.append('t1', [started(4, 1, { generation: 2, instance: 'i2' })], { expectedLastEventId: 3, generation: 2, lease: takeover });
        expect(await store.getLease('t1')).toEqual(takeover);
        await rejectsWith(store.append('t1', [step(5, 1)], { expectedLastEventId: 4, generation: 1 }), 'TURNLOG_STALE_GENERATION');
      });

      it('a claim-in-append against a foreign live lease is LeaseHeldError and writes nothing', async () => {
        await createTask('t1');
        const held = await store.claimLease('t1', req('a', 'i1', 1_000, 10_000));
        const lease: Lease = { owner: 'b', instance: 'j1', generation: 2, expiresAt: 20_000 };
        await rejectsWith(
          store.append('t1', [started(3, 1, { generation: 2, time: 2_000 })], { expectedLastEventId: 2, generation: 2, lease }),
          'TURNLOG_LEASE_HELD',
        );
        expect(await store.getLease('t1')).toEqual(held);
        expect((await store.readEvents('t1')).length).toBe(2);
      });

      it('a claim-in-append below the table generation is StaleGenerationError and writes nothing', async () => {
        await createTask('t1');
        await store.claimLease('t1', req('a', 'i1', 0, 0));
        // New instance (the old lease expired), but it claims generation 1 where the table says 2.
        const lease: Lease = { owner: 'a', instance: 'i2', generation: 1, expiresAt: 9_000 };
        await rejectsWith(store.append('t1', [started(3, 1)], { expectedLastEventId: 2, generation: 1, lease }), 'TURNLOG_STALE_GENERATION');
        expect((await store.readEvents('t1')).length).toBe(2);
        expect((await store.getLease('t1'))!.instance).toBe('i1');
      });

      callerClockIt('renews the holder and fences a zombie', async () => {
        const mine = await store.claimLease('t1', req('a', 'i1', 0));
        const renewed = await store.renewLease('t1', mine, 2_000, 800);
        expect(renewed).toEqual({ ...mine, expiresAt: 2_800 });
        // Another instance takes over after expiry; the old holder's renewal is stale.
        const theirs = await store.claimLease('t1', req('b', 'j1', 3_000));
        await rejectsWith(store.renewLease('t1', mine, 1_000, 3_100), 'TURNLOG_STALE_GENERATION');
        expect(await store.getLease('t1')).toEqual(theirs);
      });

      it('renewal by a different holder at the same generation while live is LeaseHeldError', async () => {
        const mine = await store.claimLease('t1', req('a', 'i1', 0));
        await rejectsWith(store.renewLease('t1', { ...mine, owner: 'z' }, 1_000, 10), 'TURNLOG_LEASE_HELD');
      });

      callerClockIt('release expires the lease now; releasing a lease one no longer holds is a no-op', async () => {
        const mine = await store.claimLease('t1', req('a', 'i1', 0, 10_000));
        await store.releaseLease('t1', mine, 100);
        expect(await store.getLease('t1')).toEqual({ ...mine, expiresAt: 100 });
        const theirs = await store.claimLease('t1', req('b', 'j1', 200));
        expect(theirs.generation).toBe(2);
        await store.releaseLease('t1', mine, 300);
        expect(await store.getLease('t1')).toEqual(theirs);
        await store.releaseLease('unknown', mine, 300);
      });

      callerClockIt('lists recoverable tasks: in progress with a missing, expired or other instance lease', async () => {
        const open = async (id: string) => {
          await createTask(id);
          await store.append(id, [started(3, 1)], { expectedLastEventId: 2, generation: 1 });
        };
        await open('no-lease');
        await open('expired');
        await store.claimLease('expired', req('e', 'i1', 0, 100));
        await open('other-instance');
        await store.claimLease('other-instance', req('e', 'old', 0, 1_000_000));
        await open('mine');
        await store.claimLease('mine', req('e', 'me', 0, 1_000_000));
        await createTask('pending');
        await open('done');
        await store.append('done', [turnCompleted(4, 1), taskCompleted(5)], { expectedLastEventId: 3, generation: 1 });
        expect(await store.listRecoverable(500, 'me')).toEqual(['expired', 'no-lease', 'other-instance']);
      });
    });

    describe('claimDueWork', () => {
      /** One task of each kind; returns nothing, the ids say what they are. */
      async function population() {
        const open = async (id: string) => {
          await createTask(id);
          await store.append(id, [started(3, 1)], { expectedLastEventId: 2, generation: 1 });
        };
        await open('run-1');
        await open('run-2');
        await createTask('pend-1');
        await createTask('pend-2');
        for (const id of ['idle', 'wait-1', 'wait-2']) {
          await createTask(id, { kind: 'multi-turn' });
          // The turn takes the first input, so the task is suspended with nothing queued.
          await store.append(id, [{ ...started(3, 1), inputIds: ['in-1'] } as HistoryEvent, turnCompleted(4, 1)], { expectedLastEventId: 2, generation: 1 });
        }
        for (const [n, id] of ['wait-1', 'wait-2'].entries()) await store.append(id, [queued(5, `more-${n}`)], { expectedLastEventId: 4, generation: 1 });
        for (const [id, time] of [['old', 10_000], ['new', 90_000]] as const) {
          await createTask(id);
          await store.append(id, [started(3, 1), turnCompleted(4, 1), taskCompleted(5, { time })], { expectedLastEventId: 2, generation: 1 });
        }
      }
      const all = async (request: { limit: number; retentionMs?: number; now?: number; reasons?: DueReason[] }) => {
        const seen: DueBatch['tasks'] = [];
        let cursor: string | undefined;
        for (let batches = 0; batches < 50; batches++) {
          const batch = await store.claimDueWork({ now: request.now ?? 100_000, instance: 'me', ...request, ...(cursor === undefined ? {} : { cursor }) });
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
        await store.markCorrupt({ taskId: 'old', key: 'events/old/2', code: 'TURNLOG_HISTORY_CORRUPT', message: 'garbled', time: 5 });
        expect((await all({ limit: 100, retentionMs: 50_000 })).filter((d) => d.reason === 'retention')).toEqual([]);
        // A claim deletes nothing itself.
        expect(await store.getSummary('old')).toBeDefined();
      });

      it('bounded batches: each due task once, whatever the batch size', async () => {
        await population();
        const whole = await all({ limit: 100, retentionMs: 50_000 });
        for (const limit of [1, 2, 3, 7]) expect(await all({ limit, retentionMs: 50_000 })).toEqual(whole);
      });

      callerClockIt('judges leases: expired and other instances are due on an exclusive store, its own live lease is not', async () => {
        await population();
        await store.claimLease('run-1', req('e', 'me', 0, 1_000_000));
        await store.claimLease('run-2', req('e', 'old', 0, 100));
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

      it('a store that claims (supports.claim) hands a task to one instance until released', async () => {
        if (!store.supports.claim) return;
        await population();
        const claim = (instance: string) => store.claimDueWork({ now: 100_000, instance, limit: 100, claimMs: 600_000 });
        const mine = (await claim('a')).tasks.map((d) => d.taskId);
        expect(mine).toEqual(['run-1', 'run-2', 'pend-1', 'pend-2', 'wait-1', 'wait-2']);
        expect((await claim('b')).tasks).toEqual([]);
        // Its own claims come back to the same instance (a later pass of the same engine).
        expect((await claim('a')).tasks.map((d) => d.taskId)).toEqual(mine);
        await store.releaseDueWork!(['pend-1', 'wait-2'], 'a');
        await store.releaseDueWork!(['run-1'], 'b'); // not b's: left alone
        expect((await claim('b')).tasks.map((d) => d.taskId)).toEqual(['pend-1', 'wait-2']);
      });

      it('refuses a limit below 1 and a cursor it did not make', async () => {
        await rejectsWith(store.claimDueWork({ now: 0, instance: 'me', limit: 1, claimMs: 0 }), 'TURNLOG_INVALID_ARGUMENT');
        await rejectsWith(store.claimDueWork({ now: 0, instance: 'me', limit: 0 }), 'TURNLOG_INVALID_ARGUMENT');
        await rejectsWith(store.claimDueWork({ now: 0, instance: 'me', limit: 1, cursor: 'nonsense' }), 'TURNLOG_INVALID_ARGUMENT');
      });
    });

    describe('summaries', () => {
      it('follows a one-shot task to completion', async () => {
        await createTask('t1');
        expect(await store.getSummary('t1')).toMatchObject({ status: 'pending', queued: 1, lastInputId: 'in-1', turn: 0, createdAt: 1_000 });
        await store.append('t1', [{ ...started(3, 1), inputIds: ['in-1'] } as HistoryEvent], { expectedLastEventId: 2, generation: 1 });
        expect(await store.getSummary('t1')).toMatchObject({ status: 'in_progress', queued: 0, turn: 1 });
        await store.append('t1', [turnCompleted(4, 1), taskCompleted(5, { time: 9_000 })], { expectedLastEventId: 3, generation: 1 });
        expect(await store.getSummary('t1')).toMatchObject({ status: 'completed', outcome: 'succeeded', lastEventId: 5, updatedAt: 9_000 });
      });

      it('leaves a multi-turn task suspended after a turn', async () => {
        await createTask('m1', { kind: 'multi-turn' });
        await store.append('m1', [started(3, 1), turnCompleted(4, 1)], { expectedLastEventId: 2, generation: 1 });
        expect(await store.getSummary('m1')).toMatchObject({ kind: 'multi-turn', status: 'suspended', turn: 1 });
      });
    });

    describe('listTasks', () => {
      beforeEach(async () => {
        for (let i = 0; i < 7; i++) await createTask(`a-${i}`, { workflow: 'alpha' });
        for (let i = 0; i < 5; i++) await createTask(`b-${i}`, { workflow: 'beta' });
        for (const id of ['a-1', 'a-3', 'b-2']) {
          await store.append(id, [started(3, 1)], { expectedLastEventId: 2, generation: 1 });
        }
      });
      const ids = (page: { tasks: { taskId: string }[] }) => page.tasks.map((t) => t.taskId);

      it('lists all, by status, by workflow and by both', async () => {
        expect(ids(await store.listTasks())).toHaveLength(12);
        expect(ids(await store.listTasks({ status: 'in_progress' })).sort()).toEqual(['a-1', 'a-3', 'b-2']);
        expect(ids(await store.listTasks({ workflow: 'beta' }))).toEqual(['b-0', 'b-1', 'b-2', 'b-3', 'b-4']);
        expect(ids(await store.listTasks({ status: 'pending', workflow: 'alpha' }))).toEqual(['a-0', 'a-2', 'a-4', 'a-5', 'a-6']);
        expect(ids(await store.listTasks({ status: 'completed' }))).toEqual([]);
        expect(ids(await store.listTasks({ workflow: 'gamma' }))).toEqual([]);
      });

      it('pages with a cursor, each task once', async () => {
        for (const filter of [{}, { status: 'pending' as const }, { workflow: 'alpha' }, { status: 'pending' as const, workflow: 'alpha' }]) {
          const all = ids(await store.listTasks({ ...filter, limit: 1_000 }));
          const seen: string[] = [];
          let cursor: string | undefined;
          for (let pages = 0; pages < 20; pages++) {
            const page = await store.listTasks({ ...filter, limit: 2, ...(cursor === undefined ? {} : { cursor }) });
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
        await store.append('a-1', [turnCompleted(4, 1), taskCompleted(5)], { expectedLastEventId: 3, generation: 1 });
        expect(ids(await store.listTasks({ status: 'completed' }))).toEqual(['a-1']);
        expect(ids(await store.listTasks({ status: 'in_progress' })).sort()).toEqual(['a-3', 'b-2']);
      });
    });

    describe('snapshots', () => {
      it('stores and returns a snapshot; rejects one beyond the history', async () => {
        await createTask('t1');
        await store.putSnapshot('t1', { eventId: 2, data: new Uint8Array([1, 2, 3]) });
        const snap = (await store.getSnapshot('t1'))!;
        expect(snap.eventId).toBe(2);
        expect([...snap.data]).toEqual([1, 2, 3]);
        snap.data[0] = 9;
        expect([...(await store.getSnapshot('t1'))!.data]).toEqual([1, 2, 3]);
        await rejectsWith(store.putSnapshot('t1', { eventId: 3, data: new Uint8Array() }), 'TURNLOG_INVALID_ARGUMENT');
        await rejectsWith(store.putSnapshot('none', { eventId: 1, data: new Uint8Array() }), 'TURNLOG_INVALID_ARGUMENT');
      });
    });

    describe('readTaskStart', () => {
      // Optional: a store without it is read by getSnapshot, readEvents and getLease instead.
      it('equals getSnapshot, the limited readEvents after the snapshot and getLease', async () => {
        const readTaskStart = store.readTaskStart?.bind(store);
        if (!readTaskStart) return;
        const ids = (evs: HistoryEvent[]) => evs.map((e) => e.eventId);
        expect(await readTaskStart('t1', 100)).toEqual({ snapshot: undefined, events: [], lease: undefined });
        const events = [created(1), ...steps(2, 9)];
        await store.append('t1', events, { expectedLastEventId: 0, generation: 1 });
        await store.append('t10', [created(1, { workflow: 'other' }), ...steps(2, 20)], { expectedLastEventId: 0, generation: 1 });
        await store.putSnapshot('t10', { eventId: 5, data: new Uint8Array([5]) });
        await store.claimLease('t10', { owner: 'o', instance: 'i10', durationMs: 1_000, now: 0 });
        expect(await readTaskStart('t1', 4)).toEqual({ snapshot: undefined, events: events.slice(0, 4), lease: undefined });
        expect(await readTaskStart('t1', 100)).toEqual({ snapshot: undefined, events, lease: undefined });
        await store.putSnapshot('t1', { eventId: 3, data: new Uint8Array([1, 2, 3]) });
        const lease = await store.claimLease('t1', { owner: 'engine', instance: 'i1', durationMs: 1_000, now: 0 });
        const full = await readTaskStart('t1', 4);
        expect(ids(full.events)).toEqual([4, 5, 6, 7]);
        expect(full).toEqual({ snapshot: await store.getSnapshot('t1'), events: await store.readEvents('t1', { fromEventId: 4, limit: 4 }), lease: await store.getLease('t1') });
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

    describe('compaction', () => {
      // Stores without the optional compactHistory skip compaction; nothing to prove then.
      it('compactHistory replaces events 2..N and keeps the dropped input ids (across a reopen)', async () => {
        if (!store.compactHistory) return;
        const b = historyBuilder('c1').created({ kind: 'multi-turn' });
        for (let i = 1; i <= 4; i++) b.input(`m${i}`, { id: `req-${i}` }).turnStarted().suspended('waiting', { state: { n: i } });
        const events = b.build();
        await store.append('c1', events, { expectedLastEventId: 0, generation: 1 });
        const c = compaction('c1', events, 2)!;
        await store.compactHistory('c1', c);
        const read = async () => (await store.readEvents('c1')).map((e) => e.eventId);
        const kept = events.filter((e) => e.eventId > c.throughEventId).map((e) => e.eventId);
        expect(await read()).toEqual([1, 2, ...kept]);
        const second = (await store.readEvents('c1', { fromEventId: 2, toEventId: 2 }))[0];
        expect(second).toMatchObject({ type: 'HistoryCompacted', throughEventId: c.throughEventId, droppedInputIds: ['req-1', 'req-2'] });
        if (fx.reopen) {
          store = await fx.reopen();
          expect((await store.readEvents('c1'))[1]).toMatchObject({ droppedInputIds: ['req-1', 'req-2'] });
        }
      });
    });

    describe('deletion and retention', () => {
      it('deleteTask removes history, summary, lease, snapshot and index entries', async () => {
        await createTask('t1');
        await store.claimLease('t1', { owner: 'a', instance: 'i1', durationMs: 1_000, now: 0 });
        await store.putSnapshot('t1', { eventId: 1, data: new Uint8Array([7]) });
        await createTask('t2');
        await store.deleteTask('t1');
        expect(await store.readEvents('t1')).toEqual([]);
        expect(await store.getSummary('t1')).toBeUndefined();
        expect(await store.getLease('t1')).toBeUndefined();
        expect(await store.getSnapshot('t1')).toBeUndefined();
        expect((await store.listTasks()).tasks.map((t) => t.taskId)).toEqual(['t2']);
        expect((await store.listTasks({ status: 'pending' })).tasks.map((t) => t.taskId)).toEqual(['t2']);
        expect((await store.listTasks({ workflow: 'wf' })).tasks.map((t) => t.taskId)).toEqual(['t2']);
        // The id can be used again.
        await createTask('t1');
        expect((await store.readEvents('t1')).length).toBe(2);
        await store.deleteTask('never-existed');
      });

      it('purgeCompleted deletes only completed tasks older than the retention', async () => {
        const finish = async (id: string, time: number) => {
          await createTask(id);
          await store.append(id, [started(3, 1), turnCompleted(4, 1), taskCompleted(5, { time })], { expectedLastEventId: 2, generation: 1 });
        };
        await finish('old', 10_000);
        await finish('recent', 90_000);
        await createTask('running');
        const purged = await store.purgeCompleted(50_000, 100_000);
        expect(purged).toEqual(['old']);
        expect(await store.readEvents('old')).toEqual([]);
        expect(await store.getSummary('recent')).toMatchObject({ status: 'completed' });
        expect(await store.getSummary('running')).toMatchObject({ status: 'pending' });
        expect(await store.purgeCompleted(50_000, 100_000)).toEqual([]);
      });
    });

    describe('corrupt marks', () => {
      const mark = (taskId: string) => ({ taskId, key: `events/${taskId}/2`, code: 'TURNLOG_HISTORY_CORRUPT', message: 'garbled', time: 5 });

      it('records a mark without touching the task, shows it in listTasks, keeps it from retention', async () => {
        await createTask('a');
        await createTask('b');
        await store.append('b', [started(3, 1), turnCompleted(4, 1), taskCompleted(5, { time: 10 })], { expectedLastEventId: 2, generation: 1 });
        const before = await store.readEvents('b');
        expect(await store.listCorrupt()).toEqual([]);
        await store.markCorrupt(mark('b'));
        expect(await store.listCorrupt()).toEqual([mark('b')]);
        expect(await store.readEvents('b')).toEqual(before);
        const tasks = (await store.listTasks()).tasks;
        expect(tasks.find((t) => t.taskId === 'b')?.corrupt).toEqual({ key: 'events/b/2', code: 'TURNLOG_HISTORY_CORRUPT', message: 'garbled' });
        expect(tasks.find((t) => t.taskId === 'a')?.corrupt).toBeUndefined();
        expect((await store.listTasks({ status: 'completed' })).tasks[0]?.corrupt?.key).toBe('events/b/2');
        expect(await store.purgeCompleted(0, 1e12)).toEqual([]);
        expect(await store.getSummary('b')).toBeDefined();
        // Deleting the task (for example to import a repaired copy) clears its mark.
        await store.deleteTask('b');
        expect(await store.listCorrupt()).toEqual([]);
      });

      it('refuses a mark for an invalid task id', async () => {
        await rejectsWith(store.markCorrupt(mark('x\ud800')), 'TURNLOG_INVALID_ARGUMENT');
      });
    });

    describe('group commit', () => {
      it('100 concurrent appenders: each task keeps its order and nothing is lost', async () => {
        const tasks = Array.from({ length: 100 }, (_, i) => `task-${String(i).padStart(3, '0')}`);
        await Promise.all(
          tasks.map(async (id) => {
            await store.append(id, [created(1)], { expectedLastEventId: 0, generation: 1 });
            for (let n = 2; n <= 10; n++) await store.append(id, [step(n, n - 1)], { expectedLastEventId: n - 1, generation: 1 });
          }),
        );
        for (const id of tasks) {
          expect((await store.readEvents(id)).map((e) => e.eventId)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
          expect((await store.getSummary(id))!.lastEventId).toBe(10);
        }
        expect((await store.listTasks({ limit: 1_000 })).tasks).toHaveLength(100);
      });

      it('pipelined appends to one task (not awaited) land in order', async () => {
        await store.append('t1', [created(1)], { expectedLastEventId: 0, generation: 1 });
        const results = await Promise.all(
          Array.from({ length: 20 }, (_, i) => store.append('t1', [step(i + 2, i + 1)], { expectedLastEventId: i + 1, generation: 1 })),
        );
        expect(results.map((r) => r.lastEventId)).toEqual(Array.from({ length: 20 }, (_, i) => i + 2));
        expect((await store.readEvents('t1')).map((e) => e.eventId)).toEqual(Array.from({ length: 21 }, (_, i) => i + 1));
      });

      it('one invalid append among 100 concurrent ones fails alone; the others land', async () => {
        const tasks = Array.from({ length: 100 }, (_, i) => `g-${i}`);
        for (const id of tasks) await store.append(id, [created(1)], { expectedLastEventId: 0, generation: 1 });
        const settled = await Promise.allSettled(
          tasks.map((id, i) =>
            store.append(id, [step(2, 1), step(3, 2)], { expectedLastEventId: i === 42 ? 5 : 1, generation: 1 }),
          ),
        );
        const rejected = settled.flatMap((s, i) => (s.status === 'rejected' ? [[i, s.reason] as const] : []));
        expect(rejected).toHaveLength(1);
        expect(rejected[0]![0]).toBe(42);
        expect(isTurnlogError(rejected[0]![1], 'TURNLOG_CONCURRENCY')).toBe(true);
        for (const [i, id] of tasks.entries()) {
          expect((await store.readEvents(id)).length).toBe(i === 42 ? 1 : 3);
        }
      });
    });

    describe('lifecycle', () => {
      it('a closed store rejects calls with TURNLOG_STORE_CLOSED', async () => {
        await store.close();
        await rejectsWith(store.append('t1', [created(1)], { expectedLastEventId: 0, generation: 1 }), 'TURNLOG_STORE_CLOSED');
        await rejectsWith(store.readEvents('t1'), 'TURNLOG_STORE_CLOSED');
        await rejectsWith(store.listTasks(), 'TURNLOG_STORE_CLOSED');
      });

      // Registered only for persistent backends, so no test is reported as skipped.
      if (capabilities.persistent) it('keeps everything across a reopen, including fencing state', async () => {
        if (!fx.reopen) throw new Error('a persistent backend fixture must provide reopen()');
        await createTask('t1', { gen: 2 });
        await store.claimLease('t1', { owner: 'a', instance: 'i1', durationMs: 1_000, now: 0 });
        await store.putSnapshot('t1', { eventId: 2, data: new Uint8Array([5]) });
        await createTask('t2');
        store = await fx.reopen();
        expect((await store.readEvents('t1')).map((e) => e.type)).toEqual(['TaskCreated', 'InputQueued']);
        expect(await store.getSummary('t1')).toMatchObject({ lastEventId: 2, status: 'pending' });
        expect(await store.getLease('t1')).toMatchObject({ owner: 'a', generation: 2 });
        expect((await store.getSnapshot('t1'))!.eventId).toBe(2);
        await rejectsWith(store.append('t1', [step(3, 1)], { expectedLastEventId: 2, generation: 1 }), 'TURNLOG_STALE_GENERATION');
        await rejectsWith(store.append('t1', [step(3, 1, { generation: 2 })], { expectedLastEventId: 1, generation: 2 }), 'TURNLOG_CONCURRENCY');
        await store.append('t1', [step(3, 1, { generation: 2 })], { expectedLastEventId: 2, generation: 2 });
        expect((await store.listTasks()).tasks.map((t) => t.taskId)).toEqual(['t1', 't2']);
      });
    });
  });
}
