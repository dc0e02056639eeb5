/**
 * A closed PostgreSQL store refuses every path with TURNLOG_STORE_CLOSED, as a rejection (the
 * locked path's transaction, the one-statement append on the kept connection or a fresh one, the
 * group-commit batch of concurrent appends, reads); and appends racing close() each either land
 * (resolved, stored as written) or reject, never resolve without being stored.
 */
import { afterAll, expect, it } from 'vitest';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema } from '../helpers/postgres.js';
import { created, step } from './events.js';

describePg('PostgreSQL store: closed', () => {
  const schema = uniqueSchema('turnlog_closed');
  afterAll(() => dropSchema(schema));

  it('after close(), every write and read path is refused with TURNLOG_STORE_CLOSED, as a rejection', async () => {
    const store = createPostgresStore({ connectionString: PG_URL, schema });
    await store.open();
    await store.append('a', [created(1)], { expectedLastEventId: 0, generation: 1 });
    await store.append('a', [step(2, 2)], { expectedLastEventId: 1, generation: 1 });
    for (const id of ['b', 'c']) await store.append(id, [created(1)], { expectedLastEventId: 0, generation: 1 });
    await store.close();
    const calls: [string, () => Promise<unknown>][] = [
      ['new task (locked path)', () => store.append('n', [created(1)], { expectedLastEventId: 0, generation: 1 })],
      ['next step (one statement)', () => store.append('a', [step(3, 3)], { expectedLastEventId: 2, generation: 1 })],
      ['concurrent appends (batch)', () => Promise.all(['b', 'c'].map((id) => store.append(id, [step(2, 2)], { expectedLastEventId: 1, generation: 1 })))],
      ['readEvents', () => store.readEvents('a')],
      ['getSummary', () => store.getSummary('a')],
      ['getLease', () => store.getLease('a')],
    ];
    for (const [what, call] of calls) {
      let p: Promise<unknown> | undefined;
      expect(() => (p = call()), what).not.toThrow();
      await expect(p, what).rejects.toMatchObject({ code: 'TURNLOG_STORE_CLOSED' });
    }
  });

  it('appends racing close(): each one that resolved is stored as written; none resolves unstored', async () => {
    const store = createPostgresStore({ connectionString: PG_URL, schema });
    await store.open();
    const ids = Array.from({ length: 8 }, (_, i) => `r${i}`);
    for (const id of ids) await store.append(id, [created(1)], { expectedLastEventId: 0, generation: 1 });
    const outcomes = ids.map((id) => store.append(id, [step(2, 2)], { expectedLastEventId: 1, generation: 1 }).then(() => 'ok', (e: { code?: string }) => e.code ?? String(e)));
    await store.close();
    const got = await Promise.all(outcomes);
    const reader = createPostgresStore({ connectionString: PG_URL, schema });
    await reader.open();
    try {
      for (const [i, id] of ids.entries()) {
        const stored = (await reader.readEvents(id)).length;
        if (got[i] === 'ok') expect({ id, stored }).toEqual({ id, stored: 2 });
        else expect({ id, outcome: got[i] }).toEqual({ id, outcome: expect.stringMatching(/^TURNLOG_STORE_(CLOSED|UNAVAILABLE)$/) });
      }
    } finally {
      await reader.close();
    }
  });
});
