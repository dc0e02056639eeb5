/**
 * The real `turnlog` binary against a PostgreSQL store (`--store postgres://…?schema=…` or
 * TURNLOG_STORE) while another store instance (as an engine would) has it open and writes.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeEvent } from '../../src/history/codec.js';
import type { HistoryEvent, TaskSummary } from '../../src/history/events.js';
import type { HistoryStore } from '../../src/store/history-store.js';
import { createPostgresStore, type PostgresHistoryStore } from '../../src/store/postgres-store.js';
import { MIGRATIONS, SCHEMA_VERSION } from '../../src/store/postgres-migrations.js';
import { PG_URL, describePg, dropSchema, uniqueSchema, withClient } from '../helpers/postgres.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { created, step } from '../store/events.js';
import { oneShotHistory, openTurnHistory, richHistory } from './helpers.js';
import { appendHistory, cli, cliJSON, ensureBuilt, withLevel } from './run-cli.js';

async function contents(s: HistoryStore): Promise<Map<string, { summary: TaskSummary; events: HistoryEvent[] }>> {
  const out = new Map<string, { summary: TaskSummary; events: HistoryEvent[] }>();
  for (const t of (await s.listTasks({ limit: 1000 })).tasks) out.set(t.taskId, { summary: t, events: await s.readEvents(t.taskId) });
  return out;
}

/** Row counts and a digest of every table: a read-only command must leave them as they were. */
async function fingerprint(schema: string): Promise<string> {
  return withClient(async (c) => {
    const parts: string[] = [];
    for (const t of ['events', 'summaries', 'leases', 'snapshots', 'schema_migrations']) {
      const r = await c.query(`SELECT count(*)::int AS n, md5(coalesce(string_agg(x::text, ',' ORDER BY x::text), '')) AS h FROM "${schema}".${t} x`);
      parts.push(`${t}:${r.rows[0].n}:${r.rows[0].h}`);
    }
    return parts.join(' ');
  });
}

describePg('turnlog on PostgreSQL', () => {
  let tmp: { path: string; remove: () => Promise<void> };
  let schema: string;
  let url: string;
  let live: PostgresHistoryStore;

  beforeAll(async () => {
    ensureBuilt();
    tmp = await makeTmpDir('turnlog-cli-pg-');
    schema = uniqueSchema('turnlog_cli');
    url = `${PG_URL}?schema=${schema}`;
  });

  afterAll(async () => {
    await live?.close();
    await dropSchema(schema);
    await tmp?.remove();
  });

  it('a reading command on a schema never migrated exits 3 naming `turnlog migrate`, and creates nothing', async () => {
    const r = await cli(['list', '--store', url]);
    expect(r.code).toBe(3);
    expect(r.stderr).toContain('turnlog migrate');
    const exists = await withClient((c) => c.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]));
    expect(exists.rowCount).toBe(0);
  });

  it('turnlog migrate creates the schema, and is a no-op the second time', async () => {
    const first = await cliJSON(['migrate', '--store', url]);
    expect(first.code).toBe(0);
    expect(first.json).toMatchObject({ schema, applied: MIGRATIONS.map((m) => m.version), version: SCHEMA_VERSION });
    expect(SCHEMA_VERSION).toBe(Math.max(...MIGRATIONS.map((m) => m.version)));
    const again = await cli(['migrate'], { TURNLOG_STORE: url });
    expect(again.code).toBe(0);
    expect(again.stdout).toContain(`already at version ${SCHEMA_VERSION}; nothing to do`);
    const level = await cli(['migrate', '--store', join(tmp.path, 'x')]);
    expect(level.code).toBe(2);
  });

  it('export from LevelDB and import into PostgreSQL moves a store with identical events and summaries', async () => {
    const dir = join(tmp.path, 'level');
    await withLevel(dir, async (s) => {
      await appendHistory(s, 't-rich', richHistory());
      await appendHistory(s, 'one', oneShotHistory('summarize', 'succeeded'));
      await appendHistory(s, 'open', openTurnHistory());
    });
    const file = join(tmp.path, 'all.bin');
    expect((await cli(['export', '--all', '-o', file, '--format', 'binary', '--store', dir])).code).toBe(0);
    const imp = await cliJSON(['import', file, '--store', url]);
    expect(imp.code).toBe(0);
    expect(imp.json.tasks.map((t: { taskId: string }) => t.taskId).sort()).toEqual(['one', 'open', 't-rich']);
    const a = await withLevel(dir, contents);
    live = createPostgresStore({ connectionString: PG_URL, schema });
    await live.open();
    const b = await contents(live);
    expect([...b.keys()].sort()).toEqual([...a.keys()].sort());
    for (const [id, x] of a) {
      expect(b.get(id)!.events).toEqual(x.events);
      expect(b.get(id)!.events.map((e) => Buffer.from(encodeEvent(e)))).toEqual(x.events.map((e) => Buffer.from(encodeEvent(e))));
      expect(b.get(id)!.summary).toEqual(x.summary);
    }
  });

  it('every reading command works while a store instance holds the schema open, and writes nothing', async () => {
    // As a running engine would: the schema is open and leased elsewhere.
    await live.claimLease('open', { owner: 'engine-a', instance: 'inst-live', durationMs: 3_600_000, now: Date.now() });
    const before = await fingerprint(schema);
    const env = { TURNLOG_STORE: url };

    const list = await cliJSON(['list'], env);
    expect(list.code).toBe(0);
    expect(list.json.tasks.map((t: { taskId: string }) => t.taskId)).toEqual(['one', 'open', 't-rich']);
    const byStatus = await cliJSON(['list', '--status', 'completed'], env);
    expect(byStatus.json.tasks.map((t: { taskId: string }) => t.taskId)).toEqual(['one']);

    const show = await cli(['show', 't-rich'], env);
    expect(show.code).toBe(0);
    expect(show.stdout).toContain('t-rich');

    const events = await cliJSON(['events', 't-rich'], env);
    expect(events.code).toBe(0);
    expect(events.json.events ?? events.json).toBeDefined();

    const why = await cliJSON(['why', 'open'], env);
    expect(why.code).toBe(0);
    // A shared store's live lease is honoured (no lock proves the engine dead).
    expect(why.json.leaseConsidered).toBe(true);
    expect(why.json.lease).toMatchObject({ instance: 'inst-live' });

    const stats = await cliJSON(['stats'], env);
    expect(stats.code).toBe(0);
    expect(stats.json).toMatchObject({ tasks: 3 });
    expect(stats.json.sizeBytes).toBeGreaterThan(0);

    const exp = await cli(['export', 'one', '-o', join(tmp.path, 'one.json')], env);
    expect(exp.code).toBe(0);

    const missing = await cli(['show', 'nope'], env);
    expect(missing.code).toBe(3);

    expect(await fingerprint(schema)).toBe(before);
  });

  it('reads a task while another process appends to it: dense ids from 1, never fewer than the summary counted', async () => {
    await live.append('busy', [created(1)], { expectedLastEventId: 0, generation: 1 });
    let last = 1;
    let writing = true;
    const writer = (async () => {
      while (writing) {
        await live.append('busy', [step(last + 1, last)], { expectedLastEventId: last, generation: 1 });
        last++;
      }
    })();
    try {
      const seen: number[] = [];
      for (let i = 0; i < 3; i++) {
        const r = await cliJSON(['events', 'busy', '--store', url]);
        expect(r.code).toBe(0);
        const ids = (r.json.events as { eventId: number }[]).map((e) => e.eventId);
        expect(ids).toEqual(Array.from({ length: ids.length }, (_, k) => k + 1));
        expect(ids.length).toBeGreaterThanOrEqual(r.json.lastEventId);
        seen.push(r.json.lastEventId);
      }
      expect([...seen].sort((a, b) => a - b)).toEqual(seen);
    } finally {
      writing = false;
      await writer;
    }
    expect((await live.getSummary('busy'))!.lastEventId).toBe(last);
  });

  it('import refuses an existing task on PostgreSQL too; --force replaces it', async () => {
    const file = join(tmp.path, 'one.json');
    const refused = await cliJSON(['import', file, '--store', url]);
    expect(refused.json.error).toMatchObject({ code: 'TURNLOG_TASK_CONFLICT' });
    const forced = await cliJSON(['import', file, '--force', '--store', url]);
    expect(forced.code).toBe(0);
    expect(forced.json.tasks).toEqual([{ taskId: 'one', events: 6, replaced: true, status: 'completed', outcome: 'succeeded' }]);
  });

  it('fork writes the new task on PostgreSQL (read-write, without migrating); the original is untouched', async () => {
    const before = await live.readEvents('t-rich');
    const r = await cliJSON(['fork', 't-rich', '--at-turn', '1', '--store', url]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.json).toMatchObject({ taskId: 't-rich-fork-1', forkedFrom: { taskId: 't-rich', turn: 1 } });
    const forked = await live.readEvents('t-rich-fork-1');
    expect(forked.length).toBe(r.json.events);
    expect(forked[0]).toMatchObject({ type: 'TaskCreated', forkedFrom: { taskId: 't-rich', turn: 1 } });
    expect(await live.readEvents('t-rich')).toEqual(before);
  });

  it('an unreachable server is an error naming the store, not a crash', async () => {
    const r = await cliJSON(['list', '--store', 'postgres://postgres@127.0.0.1:1/test']);
    expect(r.code).toBe(1);
    expect(r.json.error.code).toBe('TURNLOG_STORE_OPEN');
    expect(r.json.error.message).toContain('127.0.0.1:1');
  });
});

describe('turnlog --store postgres:// without a server', () => {
  it('a malformed URL is a usage error', async () => {
    ensureBuilt();
    const r = await cli(['list', '--store', 'postgres://[::1']);
    expect(r.code).toBe(2);
  });
});
