import { execFile, execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { isTurnlogError, type ErrorCode } from '../../src/errors.js';
import { encodeEvent } from '../../src/history/codec.js';
import type { Lease } from '../../src/history/events.js';
import { MIGRATIONS, SCHEMA_VERSION } from '../../src/store/postgres-migrations.js';
import { openStore } from '../../src/store/index.js';
import { PostgresHistoryStore, createPostgresStore, parsePostgresUrl, recoverableSql } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema, withClient } from '../helpers/postgres.js';
import * as vitest from 'vitest';
import { storeContract } from '../../src/testing/index.js';
import { created, queued, started, step } from './events.js';

const execFileP = promisify(execFile);
const VERSIONS = MIGRATIONS.map((m) => m.version).sort((a, b) => a - b);

async function rejectsWith(p: Promise<unknown>, code: ErrorCode): Promise<Error> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(isTurnlogError(err, code), `expected ${code}, got ${String(err)}`).toBe(true);
  return err as Error;
}

/** Polls `fn` until it resolves truthy (bounded wait; no timing assertion). */
async function until(fn: () => Promise<boolean>, what: string, limitMs = 20_000): Promise<void> {
  const end = Date.now() + limitMs;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

describePg('PostgresHistoryStore', () => {
  storeContract(
    vitest,
    'PostgresHistoryStore',
    async () => {
      const schema = uniqueSchema();
      let store = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
      await store.open();
      return {
        get store() {
          return store;
        },
        reopen: async () => {
          await store.close();
          store = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
          await store.open();
          return store;
        },
        dispose: async () => {
          await store.close();
          await dropSchema(schema);
        },
      };
    },
    { persistent: true, exclusive: false },
  );

  describe('on the server', () => {
    let schema: string;
    const stores: PostgresHistoryStore[] = [];
    const open = async (opts: { migrate?: boolean; readOnly?: boolean } = {}) => {
      const s = createPostgresStore({ connectionString: PG_URL, schema, max: 4, ...opts });
      stores.push(s);
      await s.open();
      return s;
    };
    beforeEach(() => {
      schema = uniqueSchema();
    });
    afterEach(async () => {
      for (const s of stores.splice(0)) await s.close();
      await dropSchema(schema);
    });

    describe('migrations', () => {
      it('8 stores opening at once apply each migration exactly once', async () => {
        await Promise.all(Array.from({ length: 8 }, () => open()));
        const rows = await withClient((c) => c.query(`SELECT version FROM "${schema}".schema_migrations ORDER BY version`));
        expect(rows.rows.map((r: { version: number }) => r.version)).toEqual(VERSIONS);
        expect(await stores[0]!.migrate()).toEqual([]);
      });

      it('3 processes migrating at once all succeed; one applies, the others find it applied', async () => {
        const script = `
          const pg = (await import('pg')).default;
          const pool = new pg.Pool({ connectionString: ${JSON.stringify(PG_URL)} });
          const { migrate } = await import(${JSON.stringify(resolve('dist/src/store/postgres-migrations.js'))});
          const c = await pool.connect();
          const applied = await migrate(c, ${JSON.stringify(schema)});
          c.release();
          await pool.end();
          console.log(JSON.stringify(applied));`;
        const outs = await Promise.all(
          [1, 2, 3].map(() => execFileP(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' })),
        );
        const applied = outs.map((o) => JSON.parse(o.stdout) as number[]);
        expect(applied.flat().sort((a, b) => a - b)).toEqual(VERSIONS);
        const rows = await withClient((c) => c.query(`SELECT count(*)::int AS n FROM "${schema}".schema_migrations`));
        expect(rows.rows[0].n).toBe(VERSIONS.length);
      });

      it('migrate: false on a schema never migrated fails with TURNLOG_STORE_NOT_FOUND and creates nothing', async () => {
        const s = createPostgresStore({ connectionString: PG_URL, schema, migrate: false });
        const err = await rejectsWith(s.open(), 'TURNLOG_STORE_NOT_FOUND');
        expect(err.message).toContain(schema);
        expect(err.message).toContain('turnlog migrate');
        const exists = await withClient((c) => c.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]));
        expect(exists.rowCount).toBe(0);
      });

      it('a schema migrated by a newer build is TURNLOG_HISTORY_FORMAT', async () => {
        await open();
        await withClient((c) => c.query(`INSERT INTO "${schema}".schema_migrations (version, name) VALUES ($1, 'future')`, [SCHEMA_VERSION + 1]));
        await rejectsWith(createPostgresStore({ connectionString: PG_URL, schema, migrate: false }).open(), 'TURNLOG_HISTORY_FORMAT');
        await rejectsWith(createPostgresStore({ connectionString: PG_URL, schema }).open(), 'TURNLOG_HISTORY_FORMAT');
      });

      it('a read-only store reads and cannot write', async () => {
        const rw = await open();
        await rw.append('t1', [created(1)], { expectedLastEventId: 0, generation: 1 });
        const ro = await open({ migrate: false, readOnly: true });
        expect((await ro.readEvents('t1')).length).toBe(1);
        const err = await ro.append('t1', [step(2, 1)], { expectedLastEventId: 1, generation: 1 }).then(
          () => undefined,
          (e: unknown) => e as { code?: string },
        );
        expect(err?.code).toBe('25006'); // read_only_sql_transaction
        expect((await rw.readEvents('t1')).length).toBe(1);
      });

      it('openStore takes a postgres:// URL, ?schema= naming the schema', async () => {
        const s = await openStore(`${PG_URL}?schema=${schema}`);
        stores.push(s as PostgresHistoryStore);
        expect(s).toBeInstanceOf(PostgresHistoryStore);
        expect((s as PostgresHistoryStore).schema).toBe(schema);
        expect(s.exclusive).toBe(false);
        expect(parsePostgresUrl('postgresql://u:pw@h:5/db?schema=x&sslmode=disable')).toEqual({ connectionString: 'postgresql://u:pw@h:5/db?sslmode=disable', schema: 'x' });
        expect(() => parsePostgresUrl('postgres://[::1')).toThrow(/not a valid PostgreSQL URL/);
      });

      it('works on a pool the caller owns, and leaves it open on close()', async () => {
        const pool = new pg.Pool({ connectionString: PG_URL, max: 2 });
        try {
          const s = createPostgresStore({ pool, schema });
          await s.open();
          await s.append('t1', [created(1)], { expectedLastEventId: 0, generation: 1 });
          await s.close();
          const r = await pool.query(`SELECT count(*)::int AS n FROM "${schema}".events`);
          expect(r.rows[0].n).toBe(1);
        } finally {
          await pool.end();
        }
        expect(() => createPostgresStore({ schema } as never)).toThrow(/exactly one of connectionString or pool/);
      });

      it('sync: false appends (synchronous_commit off for the transaction) land like durable ones', async () => {
        const s = createPostgresStore({ connectionString: PG_URL, schema, sync: false });
        stores.push(s);
        await s.open();
        await s.append('t1', [created(1)], { expectedLastEventId: 0, generation: 1 });
        await s.append('t1', [step(2, 1)], { expectedLastEventId: 1, generation: 1, sync: true });
        await rejectsWith(s.append('t1', [step(2, 1)], { expectedLastEventId: 1, generation: 1 }), 'TURNLOG_CONCURRENCY');
        expect((await (await open()).readEvents('t1')).map((e) => e.eventId)).toEqual([1, 2]);
      });

      it('close() lets writes already called finish', async () => {
        const s = createPostgresStore({ connectionString: PG_URL, schema, max: 2 });
        await s.open();
        await s.append('t1', [created(1)], { expectedLastEventId: 0, generation: 1 });
        const writes = Array.from({ length: 10 }, (_, i) => s.append('t1', [step(i + 2, i + 1)], { expectedLastEventId: i + 1, generation: 1 }));
        await s.close();
        expect((await Promise.allSettled(writes)).every((r) => r.status === 'fulfilled')).toBe(true);
        const check = await open();
        expect((await check.getSummary('t1'))!.lastEventId).toBe(11);
        await rejectsWith(s.readEvents('t1'), 'TURNLOG_STORE_CLOSED');
      });

      it('rejects a schema name that is not a plain identifier', () => {
        expect(() => createPostgresStore({ connectionString: PG_URL, schema: 'a"; DROP TABLE x; --' })).toThrow(/schema name/);
      });
    });

    describe('fencing in the database, across stores with their own pools', () => {
      it('two concurrent appends with the same expected id: exactly one wins, the other writes nothing', async () => {
        const a = await open();
        const b = await open();
        await a.append('t1', [created(1)], { expectedLastEventId: 0, generation: 1 });
        for (let round = 0; round < 10; round++) {
          const last = round + 1;
          const settled = await Promise.allSettled([
            a.append('t1', [step(last + 1, 100 + round)], { expectedLastEventId: last, generation: 1 }),
            b.append('t1', [step(last + 1, 200 + round)], { expectedLastEventId: last, generation: 1 }),
          ]);
          expect(settled.filter((s) => s.status === 'fulfilled')).toHaveLength(1);
          const lost = settled.find((s) => s.status === 'rejected') as PromiseRejectedResult;
          expect(isTurnlogError(lost.reason, 'TURNLOG_CONCURRENCY')).toBe(true);
        }
        const events = await a.readEvents('t1');
        expect(events.map((e) => e.eventId)).toEqual(Array.from({ length: 11 }, (_, i) => i + 1));
        expect((await b.getSummary('t1'))!.lastEventId).toBe(11);
      });

      it('two concurrent creations of one task: exactly one wins with ConcurrencyError for the other', async () => {
        const a = await open();
        const b = await open();
        for (let i = 0; i < 10; i++) {
          const id = `c-${i}`;
          const settled = await Promise.allSettled([
            a.append(id, [created(1, { workflow: 'wa' })], { expectedLastEventId: 0, generation: 1 }),
            b.append(id, [created(1, { workflow: 'wb' }), queued(2, 'x')], { expectedLastEventId: 0, generation: 1 }),
          ]);
          expect(settled.filter((s) => s.status === 'fulfilled')).toHaveLength(1);
          const lost = settled.find((s) => s.status === 'rejected') as PromiseRejectedResult;
          expect(isTurnlogError(lost.reason, 'TURNLOG_CONCURRENCY'), String(lost.reason)).toBe(true);
          const summary = (await a.getSummary(id))!;
          expect((await a.readEvents(id)).length).toBe(summary.lastEventId);
        }
      });

      it('concurrent first claims by two owners: one lease, the other LeaseHeldError', async () => {
        const a = await open();
        const b = await open();
        for (let i = 0; i < 10; i++) {
          const id = `l-${i}`;
          const settled = await Promise.allSettled([
            a.claimLease(id, { owner: 'a', instance: 'ia', durationMs: 60_000, now: 0 }),
            b.claimLease(id, { owner: 'b', instance: 'ib', durationMs: 60_000, now: 0 }),
          ]);
          const won = settled.filter((s): s is PromiseFulfilledResult<Lease> => s.status === 'fulfilled');
          expect(won).toHaveLength(1);
          expect(isTurnlogError((settled.find((s) => s.status === 'rejected') as PromiseRejectedResult).reason, 'TURNLOG_LEASE_HELD')).toBe(true);
          expect(await a.getLease(id)).toEqual(won[0]!.value);
        }
      });

      it('a zombie engine whose task another engine took over gets StaleGenerationError', async () => {
        const a = await open();
        const b = await open();
        await a.append('t1', [created(1), queued(2, 'in')], { expectedLastEventId: 0, generation: 1 });
        // Expired at once: a shared store lets another instance (same owner) take only a dead lease.
        const mine = await a.claimLease('t1', { owner: 'engine', instance: 'ia', durationMs: 0, now: 0 });
        const theirs = await b.claimLease('t1', { owner: 'engine', instance: 'ib', durationMs: 60_000, now: 0 });
        expect(theirs.generation).toBe(mine.generation + 1);
        await rejectsWith(a.append('t1', [step(3, 1)], { expectedLastEventId: 2, generation: mine.generation }), 'TURNLOG_STALE_GENERATION');
        await rejectsWith(a.renewLease('t1', mine, 1_000, 0), 'TURNLOG_STALE_GENERATION');
        expect((await b.readEvents('t1')).length).toBe(2);
      });

      it('an append waits on the task row lock and then sees the takeover committed meanwhile (StaleGenerationError)', async () => {
        const s = await open();
        await s.append('t1', [created(1), queued(2, 'in')], { expectedLastEventId: 0, generation: 1 });
        await s.claimLease('t1', { owner: 'a', instance: 'ia', durationMs: 60_000, now: 0 });
        await withClient(async (c) => {
          await c.query('BEGIN');
          await c.query(`SELECT 1 FROM "${schema}".summaries WHERE task_id = 't1' FOR UPDATE`);
          const pending = s.append('t1', [step(3, 1)], { expectedLastEventId: 2, generation: 1 }).then(
            () => undefined,
            (e: unknown) => e,
          );
          // Bounded wait until the append's transaction is blocked on our row lock.
          await until(async () => {
            const r = await withClient((w) =>
              w.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`, [`%"${schema}".summaries%FOR UPDATE%`]),
            );
            return r.rows[0].n > 0;
          }, 'the append to wait on the row lock');
          // A takeover commits while the append waits.
          await c.query(`UPDATE "${schema}".leases SET owner = 'b', instance = 'ib', generation = 2 WHERE task_id = 't1'`);
          await c.query('COMMIT');
          const err = await pending;
          expect(isTurnlogError(err, 'TURNLOG_STALE_GENERATION'), String(err)).toBe(true);
        });
        expect((await s.readEvents('t1')).length).toBe(2);
      });

      it('task ids with quotes, backslashes and SQL in them are data (the lock query inlines the id)', async () => {
        const s = await open();
        const ids = [`o'brien`, 'back\\slash', `x'); DROP TABLE "${schema}".events; --`, "\\'", 'é😀'];
        for (const id of ids) {
          await s.append(id, [created(1), queued(2, 'in')], { expectedLastEventId: 0, generation: 1 });
          await s.claimLease(id, { owner: 'a', instance: 'i', durationMs: 60_000, now: 0 });
          await s.append(id, [step(3, 1)], { expectedLastEventId: 2, generation: 1 });
        }
        for (const id of ids) {
          expect((await s.readEvents(id)).map((e) => e.eventId)).toEqual([1, 2, 3]);
          expect(await s.getSummary(id)).toMatchObject({ taskId: id, lastEventId: 3 });
          expect(await s.getLease(id)).toMatchObject({ owner: 'a' });
        }
        expect((await s.listTasks()).tasks.map((t) => t.taskId).sort()).toEqual([...ids].sort());
      });

      it('stores the same protobuf bytes as the Level store', async () => {
        const s = await open();
        const events = [created(1), queued(2, 'in-1')];
        await s.append('t1', events, { expectedLastEventId: 0, generation: 1 });
        const rows = await withClient((c) => c.query(`SELECT data FROM "${schema}".events WHERE task_id = 't1' ORDER BY event_id`));
        expect(rows.rows.map((r: { data: Buffer }) => Buffer.from(r.data).toString('hex'))).toEqual(events.map((e) => Buffer.from(encodeEvent(e)).toString('hex')));
      });
    });

    describe('lease time is the database clock', () => {
      const req = (owner: string, instance: string, now: number, durationMs: number) => ({ owner, instance, now, durationMs });

      it('a claim expires at the database clock plus its duration, whatever `now` the caller passed', async () => {
        const s = await open();
        const before = await s.databaseNow();
        const l = await s.claimLease('t1', req('a', 'i1', 5, 60_000));
        const after = await s.databaseNow();
        expect(l.expiresAt).toBeGreaterThanOrEqual(before + 60_000);
        expect(l.expiresAt).toBeLessThanOrEqual(after + 60_000);
        expect(await s.getLease('t1')).toEqual(l);
        const again = await s.claimLease('t1', req('a', 'i1', 5, 60_000));
        expect(again.generation).toBe(1);
      });

      it('a caller clock far ahead cannot take a live lease (the engines’ clocks do not decide)', async () => {
        const s = await open();
        const held = await s.claimLease('t1', req('a', 'i1', 0, 60_000));
        const farFuture = Date.now() + 3_600_000;
        await rejectsWith(s.claimLease('t1', req('b', 'j1', farFuture, 1_000)), 'TURNLOG_LEASE_HELD');
        await s.append('t1', [created(1), queued(2, 'x')], { expectedLastEventId: 0, generation: 1 });
        await s.append('t1', [started(3, 1)], { expectedLastEventId: 2, generation: 1 });
        expect(await s.listRecoverable(farFuture, 'someone-else')).toEqual([]);
        expect(await s.getLease('t1')).toEqual(held);
      });

      it('listRecoverable is index-backed, also as a SKIP LOCKED claim (no sequential scan even when the planner is told to avoid one)', async () => {
        await open();
        const plan = (sql: string) =>
          withClient(async (c) => {
            await c.query('SET enable_seqscan = off');
            const r = await c.query(`EXPLAIN ${sql}`);
            return r.rows.map((x: { 'QUERY PLAN': string }) => x['QUERY PLAN']).join('\n');
          });
        const base = recoverableSql(`"${schema}"`);
        for (const sql of [base, `${base} LIMIT 10 FOR UPDATE OF s SKIP LOCKED`]) {
          const p = await plan(sql);
          expect(p).toContain('summaries_in_progress');
          expect(p).toContain('leases_pkey');
          expect(p).not.toContain('Seq Scan');
        }
      });

      it('a 200 ms lease is live, then expired once the database clock passes it: another owner takes over', async () => {
        const s = await open();
        await s.append('t1', [created(1), queued(2, 'x'), started(3, 1)], { expectedLastEventId: 0, generation: 1 });
        const first = await s.claimLease('t1', req('a', 'i1', 0, 200));
        expect(await s.listRecoverable(0, 'i1')).toEqual([]);
        // Caller time standing still (0) does not keep it alive either.
        await until(async () => (await s.databaseNow()) > first.expiresAt, 'the database clock to pass the lease');
        expect(await s.listRecoverable(0, 'i1')).toEqual(['t1']);
        const next = await s.claimLease('t1', req('b', 'j1', 0, 60_000));
        expect(next).toMatchObject({ owner: 'b', generation: 2 });
        expect(await s.listRecoverable(0, 'j1')).toEqual([]);
      });

      it('renewal extends from the database clock; a released lease is free at once', async () => {
        const s = await open();
        const mine = await s.claimLease('t1', req('a', 'i1', 0, 1_000));
        const before = await s.databaseNow();
        const renewed = await s.renewLease('t1', mine, 60_000, 0);
        expect(renewed.expiresAt).toBeGreaterThanOrEqual(before + 60_000);
        await rejectsWith(s.claimLease('t1', req('b', 'j1', 0, 1_000)), 'TURNLOG_LEASE_HELD');
        await s.releaseLease('t1', renewed, 0);
        expect((await s.getLease('t1'))!.expiresAt).toBeLessThanOrEqual(await s.databaseNow());
        expect(await s.claimLease('t1', req('b', 'j1', 0, 1_000))).toMatchObject({ owner: 'b', generation: 2 });
      });

      it('a claim-in-append writes the lease for its duration on the database clock', async () => {
        const s = await open();
        await s.append('t1', [created(1, { time: 1_000 }), queued(2, 'x', { time: 1_001 })], { expectedLastEventId: 0, generation: 1 });
        const before = await s.databaseNow();
        const lease: Lease = { owner: 'a', instance: 'i1', generation: 1, expiresAt: 2_000 + 30_000 };
        await s.append('t1', [started(3, 1, { time: 2_000 })], { expectedLastEventId: 2, generation: 1, lease });
        const stored = (await s.getLease('t1'))!;
        expect(stored).toMatchObject({ owner: 'a', instance: 'i1', generation: 1 });
        expect(stored.expiresAt).toBeGreaterThanOrEqual(before + 30_000);
        expect(stored.expiresAt).toBeLessThanOrEqual((await s.databaseNow()) + 30_000);
      });
    });

    describe('group commit across tasks', () => {
      it('appends that arrive during a write share one transaction; a fenced, raced or lease-refused neighbour fails alone and writes nothing', async () => {
        // max 2: one batch in flight, so everything submitted meanwhile is the next batch.
        const s = createPostgresStore({ connectionString: PG_URL, schema, max: 2 });
        stores.push(s);
        await s.open();
        const ids = Array.from({ length: 20 }, (_, i) => `g${String(i).padStart(2, '0')}`);
        for (const id of ids) await s.append(id, [created(1, { generation: id === 'g03' ? 3 : 1 }), queued(2, 'in', { generation: id === 'g03' ? 3 : 1 })], { expectedLastEventId: 0, generation: id === 'g03' ? 3 : 1 });
        await s.claimLease('g07', { owner: 'other', instance: 'other', durationMs: 60_000, now: 0 });
        const before = s.groupCommitStats();
        const lease: Lease = { owner: 'me', instance: 'me', generation: 2, expiresAt: Date.now() + 60_000 };
        const outcomes = await Promise.allSettled([
          s.append('first', [created(1)], { expectedLastEventId: 0, generation: 1 }),
          ...ids.map((id) => {
            if (id === 'g03') return s.append(id, [step(3, 1, { generation: 2 })], { expectedLastEventId: 2, generation: 2 }); // below generation 3
            if (id === 'g05') return s.append(id, [step(2, 1)], { expectedLastEventId: 1, generation: 1 }); // behind: the history ends at 2
            if (id === 'g07') return s.append(id, [started(3, 1, { generation: 2 })], { expectedLastEventId: 2, generation: 2, lease }); // another owner's live lease
            return s.append(id, [started(3, 1)], { expectedLastEventId: 2, generation: 1 });
          }),
        ]);
        const after = s.groupCommitStats();
        expect(after.appends - before.appends).toBe(21);
        expect(after.batches - before.batches).toBe(2);
        const codes = outcomes.map((o) => (o.status === 'fulfilled' ? 'ok' : (o.reason as { code: string }).code));
        expect(codes[0]).toBe('ok');
        const byId = Object.fromEntries(ids.map((id, i) => [id, codes[i + 1]]));
        expect(byId).toEqual(Object.fromEntries(ids.map((id) => [id, id === 'g03' ? 'TURNLOG_STALE_GENERATION' : id === 'g05' ? 'TURNLOG_CONCURRENCY' : id === 'g07' ? 'TURNLOG_LEASE_HELD' : 'ok'])));
        for (const id of ids) {
          const n = (await s.readEvents(id)).length;
          expect([id, n]).toEqual([id, ['g03', 'g05', 'g07'].includes(id) ? 2 : 3]);
          expect((await s.getSummary(id))!.lastEventId).toBe(n);
        }
        expect((await s.getLease('g07'))!.owner).toBe('other');
      });

      it('a batch that includes a task another store creates at the same moment: one creator wins, the batch neighbours all land', async () => {
        const a = createPostgresStore({ connectionString: PG_URL, schema, max: 2 });
        stores.push(a);
        await a.open();
        const b = await open();
        const ids = Array.from({ length: 10 }, (_, i) => `n${i}`);
        const outcomes = await Promise.allSettled([
          a.append('lead', [created(1)], { expectedLastEventId: 0, generation: 1 }),
          ...ids.map((id) => a.append(id, [created(1)], { expectedLastEventId: 0, generation: 1 })),
          b.append('n4', [created(1, { workflow: 'theirs' })], { expectedLastEventId: 0, generation: 1 }),
        ]);
        const fromA = outcomes.slice(1, 11);
        const fromB = outcomes[11]!;
        const n4 = [fromA[4]!, fromB].map((o) => (o.status === 'fulfilled' ? 'ok' : (o.reason as { code: string }).code));
        expect(n4.sort()).toEqual(['TURNLOG_CONCURRENCY', 'ok']);
        fromA.forEach((o, i) => i !== 4 && expect(o.status).toBe('fulfilled'));
        expect((await b.readEvents('n4')).length).toBe(1);
        expect((await b.getSummary('n4'))!.workflow).toBe(fromB.status === 'fulfilled' ? 'theirs' : 'wf');
      });
    });

    describe('claiming orphans (FOR UPDATE SKIP LOCKED)', () => {
      /** `n` in-progress tasks whose lease (instance `dead`) expired at once. */
      async function orphans(s: PostgresHistoryStore, n: number): Promise<string[]> {
        const ids = Array.from({ length: n }, (_, i) => `o${String(i).padStart(2, '0')}`);
        for (const id of ids) {
          await s.append(id, [created(1), queued(2, 'in'), started(3, 1)], { expectedLastEventId: 0, generation: 1 });
          await s.claimLease(id, { owner: 'engine', instance: 'dead', durationMs: 0, now: 0 });
        }
        return ids;
      }

      it('engines claiming at once get disjoint tasks, each under its own lease one generation up; a live claim is not claimed again', async () => {
        const stores = [await open(), await open(), await open()];
        const ids = await orphans(stores[0]!, 24);
        // Concurrent rounds until nothing is left: a task locked or claimed by one store is skipped by the others.
        const batches: Awaited<ReturnType<PostgresHistoryStore['claimOrphans']>>[] = [[], [], []];
        for (let round = 0; round < 10; round++) {
          const got = await Promise.all(stores.map((s, i) => s.claimOrphans({ owner: `e${i}`, instance: `i${i}`, durationMs: 60_000, limit: 10 })));
          got.forEach((b, i) => batches[i]!.push(...b));
          if (got.every((b) => b.length === 0)) break;
        }
        const all = batches.flat().map((o) => o.taskId);
        expect(new Set(all).size).toBe(all.length);
        expect([...all].sort()).toEqual(ids);
        for (const [i, batch] of batches.entries()) {
          for (const o of batch) {
            expect(o.previous).toMatchObject({ instance: 'dead', generation: 1 });
            expect(o.lease).toMatchObject({ owner: `e${i}`, instance: `i${i}`, generation: 2 });
            expect(await stores[0]!.getLease(o.taskId)).toEqual(o.lease);
          }
        }
        expect(await stores[1]!.claimOrphans({ owner: 'late', instance: 'late', durationMs: 60_000, limit: 50 })).toEqual([]);
        expect(await stores[1]!.listRecoverable(0, 'late')).toEqual([]);
      });

      it('skips a task whose row another transaction holds, and takes it once free', async () => {
        const s = await open();
        const [busy, free] = await orphans(s, 2);
        await withClient(async (c) => {
          await c.query('BEGIN');
          await c.query(`SELECT 1 FROM "${schema}".summaries WHERE task_id = $1 FOR UPDATE`, [busy]);
          const got = await s.claimOrphans({ owner: 'e', instance: 'i', durationMs: 60_000, limit: 5 });
          expect(got.map((o) => o.taskId)).toEqual([free]);
          await c.query('COMMIT');
        });
        expect((await s.claimOrphans({ owner: 'e', instance: 'i', durationMs: 60_000, limit: 5 })).map((o) => o.taskId)).toEqual([busy]);
      });

      it('a limit that is not a positive integer is TURNLOG_INVALID_ARGUMENT', async () => {
        const s = await open();
        await rejectsWith(s.claimOrphans({ owner: 'e', instance: 'i', durationMs: 1, limit: 0 }), 'TURNLOG_INVALID_ARGUMENT');
      });
    });
  });
});

describe('pg stays optional', () => {
  it('importing turnlog does not load pg', () => {
    const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { exports: Record<string, { import: string }> };
    const script = (entry: string, touch: string) => `
      const m = await import(${JSON.stringify(entry)});
      ${touch}
      const { createRequire } = await import('node:module');
      const loaded = Object.keys(createRequire(import.meta.url).cache);
      console.log(JSON.stringify({ has: typeof m.createPostgresStore, pg: loaded.filter((k) => /[\\\\/]node_modules[\\\\/]pg[\\\\/]/.test(k)) }));`;
    const entry = resolve(pkg.exports['.']!.import);
    const plain = JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script(entry, '')], { encoding: 'utf8' })) as { has: string; pg: string[] };
    expect(plain).toEqual({ has: 'function', pg: [] });
    // The control: opening a store does load pg, so the check above can fail.
    const touch = `await m.createPostgresStore({ connectionString: 'postgres://nobody@127.0.0.1:1/none' }).open().catch(() => undefined);`;
    const opened = JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script(entry, touch)], { encoding: 'utf8' })) as { pg: string[] };
    expect(opened.pg.length).toBeGreaterThan(0);
  });

  it('without pg installed, open() names the fix (npm install pg)', () => {
    const entry = resolve('dist/src/store/postgres-store.js');
    // A resolve hook that hides `pg`, as on a machine that never installed it.
    const hook = `data:text/javascript,${encodeURIComponent(
      `export async function resolve(s, c, next) { if (s === 'pg') { const e = new Error("Cannot find package 'pg'"); e.code = 'ERR_MODULE_NOT_FOUND'; throw e; } return next(s, c); }`,
    )}`;
    const script = `
      const { register } = await import('node:module');
      register(${JSON.stringify(hook)});
      const { createPostgresStore } = await import(${JSON.stringify(entry)});
      const err = await createPostgresStore({ connectionString: 'postgres://x@127.0.0.1/x' }).open().catch((e) => e);
      console.log(JSON.stringify({ code: err.code, message: err.message }));`;
    const out = JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' })) as { code: string; message: string };
    expect(out.code).toBe('TURNLOG_DRIVER_MISSING');
    expect(out.message).toContain('npm install pg');
  });
});
