/**
 * A task cancel left pending on a suspended task: CancelRequested after TurnSuspended and no
 * TaskCompleted, as an engine before d2d1d42 wrote it when the cancel raced its shutdown (or an
 * older build on a shared PostgreSQL store, or an import of such a history). The summary's
 * `cancelRequested` makes it due work, so recovery completes it (decision rule 2): cancelled,
 * with exactly one TaskCompleted. Before, a suspended task was due only with queued inputs, and
 * it stayed suspended forever. Also stores whose summaries predate the field (derived at open on
 * LevelDB, at the claim on PostgreSQL).
 */
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import { silentLogger } from '../../src/logger.js';
import { Engine } from '../../src/runtime/engine.js';
import type { HistoryStore } from '../../src/store/history-store.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { summaryKey, metaKey } from '../../src/store/keys.js';
import { encodeEvent } from '../../src/history/codec.js';
import { encodeSummary } from '../../src/store/records.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { PG_URL, describePg, dropSchema, uniqueSchema, withClient } from '../helpers/postgres.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

let runs = 0;
const chat = defineWorkflow({ name: 'chat', kind: 'multi-turn', turn: async () => (runs++, 'a') });

/** Turn 1 ended (suspended), then the task cancel alone: what the old closing branch wrote. */
function stuck(id: string): HistoryEvent[] {
  return historyBuilder(id, { start: Date.now() - 10_000, tick: 1 })
    .created({ workflow: 'chat', kind: 'multi-turn' })
    .input('q1')
    .turnStarted()
    .completed('a')
    .cancel('task', 'closed by the user')
    .build();
}

async function seed(store: HistoryStore, ids: readonly string[]): Promise<void> {
  for (const id of ids) {
    const events = stuck(id);
    await store.append(id, events, { expectedLastEventId: 0, generation: 1 });
    expect((await store.getSummary(id))!.status).toBe('suspended');
  }
}

/** Opens an engine on `store`, waits for its recovery pass, and checks every task ended cancelled once. */
async function expectCompleted(store: HistoryStore, ids: readonly string[]): Promise<void> {
  runs = 0;
  const engine = await Engine.open({ store, workflows: [chat], logger: silentLogger, scanIntervalMs: 0 });
  cleanups.push(() => engine.shutdown({ graceMs: 0 }));
  await engine.recovered();
  for (const id of ids) {
    const d = await engine.describe(id);
    expect({ id, status: d.status, outcome: d.outcome }).toEqual({ id, status: 'completed', outcome: 'cancelled' });
    const types = (await store.readEvents(id)).map((e) => e.type);
    expect(types.slice(types.indexOf('CancelRequested'))).toEqual(['CancelRequested', 'TaskCompleted']);
    expect(types.filter((t) => t === 'TaskCompleted')).toHaveLength(1);
    const s = (await store.getSummary(id))!;
    expect(s.cancelRequested).toBeUndefined();
  }
  expect(runs).toBe(0);
}

describe('a suspended task with a pending task cancel is due work, and recovery completes it', () => {
  it('memory store: the summary carries cancelRequested; Engine.open completes the task', async () => {
    const store = new MemoryHistoryStore();
    await store.open();
    await seed(store, ['m1']);
    expect((await store.getSummary('m1'))!.cancelRequested).toBe(true);
    await expectCompleted(store, ['m1']);
  });

  it('LevelDB: the same, and again after a reopen', async () => {
    const dir = await makeTmpDir();
    cleanups.push(dir.remove);
    const first = new LevelHistoryStore(dir.path);
    await first.open();
    await seed(first, ['l1', 'l2']);
    await first.close();
    const store = new LevelHistoryStore(dir.path);
    cleanups.push(() => store.close());
    await expectCompleted(store, ['l1', 'l2']);
  });

  it('LevelDB store written before the field: the summaries get it from their history at open', async () => {
    const dir = await makeTmpDir();
    cleanups.push(dir.remove);
    const first = new LevelHistoryStore(dir.path);
    await first.open();
    await seed(first, ['old1', 'old2']);
    // What an older build left: summaries without the field, and no record that they were derived.
    const sums = await Promise.all(['old1', 'old2'].map(async (id) => (await first.getSummary(id))!));
    await first.close();
    const { Level } = await import('level');
    const db = new Level<Buffer, Buffer>(dir.path, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
    await db.open();
    for (const s of sums) {
      const { cancelRequested: _c, ...plain } = s;
      await db.put(summaryKey(s.taskId), encodeSummary(plain));
    }
    await db.del(metaKey('summary-cancel-requested'));
    await db.close();
    const store = new LevelHistoryStore(dir.path);
    cleanups.push(() => store.close());
    await expectCompleted(store, ['old1', 'old2']);
  });
});

describePg('PostgreSQL: a pending task cancel on a suspended task is due work (migration 7)', () => {
  const schema = uniqueSchema('turnlog_stuck');
  afterAll(() => dropSchema(schema));
  const open = async () => {
    const store = createPostgresStore({ connectionString: PG_URL, schema });
    await store.open();
    return store;
  };
  const row = (id: string) =>
    withClient(async (c) => (await c.query(`SELECT status, last_event_id, cancel_requested, cancel_known_through FROM "${schema}".summaries WHERE task_id = $1`, [id])).rows[0]);

  it('written by this build: the row says so, and Engine.open completes the task', async () => {
    const seeder = await open();
    await seed(seeder, ['p1']);
    expect((await seeder.getSummary('p1'))!.cancelRequested).toBe(true);
    expect(await row('p1')).toMatchObject({ cancel_requested: true, cancel_known_through: '5' });
    await seeder.close();
    const store = await open();
    cleanups.push(() => store.close());
    await expectCompleted(store, ['p1']);
    expect(await row('p1')).toMatchObject({ status: 'completed', cancel_requested: false, cancel_known_through: '6' });
  });

  it('every write path of this build keeps the column known through the last event (idle tasks are never derived again)', async () => {
    const store = await open();
    cleanups.push(() => store.close());
    const ids = ['k1', 'k2', 'k3', 'k4'];
    const h = (id: string) => historyBuilder(id, { start: Date.now() - 10_000, tick: 1 }).created({ workflow: 'chat', kind: 'multi-turn' }).input('q1').turnStarted().step('a').step('b').completed('x').build();
    // One at a time (one-statement appends: insert, full update, light update) and all at once (batches).
    const write = async (id: string, from: number, to: number) => {
      const events = h(id).slice(from, to);
      await store.append(id, events, { expectedLastEventId: from, generation: 1 });
    };
    for (const [from, to] of [[0, 2], [2, 3], [3, 4], [4, 5], [5, 6]] as const) {
      await write('k0', from, to);
      await Promise.all(ids.map((id) => write(id, from, to)));
    }
    for (const id of ['k0', ...ids]) expect(await row(id)).toMatchObject({ status: 'suspended', cancel_requested: false, cancel_known_through: '6', last_event_id: '6' });
    expect((await store.claimDueWork({ now: Date.now(), instance: 'x', limit: 10, reasons: ['queued'] })).tasks).toEqual([]);
  });

  it('rows from before the migration and an older build\'s lone CancelRequested: derived at the claim, completed; an idle task is not', async () => {
    const seeder = await open();
    await seed(seeder, ['p2']);
    // Turn 1 ended, no cancel: an idle suspended task, then the cancel as an older build appends it.
    const events = stuck('p3');
    await seeder.append('p3', events.slice(0, -1), { expectedLastEventId: 0, generation: 1 });
    await seeder.append('idle', stuck('idle').slice(0, -1), { expectedLastEventId: 0, generation: 1 });
    await seeder.close();
    await withClient(async (c) => {
      // p2 and idle as migration 7 left them; p3's cancel written by a build that knows no cancel columns.
      await c.query(`UPDATE "${schema}".summaries SET cancel_requested = false, cancel_known_through = NULL WHERE task_id IN ('p2', 'idle')`);
      const cancel = events[events.length - 1]!;
      await c.query(`INSERT INTO "${schema}".events (task_id, event_id, data) VALUES ('p3', $1, $2)`, [cancel.eventId, Buffer.from(encodeEvent(cancel))]);
      await c.query(`UPDATE "${schema}".summaries SET last_event_id = $1, updated_at = $2 WHERE task_id = 'p3'`, [cancel.eventId, cancel.time]);
    });
    expect(await row('p3')).toMatchObject({ cancel_requested: false, cancel_known_through: '4', last_event_id: '5' });
    const store = await open();
    cleanups.push(() => store.close());
    await expectCompleted(store, ['p2', 'p3']);
    expect(await row('idle')).toMatchObject({ status: 'suspended', cancel_requested: false, cancel_known_through: '4' });
    // Known now: the next claim passes the idle task by.
    expect((await store.claimDueWork({ now: Date.now(), instance: 'x', limit: 10 })).tasks).toEqual([]);
  });
});
