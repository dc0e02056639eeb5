/**
 * Migration 6 (docs/scale-out.md#schema): retention reads `completions`, kept by triggers on
 * summaries, so `updated_at` is in no summaries index and a step's summary update is HOT.
 */
import { afterEach, beforeEach, expect, it } from 'vitest';
import { retainedSql } from '../../src/store/postgres-claims.js';
import { MIGRATIONS, migrate } from '../../src/store/postgres-migrations.js';
import { createPostgresStore, type PostgresHistoryStore } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema, withClient } from '../helpers/postgres.js';
import { created, queued, started, step, steps, taskCompleted, turnCompleted } from './events.js';
import { appendHistory } from '../../src/store/append-history.js';

describePg('PostgreSQL completions (migration 6)', () => {
  let schema: string;
  const stores: PostgresHistoryStore[] = [];
  const open = async () => {
    const s = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
    stores.push(s);
    await s.open();
    return s;
  };
  beforeEach(() => {
    schema = uniqueSchema('turnlog_done');
  });
  afterEach(async () => {
    for (const s of stores.splice(0)) await s.close();
    await dropSchema(schema);
  });

  const sql = <T = any>(text: string, values?: unknown[]): Promise<T[]> => withClient(async (c) => (await c.query(text, values)).rows as T[]);
  const completions = () => sql<{ task_id: string; updated_at: string }>(`SELECT task_id, updated_at FROM "${schema}".completions ORDER BY task_id`);

  /** A schema at version 5 holding raw summaries: two old completed tasks (one marked corrupt), a recent one, and unfinished ones. */
  async function atVersion5(): Promise<void> {
    await withClient((c) => migrate(c as never, schema, MIGRATIONS.filter((m) => m.version <= 5)));
    const row = (id: string, status: string, updated: number) =>
      `('${id}', 'wf', 'one-shot', '${status}', ${status === 'completed' ? `'succeeded'` : 'NULL'}, 5, 1, 1, 0, NULL, 1, ${updated})`;
    await sql(`INSERT INTO "${schema}".summaries VALUES ${[
      row('done-old', 'completed', 10_000),
      row('done-corrupt', 'completed', 10_000),
      row('done-new', 'completed', 90_000),
      row('running', 'in_progress', 1_000),
      row('waiting', 'pending', 1_000),
    ].join(', ')}`);
    await sql(`INSERT INTO "${schema}".corrupt_marks VALUES ('done-corrupt', 'events/done-corrupt/2', 'TURNLOG_HISTORY_CORRUPT', 'garbled', 5)`);
    expect(await sql(`SELECT 1 FROM pg_indexes WHERE schemaname = $1 AND indexname = 'summaries_status_updated'`, [schema])).toHaveLength(1);
  }

  it('back-fills the completed tasks of a version-5 schema; retention then purges exactly the old uncorrupted one', async () => {
    await atVersion5();
    const store = await open();
    expect(await completions()).toEqual([
      { task_id: 'done-corrupt', updated_at: '10000' },
      { task_id: 'done-new', updated_at: '90000' },
      { task_id: 'done-old', updated_at: '10000' },
    ]);
    expect(await sql(`SELECT 1 FROM pg_indexes WHERE schemaname = $1 AND indexname = 'summaries_status_updated'`, [schema])).toEqual([]);
    const claimed = await store.claimDueWork({ now: 100_000, instance: 'me', limit: 10, retentionMs: 50_000 });
    expect(claimed.tasks).toEqual([
      { taskId: 'running', reason: 'in-progress' },
      { taskId: 'waiting', reason: 'pending' },
      { taskId: 'done-old', reason: 'retention' },
    ]);
    // The retention phase pages on its own cursor too.
    const first = await store.claimDueWork({ now: 100_000, instance: 'me', limit: 2, retentionMs: 1, reasons: ['retention'] });
    expect(first.tasks.map((t) => t.taskId)).toEqual(['done-new', 'done-old']);
    expect(first.next).toBeUndefined();
    expect(await store.purgeCompleted(50_000, 100_000)).toEqual(['done-old']);
    expect(await completions()).toEqual([
      { task_id: 'done-corrupt', updated_at: '10000' },
      { task_id: 'done-new', updated_at: '90000' },
    ]);
    expect((await store.listTasks()).tasks.map((t) => t.taskId)).toEqual(['done-corrupt', 'done-new', 'running', 'waiting']);
  });

  it('two engines opening a version-5 schema at once: both open, migration 6 applies once, the back-fill once', async () => {
    await atVersion5();
    await Promise.all([open(), open()]);
    expect(await sql(`SELECT version FROM "${schema}".schema_migrations WHERE version = 6`)).toHaveLength(1);
    expect((await completions()).map((r) => r.task_id)).toEqual(['done-corrupt', 'done-new', 'done-old']);
  });

  it('writers completing and re-opening tasks while migration 6 applies: none slips between the triggers and the back-fill', async () => {
    await atVersion5();
    const S = `"${schema}"`;
    let stop = false;
    let written = 0;
    const wrote = new Set<number>();
    // Three connections (an older build's engines) writing all along: new completed tasks, and
    // existing ones flipped between completed and in progress.
    const writer = (w: number) =>
      withClient(async (c) => {
        for (let i = 0; !stop || i < 20; i++) {
          const id = `w${w}-${i}`;
          await c.query(`INSERT INTO ${S}.summaries VALUES ($1, 'wf', 'one-shot', 'completed', 'succeeded', 5, 1, 1, 0, NULL, 1, $2)`, [id, 1_000 + i]);
          if (i % 3 === 0) await c.query(`UPDATE ${S}.summaries SET status = 'in_progress', outcome = NULL WHERE task_id = $1`, [`w${w}-${i >> 1}`]);
          if (i % 5 === 0) await c.query(`UPDATE ${S}.summaries SET status = 'completed', outcome = 'failed', updated_at = $2 WHERE task_id = $1`, [`w${w}-${i >> 2}`, 5_000 + i]);
          written++;
          wrote.add(w);
        }
      });
    const writers = [writer(1), writer(2), writer(3)];
    // Until each writer has written (a fixed 30 ms was too short under load: none had connected yet).
    for (let waited = 0; wrote.size < 3 && waited < 10_000; waited += 5) await new Promise((r) => setTimeout(r, 5));
    const before = written;
    await open();
    stop = true;
    await Promise.all(writers);
    expect(before).toBeGreaterThan(0); // writes ran before, and (at least 20 each) after, the migration
    expect(await completions()).toEqual(
      await sql(`SELECT task_id, updated_at::text FROM ${S}.summaries WHERE status = 'completed' ORDER BY task_id`),
    );
  });

  it('a task that completes gets its row; deleting or purging it leaves none behind; a later update keeps the time', async () => {
    const store = await open();
    const finish = async (id: string, time: number) => {
      await store.append(id, [created(1), queued(2, 'in-1')], { expectedLastEventId: 0, generation: 1 });
      await store.append(id, [started(3, 1), ...steps(4, 3)], { expectedLastEventId: 2, generation: 1 });
      expect((await completions()).map((r) => r.task_id)).not.toContain(id);
      await store.append(id, [turnCompleted(7, 1), taskCompleted(8, { time })], { expectedLastEventId: 6, generation: 1 });
    };
    await finish('a', 10_000);
    await finish('b', 20_000);
    await finish('c', 90_000);
    expect(await completions()).toEqual([
      { task_id: 'a', updated_at: '10000' },
      { task_id: 'b', updated_at: '20000' },
      { task_id: 'c', updated_at: '90000' },
    ]);
    await store.deleteTask('a');
    expect(await store.purgeCompleted(50_000, 100_000)).toEqual(['b']);
    expect(await completions()).toEqual([{ task_id: 'c', updated_at: '90000' }]);
    // A row that leaves `completed` (only a raw write can) takes its completion with it.
    await sql(`UPDATE "${schema}".summaries SET status = 'suspended' WHERE task_id = 'c'`);
    expect(await completions()).toEqual([]);
    await sql(`UPDATE "${schema}".summaries SET status = 'completed', updated_at = 95000 WHERE task_id = 'c'`);
    expect(await completions()).toEqual([{ task_id: 'c', updated_at: '95000' }]);
  });

  it('retention picks exactly what the summaries query before migration 6 picked, through re-completions, deletes and other instances\' claims', async () => {
    const store = await open();
    const S = `"${schema}"`;
    // 120 tasks: completed at various times, unfinished ones, some marked corrupt.
    const statuses = ['completed', 'completed', 'in_progress', 'pending', 'suspended', 'completed'];
    const rows = Array.from({ length: 120 }, (_, i) => {
      const status = statuses[i % statuses.length]!;
      return `('t${String(i).padStart(3, '0')}', 'wf', 'one-shot', '${status}', ${status === 'completed' ? `'succeeded'` : 'NULL'}, 5, 1, 1, 0, NULL, 1, ${(i * 7919) % 100_000})`;
    });
    await sql(`INSERT INTO ${S}.summaries VALUES ${rows.join(', ')}`);
    for (const id of ['t000', 't013', 't055']) await sql(`INSERT INTO ${S}.corrupt_marks VALUES ($1, 'k', 'TURNLOG_HISTORY_CORRUPT', 'garbled', 5)`, [id]);
    // A completed task gets a new turn (no longer completed) and completes again, later or earlier;
    // completed tasks are deleted; an unfinished one completes; a completed one is updated in place.
    await sql(`UPDATE ${S}.summaries SET status = 'in_progress', outcome = NULL, updated_at = 99000 WHERE task_id IN ('t001', 't006', 't007')`);
    await sql(`UPDATE ${S}.summaries SET status = 'completed', outcome = 'failed', updated_at = 99500 WHERE task_id = 't001'`);
    await sql(`UPDATE ${S}.summaries SET status = 'completed', outcome = 'failed', updated_at = 100 WHERE task_id = 't006'`);
    await sql(`DELETE FROM ${S}.summaries WHERE task_id IN ('t012', 't025')`);
    await sql(`UPDATE ${S}.summaries SET status = 'completed', outcome = 'succeeded', updated_at = 200 WHERE task_id = 't002'`);
    await sql(`UPDATE ${S}.summaries SET updated_at = 98000 WHERE task_id = 't018'`);
    // The query retention ran before migration 6, straight on summaries.
    const before = async (cutoff: number) =>
      (
        await sql<{ task_id: string }>(
          `SELECT task_id FROM ${S}.summaries s WHERE status = 'completed' AND updated_at <= $1
             AND NOT EXISTS (SELECT 1 FROM ${S}.corrupt_marks m WHERE m.task_id = s.task_id) ORDER BY task_id`,
          [cutoff],
        )
      ).map((r) => r.task_id);
    // completions mirrors the completed summaries exactly.
    expect(await completions()).toEqual(
      await sql(`SELECT task_id, updated_at::text FROM ${S}.summaries WHERE status = 'completed' ORDER BY task_id`),
    );
    const now = 100_000;
    for (const retentionMs of [99_999, 60_000, 1]) {
      const want = await before(now - retentionMs);
      // The claim's retention phase, paged 7 at a time (other reasons off).
      const got: string[] = [];
      let cursor: string | undefined;
      do {
        const batch = await store.claimDueWork({ now, instance: 'me', limit: 7, retentionMs, reasons: ['retention'], ...(cursor ? { cursor } : {}) });
        got.push(...batch.tasks.map((t) => t.taskId));
        cursor = batch.next;
      } while (cursor);
      expect(got).toEqual(want);
      await store.releaseDueWork(got, 'me');
    }
    // Every reason at once, paged 5 at a time across the phases: in progress, pending, then retention.
    const ids = async (status: string) => (await sql<{ task_id: string }>(`SELECT task_id FROM ${S}.summaries WHERE status = $1 ORDER BY task_id`, [status])).map((r) => r.task_id);
    const all: string[] = [];
    let next: string | undefined;
    do {
      const batch = await store.claimDueWork({ now, instance: 'me', limit: 5, retentionMs: 60_000, ...(next ? { cursor: next } : {}) });
      all.push(...batch.tasks.map((t) => `${t.reason} ${t.taskId}`));
      next = batch.next;
    } while (next);
    expect(all).toEqual([
      ...(await ids('in_progress')).map((id) => `in-progress ${id}`),
      ...(await ids('pending')).map((id) => `pending ${id}`),
      ...(await before(now - 60_000)).map((id) => `retention ${id}`),
    ]);
    await store.releaseDueWork(all.map((x) => x.split(' ')[1]!), 'me');
    // Another instance's live claim hides its tasks from this one, as before.
    const want = await before(now - 60_000);
    const theirs = await store.claimDueWork({ now, instance: 'other', limit: 3, retentionMs: 60_000, reasons: ['retention'] });
    expect(theirs.tasks.map((t) => t.taskId)).toEqual(want.slice(0, 3));
    const mine = await store.claimDueWork({ now, instance: 'me', limit: 500, retentionMs: 60_000, reasons: ['retention'] });
    expect(mine.tasks.map((t) => t.taskId)).toEqual(want.slice(3));
    // The purge deletes exactly that set, and leaves completions in step with summaries.
    expect(await store.purgeCompleted(60_000, now)).toEqual(want);
    expect(await before(now - 60_000)).toEqual([]);
    expect(await completions()).toEqual(
      await sql(`SELECT task_id, updated_at::text FROM ${S}.summaries WHERE status = 'completed' ORDER BY task_id`),
    );
  });

  it('an imported completed task (appendHistory, two generations) gets its row; replaced by a re-import (delete, append), the new time', async () => {
    const store = await open();
    const history = (time: number) => [
      created(1, { time: 1 }),
      queued(2, 'in-1', { time: 1 }),
      started(3, 1, { time: 2 }),
      step(4, 1, { time: 3 }),
      // A recovery under generation 2 ends the turn.
      started(5, 1, { time: 4, generation: 2 }),
      turnCompleted(6, 1, { time, generation: 2 }),
      taskCompleted(7, { time, generation: 2 }),
    ];
    await appendHistory(store, 'imp', history(20_000), 'turnlog-import', 'import-1');
    expect(await completions()).toEqual([{ task_id: 'imp', updated_at: '20000' }]);
    await store.deleteTask('imp');
    expect(await completions()).toEqual([]);
    await appendHistory(store, 'imp', history(70_000), 'turnlog-import', 'import-2');
    expect(await completions()).toEqual([{ task_id: 'imp', updated_at: '70000' }]);
    expect(await store.purgeCompleted(50_000, 100_000)).toEqual([]);
    expect(await store.purgeCompleted(20_000, 100_000)).toEqual(['imp']);
    expect(await completions()).toEqual([]);
  });

  it('retention is index-backed: a range of the completions index on updated_at, then the summaries key', async () => {
    await open();
    // 5,000 completed tasks (the triggers write their completions), 50 of them past retention.
    await sql(`INSERT INTO "${schema}".summaries SELECT 't' || i, 'wf', 'one-shot', 'completed', 'succeeded', 5, 1, 1, 0, NULL, 1, i * 10 FROM generate_series(1, 5000) i`);
    await sql(`ANALYZE "${schema}".summaries, "${schema}".completions`);
    const text = `${retainedSql(`"${schema}"`)} ORDER BY s.task_id LIMIT 10 FOR UPDATE OF s SKIP LOCKED`.replaceAll('$1', '500');
    // At this size a sequential scan of summaries is cheaper; told to avoid one, it takes the indexes.
    const plan = await withClient(async (c) => {
      await c.query('SET enable_seqscan = off');
      return (await c.query(`EXPLAIN ${text}`)).rows.map((x: { 'QUERY PLAN': string }) => x['QUERY PLAN']).join('\n');
    });
    expect(plan).toContain('completions_updated');
    expect(plan).toContain('summaries_pkey');
    expect(plan).not.toContain('Seq Scan');
  });

  it('step appends of an in-progress task update its summary in place (HOT)', async () => {
    const store = await open();
    await store.append('t', [created(1), queued(2, 'in-1'), started(3, 1)], { expectedLastEventId: 0, generation: 1 });
    const STEPS = 40;
    for (let i = 0; i < STEPS; i++) await store.append('t', [step(4 + i, i + 1)], { expectedLastEventId: 3 + i, generation: 1 });
    await store.close();
    // A backend flushes its table statistics when it exits; the pool closed its connections.
    const stat = async () =>
      (await sql<{ upd: number; hot: number }>(`SELECT n_tup_upd::int AS upd, n_tup_hot_upd::int AS hot FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'summaries'`, [schema]))[0]!;
    for (let tries = 0; (await stat()).upd < STEPS && tries < 150; tries++) await new Promise((r) => setTimeout(r, 100));
    const { upd, hot } = await stat();
    expect(upd).toBe(STEPS);
    expect(hot).toBe(STEPS);
  });
});
