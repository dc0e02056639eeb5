/**
 * A lone append (postgres-appender.ts #lone) whose statement committed but whose reply was lost
 * (the connection dropped after the commit): the retry finds its events stored (#landed) and
 * resolves as written, also when a payload is stored by reference (payloadRefBytes), and with
 * the summary as of its own last event even when another store appended after it, also when
 * compaction dropped the early events (the summary is rebuilt from HistoryCompacted's state).
 */
import pg from 'pg';
import { afterAll, expect, it, vi } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema } from '../helpers/postgres.js';
import { created, json, step } from './events.js';
import { historyBuilder, T0 } from '../../src/testing/history-builder.js';
import { compaction } from '../../src/replay/compact.js';
import { summarize } from '../../src/history/summary.js';

const originalQuery = pg.Client.prototype.query;

describePg('PostgreSQL store: a lone append whose reply was lost after its commit', () => {
  const schema = uniqueSchema('turnlog_lost');
  afterAll(() => dropSchema(schema));

  it.each([
    ['inline payloads', 'small'],
    ['a payload stored by reference', 'large'],
  ])('%s: the append resolves as written, exactly once', async (_name, size) => {
    const store = createPostgresStore({ connectionString: PG_URL, schema, payloadRefBytes: 1024 });
    await store.open();
    const id = `lost-${size}`;
    const query = vi.spyOn(pg.Client.prototype, 'query');
    try {
      await store.append(id, [created(1)], { expectedLastEventId: 0, generation: 1 });
      await store.append(id, [step(2, 1)], { expectedLastEventId: 1, generation: 1 });
      const big: HistoryEvent = { ...step(3, 2), result: json('x'.repeat(size === 'large' ? 5_000 : 10)) } as HistoryEvent;
      let dropped = 0;
      query.mockImplementation(function (this: pg.Client, ...args: unknown[]) {
        const [config, cb] = args as [{ text?: string }, ((err: unknown, res?: unknown) => void) | undefined];
        // The step's statement is written, then its reply is lost as with a dropped connection.
        if (dropped === 0 && typeof cb === 'function' && /^WITH (s AS MATERIALIZED|w AS \(UPDATE)/.test(String(config?.text))) {
          dropped++;
          return Reflect.apply(originalQuery, this, [config, (err: unknown) => cb(err ?? Object.assign(new Error('Connection terminated unexpectedly'), { code: '57P01' }))]) as unknown;
        }
        return Reflect.apply(originalQuery, this, args) as unknown;
      } as never);
      const r = await store.append(id, [big], { expectedLastEventId: 2, generation: 1 });
      expect(dropped).toBe(1);
      expect(r.lastEventId).toBe(3);
      query.mockRestore();
      const events = await store.readEvents(id);
      expect(events.map((e) => e.eventId)).toEqual([1, 2, 3]);
      expect(events[2]).toEqual(big);
      expect(await store.append(id, [step(4, 3)], { expectedLastEventId: 3, generation: 1 })).toMatchObject({ lastEventId: 4 });
    } finally {
      query.mockRestore();
      await store.close();
    }
  });

  it('another store appended after the lost one: the result is the summary as of the landed append', async () => {
    const a = createPostgresStore({ connectionString: PG_URL, schema });
    const b = createPostgresStore({ connectionString: PG_URL, schema });
    await a.open();
    await b.open();
    const id = 'lost-then-moved';
    const query = vi.spyOn(pg.Client.prototype, 'query');
    try {
      await a.append(id, [created(1)], { expectedLastEventId: 0, generation: 1 });
      await a.append(id, [step(2, 1)], { expectedLastEventId: 1, generation: 1 });
      let dropped = 0;
      query.mockImplementation(function (this: pg.Client, ...args: unknown[]) {
        const [config, cb] = args as [{ text?: string }, ((err: unknown, res?: unknown) => void) | undefined];
        // Event 3 is written, its reply lost; before the check reads it, store b appends event 4.
        if (dropped === 0 && typeof cb === 'function' && /^WITH (s AS MATERIALIZED|w AS \(UPDATE)/.test(String(config?.text))) {
          dropped++;
          const lost = Object.assign(new Error('Connection terminated unexpectedly'), { code: '57P01' });
          return Reflect.apply(originalQuery, this, [
            config,
            (err: unknown) => void b.append(id, [step(4, 3)], { expectedLastEventId: 3, generation: 1 }).then(() => cb(err ?? lost), cb),
          ]) as unknown;
        }
        return Reflect.apply(originalQuery, this, args) as unknown;
      } as never);
      const r = await a.append(id, [step(3, 2)], { expectedLastEventId: 2, generation: 1 });
      expect(dropped).toBe(1);
      query.mockRestore();
      expect((await b.getSummary(id))!.lastEventId).toBe(4);
      // What a store returns for an append is the summary that append made: event 3's, not event 4's.
      expect(r.lastEventId).toBe(3);
      expect(r.summary).toMatchObject({ taskId: id, lastEventId: 3, status: 'pending' });
      expect(r.summary.updatedAt).toBe(step(3, 2).time);
    } finally {
      query.mockRestore();
      await a.close();
      await b.close();
    }
  });

  it('a compacted history: the summary rebuilt for the landed append equals the one it made (scheduled inputs kept)', async () => {
    const a = createPostgresStore({ connectionString: PG_URL, schema });
    const b = createPostgresStore({ connectionString: PG_URL, schema });
    await a.open();
    await b.open();
    const id = 'lost-compacted';
    // A scheduled input queued before the turns compaction drops, still waiting after them.
    const h = historyBuilder(id)
      .created({ kind: 'multi-turn' })
      .input('later', { id: 'later', deliverAt: T0 + 86_400_000 })
      .input('one', { id: 'in-1' })
      .turnStarted({ inputIds: ['in-1'] })
      .completed('x')
      .input('two', { id: 'in-2' })
      .turnStarted({ inputIds: ['in-2'] })
      .completed('y');
    const history = h.build();
    const query = vi.spyOn(pg.Client.prototype, 'query');
    try {
      await a.append(id, history, { expectedLastEventId: 0, generation: 1 });
      const cut = compaction(id, history, 1)!;
      expect(cut.throughEventId).toBe(5);
      await a.compactHistory!(id, cut);
      const nine = h.input('three', { id: 'in-3' }).build()[8]!;
      const ten = h.input('four', { id: 'in-4' }).build()[9]!;
      let dropped = 0;
      query.mockImplementation(function (this: pg.Client, ...args: unknown[]) {
        const [config, cb] = args as [{ text?: string }, ((err: unknown, res?: unknown) => void) | undefined];
        // Event 9 is written, its reply lost; before the check reads it, store b appends event 10.
        if (dropped === 0 && typeof cb === 'function' && /^WITH (s AS MATERIALIZED|w AS \(UPDATE)/.test(String(config?.text))) {
          dropped++;
          const lost = Object.assign(new Error('Connection terminated unexpectedly'), { code: '57P01' });
          return Reflect.apply(originalQuery, this, [
            config,
            (err: unknown) => void b.append(id, [ten], { expectedLastEventId: 9, generation: 1 }).then(() => cb(err ?? lost), cb),
          ]) as unknown;
        }
        return Reflect.apply(originalQuery, this, args) as unknown;
      } as never);
      const r = await a.append(id, [nine], { expectedLastEventId: 8, generation: 1 });
      expect(dropped).toBe(1);
      query.mockRestore();
      expect((await b.getSummary(id))!.lastEventId).toBe(10);
      // What the append made: the summary of the whole (uncompacted) history through event 9.
      const made = summarize(id, undefined, [...history, nine]);
      expect(made.scheduled).toEqual({ later: T0 + 86_400_000 });
      expect(r).toEqual({ lastEventId: 9, summary: made });
    } finally {
      query.mockRestore();
      await a.close();
      await b.close();
    }
  });
});
