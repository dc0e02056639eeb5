/**
 * The one-statement append (store/postgres-append.ts) against the rules: whatever another writer
 * did to the task behind the store's back (appended, took or renewed the lease, changed the
 * summary or the generation floor), an append ends exactly as `applyAppend` decides on the head
 * in the database, and writes exactly its rows. Both paths (one statement, locked) are exercised.
 */
import fc from 'fast-check';
import pg from 'pg';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import type { HistoryEvent, Lease } from '../../src/history/events.js';
import type { AppendOptions } from '../../src/store/history-store.js';
import { createPostgresStore, type PostgresHistoryStore } from '../../src/store/postgres-store.js';
import { ClockFrame, toLease, toSummary, type LeaseRow, type SummaryRow } from '../../src/store/postgres-rows.js';
import { applyAppend, type TaskHead } from '../../src/store/task-head.js';
import { PG_URL, describePg, dropSchema, uniqueSchema, withClient } from '../helpers/postgres.js';
import { created, step } from './events.js';

type Meddle = 'none' | 'append' | 'renew' | 'take-lease' | 'summary' | 'floor' | 'delete-lease';

describePg('PostgreSQL one-statement append', () => {
  const schema = uniqueSchema('turnlog_cas');
  let a: PostgresHistoryStore;
  let b: PostgresHistoryStore;
  beforeAll(async () => {
    a = createPostgresStore({ connectionString: PG_URL, schema, max: 2, groupCommit: false });
    b = createPostgresStore({ connectionString: PG_URL, schema, max: 2, groupCommit: false });
    await a.open();
    await b.open();
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await dropSchema(schema);
  });

  async function realHead(taskId: string): Promise<{ head: TaskHead; dbNow: number }> {
    return withClient(async (c) => {
      const res = await c.query(
        `SELECT (SELECT row_to_json(s) FROM "${schema}".summaries s WHERE task_id = $1) AS s,
                (SELECT row_to_json(l) FROM (SELECT owner, instance, generation, expires_at FROM "${schema}".leases WHERE task_id = $1) l) AS l,
                floor(extract(epoch from clock_timestamp()) * 1000)::bigint AS now`,
        [taskId],
      );
      const row = res.rows[0] as { s: SummaryRow | null; l: LeaseRow | null; now: string };
      return {
        dbNow: Number(row.now),
        head: {
          lastEventId: row.s ? Number(row.s.last_event_id) : 0,
          maxGeneration: row.s ? Number(row.s.max_generation) : 0,
          lease: row.l ? toLease(row.l) : undefined,
          summary: row.s ? toSummary(row.s) : undefined,
        },
      };
    });
  }

  async function eventCount(taskId: string): Promise<number> {
    return withClient(async (c) => (await c.query(`SELECT count(*)::int AS n FROM "${schema}".events WHERE task_id = $1`, [taskId])).rows[0].n as number);
  }

  const scenario = fc.record({
    meddle: fc.constantFrom<Meddle>('none', 'none', 'append', 'renew', 'take-lease', 'summary', 'floor', 'delete-lease'),
    expOffset: fc.integer({ min: -1, max: 1 }),
    generation: fc.integer({ min: 1, max: 3 }),
    leaseKind: fc.constantFrom<'none' | 'own' | 'other'>('none', 'none', 'own', 'other'),
    count: fc.integer({ min: 1, max: 2 }),
  });
  type Scenario = typeof scenario extends fc.Arbitrary<infer T> ? T : never;
  let n = 0;

  /**
   * Writes a task through `store` (which so remembers its head), moves the head behind its back
   * as `sc.meddle` says, and returns the append to try with a check of its outcome against
   * `applyAppend` on the head in the database.
   */
  async function prepare(store: PostgresHistoryStore, sc: Scenario): Promise<() => Promise<void>> {
    const { meddle, expOffset, generation, leaseKind, count } = sc;
    const taskId = `t${n++}`;
    const now = Date.now();
    const leaseA: Lease = { owner: 'engine', instance: 'iA', generation: 1, expiresAt: now + 60_000 };
    await store.append(taskId, [created(1)], { expectedLastEventId: 0, generation: 1, lease: leaseA });
    await store.append(taskId, [step(2, 1)], { expectedLastEventId: 1, generation: 1 });
    // Another writer moves the head behind the store's back (it still remembers event 2).
    if (meddle === 'append') await b.append(taskId, [step(3, 2)], { expectedLastEventId: 2, generation: 1 });
    if (meddle === 'renew') await b.renewLease(taskId, leaseA, 90_000, Date.now());
    if (meddle === 'take-lease') {
      await b.releaseLease(taskId, leaseA, Date.now());
      await b.claimLease(taskId, { owner: 'engine', instance: 'iB', durationMs: 60_000, now: Date.now() });
    }
    await withClient(async (c) => {
      if (meddle === 'summary') await c.query(`UPDATE "${schema}".summaries SET queued = queued + 1 WHERE task_id = $1`, [taskId]);
      if (meddle === 'floor') await c.query(`UPDATE "${schema}".summaries SET max_generation = 2 WHERE task_id = $1`, [taskId]);
      if (meddle === 'delete-lease') await c.query(`DELETE FROM "${schema}".leases WHERE task_id = $1`, [taskId]);
    });

    const { head, dbNow } = await realHead(taskId);
    const exp = Math.max(1, 2 + expOffset);
    const events: HistoryEvent[] = Array.from({ length: count }, (_, i) => step(exp + 1 + i, 10 + i, { generation, time: now + i }));
    const callerNow = now + count - 1;
    const options: AppendOptions = { expectedLastEventId: exp, generation };
    if (leaseKind !== 'none') options.lease = { owner: 'engine', instance: leaseKind === 'own' ? 'iA' : 'iC', generation, expiresAt: callerNow + 30_000 };

    let want: TaskHead | Error;
    try {
      want = applyAppend(taskId, new ClockFrame(dbNow, callerNow).headToCaller(head), events, options, true);
    } catch (err) {
      want = err as Error;
    }
    return async () => {
      const got = await store.append(taskId, events, options).catch((err: Error) => err);
      if (want instanceof Error) {
        expect(got, `${meddle}: ${want.message}`).toBeInstanceOf(Error);
        expect((got as { code?: string }).code).toBe((want as { code?: string }).code);
        expect((await realHead(taskId)).head).toEqual(head);
        // Refused: not one event row either (the statement's inserts are fenced like its summary).
        expect(await eventCount(taskId)).toBe(head.lastEventId);
        return;
      }
      expect(got, `${meddle}`).not.toBeInstanceOf(Error);
      expect(got).toEqual({ lastEventId: want.lastEventId, summary: want.summary });
      const after = (await realHead(taskId)).head;
      expect(after.summary).toEqual(want.summary);
      expect(after.maxGeneration).toBe(want.maxGeneration);
      const { expiresAt: _a, ...lease } = after.lease ?? { expiresAt: 0 };
      const { expiresAt: _w, ...wantLease } = want.lease ?? { expiresAt: 0 };
      expect(lease).toEqual(wantLease);
      // The written lease keeps the caller's remaining time on the database clock.
      if (options.lease) expect(Math.abs(after.lease!.expiresAt - (dbNow + 30_000))).toBeLessThan(10_000);
      expect((await store.readEvents(taskId, { fromEventId: exp + 1 })).map((e) => e.eventId)).toEqual(events.map((e) => e.eventId));
    };
  }

  it('ends every append as applyAppend decides on the head in the database, whatever moved it', async () => {
    await fc.assert(
      fc.asyncProperty(scenario, async (sc) => (await prepare(a, sc))()),
      { numRuns: 60 },
    );
    expect(a.appendPaths.oneStatement).toBeGreaterThan(0);
    expect(a.appendPaths.locked).toBeGreaterThan(0);
  }, 120_000);

  // A pool of 3 or more keeps a connection for lone appends (postgres-appender.ts #lone, pg's
  // callback form): the same oracle on that path, with and without group commit.
  it.each([false, true])('on the kept connection (lone path, groupCommit %s), every append ends as applyAppend decides', async (groupCommit) => {
    const k = createPostgresStore({ connectionString: PG_URL, schema, max: 4, groupCommit });
    await k.open();
    const query = vi.spyOn(pg.Client.prototype, 'query');
    try {
      await fc.assert(
        fc.asyncProperty(scenario, async (sc) => (await prepare(k, sc))()),
        { numRuns: 40 },
      );
      // The callback form is #lone's alone: the path under test was taken.
      expect(query.mock.calls.filter((c) => typeof c[1] === 'function' && /^WITH [sw] AS/.test(String((c[0] as { text?: unknown }).text))).length).toBeGreaterThan(40);
      expect(k.appendPaths.locked).toBeGreaterThan(0);
    } finally {
      query.mockRestore();
      await k.close();
    }
  }, 180_000);

  it('in a group commit, each task of the batch statement ends as applyAppend decides; a moved head fails or re-runs alone', async () => {
    // max 2: one batch in flight, so of four appends at once the last three share a statement.
    const c = createPostgresStore({ connectionString: PG_URL, schema, max: 2 });
    await c.open();
    try {
      await fc.assert(
        fc.asyncProperty(fc.array(scenario, { minLength: 4, maxLength: 4 }), async (scs) => {
          const runs = [];
          for (const sc of scs) runs.push(await prepare(c, sc));
          await Promise.all(runs.map((r) => r()));
        }),
        { numRuns: 25 },
      );
      expect(c.groupCommitStats().appends).toBeGreaterThan(c.groupCommitStats().batches);
      expect(c.appendPaths.oneStatement).toBeGreaterThan(0);
      expect(c.appendPaths.locked).toBeGreaterThan(0);
    } finally {
      await c.close();
    }
  }, 180_000);
});

describePg('PostgreSQL one-statement append, options', () => {
  it('runs unprepared (preparedStatements: false) and without waiting for the flush (sync: false)', async () => {
    const schema = uniqueSchema('turnlog_cas');
    const store = createPostgresStore({ connectionString: PG_URL, schema, max: 2, groupCommit: false, preparedStatements: false, sync: false });
    try {
      await store.open();
      await store.append('t', [created(1)], { expectedLastEventId: 0, generation: 1 });
      await store.append('t', [step(2, 1)], { expectedLastEventId: 1, generation: 1, sync: true });
      await store.append('t', [step(3, 2)], { expectedLastEventId: 2, generation: 1 });
      expect(store.appendPaths).toEqual({ oneStatement: 3, locked: 0 });
      expect((await store.readEvents('t')).map((e) => e.eventId)).toEqual([1, 2, 3]);
      expect((await store.getSummary('t'))?.lastEventId).toBe(3);
      // A task's first load too is sent unprepared (no name): same answer.
      expect((await store.readTaskStart('t', 2)).events.map((e) => e.eventId)).toEqual([1, 2]);
    } finally {
      await store.close();
      await dropSchema(schema);
    }
  });
});

describePg('PostgreSQL group commit, a failing batch statement', () => {
  it('falls back to the locked path and warns once per cause (not for contention)', async () => {
    const schema = uniqueSchema('turnlog_cas');
    const real = new pg.Pool({ connectionString: PG_URL, max: 2 });
    let failWith: string | undefined = '42P01';
    // Every batch statement fails with failWith's code (as one failing for a server setting or a bug would).
    const fail = (config: unknown) => failWith !== undefined && typeof config === 'object' && String((config as { text?: string }).text).startsWith('WITH x AS MATERIALIZED');
    const pool = {
      connect: async () => {
        const c = await real.connect();
        return new Proxy(c, {
          get(target, key) {
            if (key === 'query') {
              return (config: unknown, values?: unknown[]) =>
                fail(config) ? Promise.reject(Object.assign(new Error(`injected ${failWith}`), { code: failWith })) : target.query(config as string, values);
            }
            const v = Reflect.get(target, key) as unknown;
            return typeof v === 'function' ? v.bind(target) : v;
          },
        });
      },
      query: (text: string, values?: unknown[]) => real.query(text, values),
      end: () => real.end(),
      on: (e: string, f: () => void) => real.on(e as 'error', f),
    };
    const warn = vi.fn();
    // max 2: one batch in flight, so of four appends at once the last three share a statement.
    const store = createPostgresStore({ pool: pool as never, schema, max: 2, logger: { warn } });
    try {
      await store.open();
      const tasks = ['a', 'b', 'c', 'd'];
      for (const t of tasks) await store.append(t, [created(1)], { expectedLastEventId: 0, generation: 1 });
      let last = 1;
      const round = async () => {
        await Promise.all(tasks.map((t) => store.append(t, [step(last + 1, last)], { expectedLastEventId: last, generation: 1 })));
        last++;
      };
      await round();
      await round();
      expect(store.batchFallbacks).toBe(2);
      expect(store.appendPaths.locked).toBeGreaterThanOrEqual(6);
      expect(warn).toHaveBeenCalledTimes(1);
      expect(warn.mock.calls[0]![1]).toMatchObject({ sqlstate: '42P01', store: store.location });
      // Another cause is warned about too; contention (a deadlock) is not.
      failWith = '57014';
      await round();
      failWith = '40P01';
      await round();
      expect(store.batchFallbacks).toBe(3);
      expect(warn).toHaveBeenCalledTimes(2);
      expect(warn.mock.calls[1]![1]).toMatchObject({ sqlstate: '57014' });
      failWith = undefined;
      await round();
      expect(store.batchFallbacks).toBe(3);
      for (const t of tasks) expect((await store.readEvents(t)).map((e) => e.eventId)).toEqual([1, 2, 3, 4, 5, 6]);
    } finally {
      await store.close();
      await dropSchema(schema);
    }
  });
});
