/**
 * PgStoreContext.connect (247ecd8), the one checkout of query, tx and the appends, on a fake pool
 * (no database): a closed store is refused as a rejection with TURNLOG_STORE_CLOSED and no
 * checkout; a connection refused is TURNLOG_STORE_UNAVAILABLE naming what was tried; a checked-out
 * client gets the store's error listener and goes back to the pool once, also when its statement fails.
 */
import { describe, expect, it } from 'vitest';
import { PgStoreContext } from '../../src/store/postgres-context.js';

function fakePool(connect: () => Promise<unknown>) {
  const pool = { connects: 0, connect: () => (pool.connects++, connect()) };
  return pool;
}

function fakeClient(fail?: Error) {
  const listeners: string[] = [];
  const released: (Error | undefined)[] = [];
  const client = {
    query: async () => {
      if (fail) throw fail;
      return { rows: [{ one: 1 }] };
    },
    release: (err?: Error) => void released.push(err),
    on: (e: string) => void listeners.push(e),
    listeners: (e: string) => listeners.filter((l) => l === e),
  };
  return { client, listeners, released };
}

function ctxWith(pool: unknown, state: PgStoreContext['state'] = 'open'): PgStoreContext {
  const ctx = new PgStoreContext({});
  ctx.pool = pool as never;
  ctx.state = state;
  return ctx;
}

describe('PgStoreContext.connect', () => {
  it('a closed store: query and tx reject with TURNLOG_STORE_CLOSED (not a synchronous throw) and check nothing out', async () => {
    const pool = fakePool(async () => fakeClient().client);
    const ctx = ctxWith(pool, 'closed');
    const q = ctx.query('SELECT 1', []);
    const t = ctx.tx(async () => 1);
    await expect(q).rejects.toMatchObject({ code: 'TURNLOG_STORE_CLOSED' });
    await expect(t).rejects.toMatchObject({ code: 'TURNLOG_STORE_CLOSED' });
    expect(pool.connects).toBe(0);
  });

  it('a refused connection: TURNLOG_STORE_UNAVAILABLE naming what was tried, the cause kept', async () => {
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' });
    const ctx = ctxWith(fakePool(async () => Promise.reject(refused)));
    const err = await ctx.query('SELECT 1', [], 'a read of the summary').catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'TURNLOG_STORE_UNAVAILABLE', cause: refused });
    expect((err as Error).message).toContain('a read of the summary');
    await expect(ctx.tx(async () => 1)).rejects.toMatchObject({ code: 'TURNLOG_STORE_UNAVAILABLE' });
  });

  it("a checked-out client has the store's error listener and is released once, with the loss when its statement lost the connection", async () => {
    const ok = fakeClient();
    const ctx = ctxWith(fakePool(async () => ok.client));
    expect(await ctx.query('SELECT 1', [])).toEqual([{ one: 1 }]);
    expect(ok.listeners).toEqual(['error']);
    expect(ok.released).toEqual([undefined]);

    const lost = Object.assign(new Error('Connection terminated unexpectedly'), {});
    const broken = fakeClient(lost);
    const ctx2 = ctxWith(fakePool(async () => broken.client));
    await expect(ctx2.query('SELECT 1', [])).rejects.toMatchObject({ code: 'TURNLOG_STORE_UNAVAILABLE' });
    expect(broken.listeners).toEqual(['error']);
    expect(broken.released).toEqual([lost]);
  });
});
