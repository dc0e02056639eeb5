/**
 * A lone append on the PostgreSQL store's kept connection (postgres-appender.ts, `#lone`): pg's
 * callback form, one promise from `append` to the reply; when the head moved it falls back to
 * the locked path with the contract's outcome, and close() waits for it without failing. A step's
 * statement sets three summary columns (`light`) and still compares every column it leaves.
 */
import { createHook } from 'node:async_hooks';
import pg from 'pg';
import { afterAll, expect, it, vi } from 'vitest';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema, withClient } from '../helpers/postgres.js';
import { created, step } from './events.js';

describePg('PostgreSQL store: lone appends', () => {
  const schema = uniqueSchema('turnlog_lone');
  afterAll(() => dropSchema(schema));

  it('a sequential append makes one promise between append() and its reply (the loop its own)', async () => {
    const store = createPostgresStore({ connectionString: PG_URL, schema, noticeIntervalMs: 1_000 });
    await store.open();
    try {
      await store.append('p', [created(1)], { expectedLastEventId: 0, generation: 1 });
      for (let i = 2; i <= 5; i++) await store.append('p', [step(i, i)], { expectedLastEventId: i - 1, generation: 1 });
      let promises = 0;
      const hook = createHook({ init: (_id, type) => void (type === 'PROMISE' && promises++) });
      const N = 20;
      hook.enable();
      for (let i = 6; i < 6 + N; i++) await store.append('p', [step(i, i)], { expectedLastEventId: i - 1, generation: 1 });
      hook.disable();
      // One for the append, one the loop's await makes, a few the notifier's transaction. The usual
      // path (serial queue, batcher, async layers, pg's own promise) made ten an append.
      expect(promises / N).toBeLessThanOrEqual(3);
      expect(store.appendPaths).toEqual({ oneStatement: 5 + N, locked: 0 });
    } finally {
      await store.close();
    }
  });

  it('a head moved by another store: the locked path reports the lost race, and close() waits for it', async () => {
    const a = createPostgresStore({ connectionString: PG_URL, schema });
    const b = createPostgresStore({ connectionString: PG_URL, schema });
    await a.open();
    await b.open();
    try {
      await a.append('m', [created(1)], { expectedLastEventId: 0, generation: 1 });
      for (let i = 2; i <= 3; i++) await a.append('m', [step(i, i)], { expectedLastEventId: i - 1, generation: 1 });
      await b.append('m', [step(4, 4)], { expectedLastEventId: 3, generation: 1 });
      const lost = a.append('m', [step(4, 40)], { expectedLastEventId: 3, generation: 1 });
      const settled = lost.then(() => 'written', (err: { code?: string }) => err.code);
      await a.close();
      expect(await settled).toBe('TURNLOG_CONCURRENCY');
      expect(a.appendPaths).toEqual({ oneStatement: 3, locked: 1 });
      expect((await b.readEvents('m')).map((e) => e.eventId)).toEqual([1, 2, 3, 4]);
      expect(await b.append('m', [step(5, 5)], { expectedLastEventId: 4, generation: 1 })).toMatchObject({ lastEventId: 5 });
    } finally {
      await a.close();
      await b.close();
    }
  });

  it('a step sets three summary columns; a summary moved in another column still sends it to the locked path', async () => {
    const store = createPostgresStore({ connectionString: PG_URL, schema });
    await store.open();
    const query = vi.spyOn(pg.Client.prototype, 'query');
    try {
      await store.append('l', [created(1)], { expectedLastEventId: 0, generation: 1 });
      await store.append('l', [step(2, 2)], { expectedLastEventId: 1, generation: 1 });
      const texts = query.mock.calls.map((c) => String((c[0] as { text?: unknown }).text ?? c[0]));
      expect(texts.some((t) => t.includes('SET last_event_id = $4::bigint, max_generation = $5::bigint, updated_at = $6::bigint'))).toBe(true);
      // Behind the store's back: a column the step's statement does not set.
      await withClient((c) => c.query(`UPDATE "${schema}".summaries SET queued = queued + 5 WHERE task_id = 'l'`));
      const r = await store.append('l', [step(3, 3)], { expectedLastEventId: 2, generation: 1 });
      expect(store.appendPaths).toEqual({ oneStatement: 2, locked: 1 });
      expect(r.summary.queued).toBe(5);
      expect((await store.getSummary('l'))!.queued).toBe(5);
      expect((await store.readEvents('l')).map((e) => e.eventId)).toEqual([1, 2, 3]);
    } finally {
      query.mockRestore();
      await store.close();
    }
  });
  it('sync: false on the kept connection: the row-less statement still turns synchronous commit off and writes', async () => {
    const store = createPostgresStore({ connectionString: PG_URL, schema, sync: false });
    await store.open();
    const query = vi.spyOn(pg.Client.prototype, 'query');
    try {
      await store.append('s', [created(1)], { expectedLastEventId: 0, generation: 1 });
      for (let i = 2; i <= 6; i++) await store.append('s', [step(i, i)], { expectedLastEventId: i - 1, generation: 1 });
      const lone = query.mock.calls.filter((c) => typeof c[1] === 'function' && /^WITH (s AS MATERIALIZED|w AS \(UPDATE)/.test(String((c[0] as { text?: unknown }).text)));
      expect(lone.length).toBeGreaterThanOrEqual(4);
      for (const c of lone) expect(String((c[0] as unknown as { text: string }).text)).toContain("set_config('synchronous_commit', 'off', true)");
      expect(store.appendPaths).toEqual({ oneStatement: 6, locked: 0 });
      expect((await store.readEvents('s')).map((e) => e.eventId)).toEqual([1, 2, 3, 4, 5, 6]);
      expect((await store.getSummary('s'))!.lastEventId).toBe(6);
    } finally {
      query.mockRestore();
      await store.close();
    }
  });
});
