/**
 * Appends whose COMMIT reached PostgreSQL but whose reply never reached the client, through a real
 * TCP cut (docs/scale-out.md#failures): a proxy (node:net, below) between the store and the server
 * forwards the commit's statement, destroys the client's socket at once and swallows the server's
 * reply (it records that the server committed). For a lone append and for a group commit of four
 * tasks, on the one-statement path and on the locked path, each caller must get its append's
 * result, and each task's history hold its events exactly once. "held": an uncommitted insert of
 * one task's next event by another session holds the cut statement until the store's retries wait
 * on that task's rows, so the commit lands after the retry first looked for it (it read nothing,
 * then found the head moved: reported TURNLOG_CONCURRENCY before the fix).
 */
import { createServer, createConnection, type Server, type Socket } from 'node:net';
import pg from 'pg';
import { afterAll, expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import { createPostgresStore, type PostgresHistoryStore } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema, withClient } from '../helpers/postgres.js';
import { until } from '../helpers/processes.js';
import { created, json, step } from './events.js';

/** Which statement's reply the proxy drops. */
type Target = 'cas' | 'batch' | 'commit' | 'batch-commit';

/** The server's answer to the cut statement, as the proxy swallowed it: message types and command tags. */
interface Swallowed {
  types: string;
  tags: string[];
}

/** Messages of the PostgreSQL protocol in `buf` (type, body); the rest is returned unparsed. */
function messages(buf: Buffer, untyped: boolean): { list: { type: string; whole: Buffer; body: Buffer }[]; rest: Buffer } {
  const list: { type: string; whole: Buffer; body: Buffer }[] = [];
  let at = 0;
  for (;;) {
    const head = untyped ? 4 : 5;
    if (buf.length - at < head) break;
    const len = buf.readInt32BE(at + head - 4);
    const end = at + head - 4 + len;
    if (buf.length < end) break;
    list.push({ type: untyped ? '' : String.fromCharCode(buf[at]!), whole: buf.subarray(at, end), body: buf.subarray(at + head, end) });
    at = end;
    untyped = false;
  }
  return { list, rest: buf.subarray(at) };
}

const cstrings = (b: Buffer): string[] => b.toString('utf8').split('\0');

/**
 * A TCP proxy that, once armed, cuts the client side of the connection that sends the target
 * statement right after forwarding it, and reads the server's reply to it itself (then closes).
 */
class ReplyCutter {
  readonly #server: Server;
  readonly #target: { host: string; port: number };
  #armed: { target: Target; swallowed: (s: Swallowed) => void } | undefined;
  readonly #sockets = new Set<Socket>();

  private constructor(target: { host: string; port: number }) {
    this.#target = target;
    this.#server = createServer((c) => this.#accept(c));
  }

  static async start(target: { host: string; port: number }): Promise<ReplyCutter> {
    const p = new ReplyCutter(target);
    await new Promise<void>((resolve) => p.#server.listen(0, '127.0.0.1', resolve));
    return p;
  }

  url(url: string): string {
    const u = new URL(url);
    u.hostname = '127.0.0.1';
    u.port = String((this.#server.address() as { port: number }).port);
    return u.toString();
  }

  /** Cuts the next `target` statement; resolves with the server's swallowed reply to it. */
  arm(target: Target): Promise<Swallowed> {
    return new Promise((swallowed) => (this.#armed = { target, swallowed }));
  }

  #accept(client: Socket): void {
    const upstream = createConnection(this.#target);
    this.#sockets.add(client).add(upstream);
    client.on('error', () => undefined);
    upstream.on('error', () => client.destroy());
    client.on('close', () => this.#sockets.delete(client));
    upstream.on('close', () => this.#sockets.delete(upstream));
    let pending: Buffer = Buffer.alloc(0);
    let untyped = true;
    const names = new Map<string, string>();
    let extended: string | undefined; // the text of the statement bound since the last Sync
    let wroteEvents: 'one' | 'many' | undefined; // this transaction inserted one task's events or many's (the locked paths)
    const wrote = (text: string): void => {
      if (text.includes('.events (task_id, event_id, data)')) wroteEvents = text.includes('unnest($1::text[]') ? 'many' : 'one';
    };
    let cut: ((s: Swallowed) => void) | undefined;
    let reply: Buffer = Buffer.alloc(0);
    const swallowedTypes: string[] = [];
    const tags: string[] = [];
    client.on('data', (d: Buffer) => {
      if (cut) return;
      const parsed = messages(Buffer.concat([pending, d]), untyped);
      pending = parsed.rest;
      let sent = 0;
      for (const m of parsed.list) {
        untyped = false;
        let now = false;
        const armed = this.#armed;
        if (m.type === 'P') {
          const [name, text] = cstrings(m.body);
          names.set(name!, text!);
        } else if (m.type === 'B') {
          extended = names.get(cstrings(m.body)[1]!);
          wrote(extended ?? '');
        } else if (m.type === 'S') {
          const text = extended ?? '';
          extended = undefined;
          now =
            (armed?.target === 'cas' && /^WITH (s AS MATERIALIZED|w AS \(UPDATE)/.test(text)) ||
            (armed?.target === 'batch' && text.startsWith('WITH x AS MATERIALIZED'));
        } else if (m.type === 'Q') {
          const text = cstrings(m.body)[0]!;
          wrote(text);
          if (text === 'COMMIT') {
            now = (armed?.target === 'commit' && wroteEvents === 'one') || (armed?.target === 'batch-commit' && wroteEvents === 'many');
            wroteEvents = undefined;
          } else if (text === 'ROLLBACK') wroteEvents = undefined;
        }
        sent += m.whole.length;
        if (now) {
          this.#armed = undefined;
          cut = armed!.swallowed;
          upstream.write(Buffer.concat(parsed.list.map((x) => x.whole)).subarray(0, sent));
          client.destroy();
          return;
        }
      }
      if (sent > 0) upstream.write(Buffer.concat(parsed.list.map((x) => x.whole)));
    });
    upstream.on('data', (d: Buffer) => {
      if (!cut) {
        client.write(d);
        return;
      }
      const parsed = messages(Buffer.concat([reply, d]), false);
      reply = parsed.rest;
      for (const m of parsed.list) {
        swallowedTypes.push(m.type);
        if (m.type === 'C') tags.push(cstrings(m.body)[0]!);
        if (m.type === 'Z') {
          cut({ types: swallowedTypes.join(''), tags });
          upstream.destroy();
          return;
        }
      }
    });
    client.on('close', () => {
      // The client went away on its own (not a cut): so does the server side.
      if (!cut) upstream.destroy();
    });
    upstream.on('close', () => client.destroy());
  }

  async close(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

/**
 * Sessions waiting on `holder` (the held statement) or on a session that waits on it (the retries
 * behind it), read outside any transaction (within one, pg_stat_activity stays as first read).
 */
async function waitersOn(holder: number): Promise<number> {
  const r = await withClient((c) =>
    c.query(
      `WITH w AS (SELECT pid, pg_blocking_pids(pid) AS b FROM pg_stat_activity WHERE wait_event_type = 'Lock')
       SELECT count(*)::int AS n FROM w WHERE $1 = ANY(w.b) OR EXISTS (SELECT 1 FROM w AS h WHERE $1 = ANY(h.b) AND h.pid = ANY(w.b))`,
      [holder],
    ),
  );
  return (r.rows[0] as { n: number }).n;
}

describePg('PostgreSQL store: an append whose reply a TCP cut lost after its commit', () => {
  const schema = uniqueSchema('turnlog_cutreply');
  const target = new URL(PG_URL);
  let proxy: ReplyCutter;
  afterAll(async () => {
    try {
      await proxy?.close();
    } finally {
      await dropSchema(schema);
    }
  });

  /** A store through the proxy (a fresh one does not know the heads: its appends take the locked path). */
  async function open(): Promise<PostgresHistoryStore> {
    proxy ??= await ReplyCutter.start({ host: target.hostname, port: Number(target.port || 5432) });
    const store = createPostgresStore({ connectionString: proxy.url(PG_URL), schema, payloadRefBytes: 1024 });
    await store.open();
    return store;
  }

  /** Holds `taskId`'s event `eventId` (an uncommitted insert of another session) until `release`. */
  async function hold(taskId: string, eventId: number): Promise<{ pid: number; release(): Promise<void> }> {
    const side = new pg.Client({ connectionString: PG_URL });
    await side.connect();
    await side.query('BEGIN');
    await side.query(`INSERT INTO "${schema}".events (task_id, event_id, data) VALUES ($1, $2, '\\x00')`, [taskId, eventId]);
    const pid = ((await side.query('SELECT pg_backend_pid() AS pid')).rows[0] as { pid: number }).pid;
    return {
      pid,
      release: async () => {
        await side.query('ROLLBACK');
        await side.end();
      },
    };
  }

  /** Writes `ids`' first two events, then appends one step to each at once with the `target` statement's reply cut. */
  async function cutAppends(ids: string[], via: Target, held: boolean, store: PostgresHistoryStore, warm: PostgresHistoryStore): Promise<{ results: PromiseSettledResult<{ lastEventId: number }>[]; swallowed: Swallowed; steps: HistoryEvent[] }> {
    for (const id of ids) {
      await warm.append(id, [created(1)], { expectedLastEventId: 0, generation: 1 });
      await warm.append(id, [step(2, 1)], { expectedLastEventId: 1, generation: 1 });
    }
    // The store under test knows the heads (one-statement path) unless `warm` is another store.
    const steps = ids.map((id, i) => ({ ...step(3, 2), result: json(`${id}-${i}-${'x'.repeat(i === 0 ? 2_000 : 8)}`) }) as HistoryEvent);
    const blocker = held ? await hold(ids[ids.length - 1]!, 3) : undefined;
    const swallowed = proxy.arm(via);
    try {
      const out = Promise.allSettled(ids.map((id, i) => store.append(id, [steps[i]!], { expectedLastEventId: 2, generation: 1 })));
      if (blocker) {
        // The cut statement waits on the held row; a retry waits on the rows it locked (the first
        // is enough: a batch's other retries may still be checking whether theirs landed).
        await until(async () => (await waitersOn(blocker.pid)) >= 2, 'a retry to wait behind the cut statement');
        await blocker.release();
      }
      return { results: await out, swallowed: await swallowed, steps };
    } finally {
      if (blocker) await blocker.release().catch(() => undefined);
    }
  }

  async function expectOnce(store: PostgresHistoryStore, ids: string[], steps: HistoryEvent[]): Promise<void> {
    for (const [i, id] of ids.entries()) {
      const events = await store.readEvents(id);
      expect(events.map((e) => e.eventId)).toEqual([1, 2, 3]);
      expect(events[2]).toEqual(steps[i]);
      // The store goes on from the written head.
      expect(await store.append(id, [step(4, 3)], { expectedLastEventId: 3, generation: 1 })).toMatchObject({ lastEventId: 4 });
    }
  }

  it.each([
    ['the one-statement path', 'cas', false],
    ['the one-statement path, its commit held past the first check', 'cas', true],
    ['the locked path (a store that does not know the head)', 'commit', false],
  ] as const)('a lone append on %s resolves as written, its event stored once', async (_name, via, held) => {
    const store = await open();
    const warm = via === 'commit' ? await open() : store;
    const ids = [`lone-${via}-${held}`];
    try {
      const { results, swallowed, steps } = await cutAppends(ids, via, held, store, warm);
      // The server committed: its swallowed reply has no error.
      expect(swallowed.types).not.toContain('E');
      expect(swallowed.types).toContain('C');
      expect(results.map((r) => (r.status === 'fulfilled' ? r.value.lastEventId : String((r.reason as { code?: string }).code)))).toEqual([3]);
      expect(via === 'commit' ? store.appendPaths.locked : store.appendPaths.oneStatement).toBeGreaterThan(0);
      if (via === 'cas') expect(swallowed.tags).toEqual(['INSERT 0 1']);
      await expectOnce(store, ids, steps);
    } finally {
      await store.close();
      if (warm !== store) await warm.close();
    }
  });

  it.each([
    ['the one-statement batch', 'batch', false],
    ['the one-statement batch, its commit held past the first check', 'batch', true],
    ['the locked batch (a store that does not know the heads)', 'batch-commit', false],
  ] as const)('a group commit of four tasks on %s: each append resolves as written, each event stored once', async (_name, via, held) => {
    const store = await open();
    const warm = via === 'batch-commit' ? await open() : store;
    // Five appends at once: the first goes alone, the other four gather into one batch.
    const ids = ['a', 'b', 'c', 'd', 'e'].map((x) => `batch-${via}-${held}-${x}`);
    try {
      const before = store.groupCommitStats();
      // The lone first append is not cut: the target is the batch's statement (or its COMMIT after the first's).
      const { results, swallowed, steps } = await cutAppends(ids, via, held, store, warm);
      expect(swallowed.types).not.toContain('E');
      expect(swallowed.types).toContain('C');
      expect(results.map((r) => (r.status === 'fulfilled' ? r.value.lastEventId : String((r.reason as { code?: string }).code)))).toEqual([3, 3, 3, 3, 3]);
      const after = store.groupCommitStats();
      expect(after.appends - before.appends).toBeGreaterThanOrEqual(5);
      await expectOnce(store, ids, steps);
    } finally {
      await store.close();
      if (warm !== store) await warm.close();
    }
  });
});
