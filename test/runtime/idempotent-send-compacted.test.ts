// docs/workflows.md "inputId makes sends idempotent: an input id the task already has is not sent
// again", also once compaction dropped the turn that took the input: HistoryCompacted keeps the
// dropped input ids (proto field 5) and the engine's send consults them. Memory, LevelDB and
// (with TURNLOG_REQUIRE_PG=1 or a reachable server) PostgreSQL.
import { afterEach, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import type { HistoryStore } from '../../src/store/history-store.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { PG_URL, dropSchema, pgEnabled, uniqueSchema } from '../helpers/postgres.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

const runs: string[] = [];
const chat = defineWorkflow({
  name: 'chat',
  kind: 'multi-turn',
  compaction: { keepTurns: 2 },
  turn: async (ctx, text: string) => ctx.step('model', () => (runs.push(`${ctx.taskId}:${text}`), `reply to ${text}`)),
});

const stores: [string, () => Promise<HistoryStore>][] = [
  ['memory', async () => new MemoryHistoryStore()],
  ['level', async () => {
    const d = await makeTmpDir('turnlog-idem-compacted-');
    cleanups.push(() => d.remove());
    return new LevelHistoryStore(join(d.path, 'store'));
  }],
];
if (pgEnabled) {
  stores.push(['postgres', async () => {
    const schema = uniqueSchema('turnlog_idem_compacted');
    cleanups.push(() => dropSchema(schema));
    return createPostgresStore({ connectionString: PG_URL, schema, max: 2 });
  }]);
}

async function compacted(store: HistoryStore, taskId: string, turns: number): Promise<void> {
  for (;;) {
    const e = (await store.readEvents(taskId, { fromEventId: 2, toEventId: 2 }))[0];
    if (e?.type === 'HistoryCompacted' && e.turns >= turns) return;
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe.each(stores)('idempotent send after compaction (%s)', (_name, make) => {
  it('a send retried with the id of an input whose turn was compacted is not sent again', async () => {
    const store = await make();
    const engine = await Engine.open({ store, workflows: [chat], logger: silentLogger, scanIntervalMs: 0 });
    cleanups.push(() => engine.shutdown({ graceMs: 0 }));
    runs.length = 0;
    await (await engine.start(chat, 'pay order 1', { taskId: 'c', inputId: 'req-1' })).nextTurn();
    for (let i = 2; i <= 6; i++) await engine.turnResult('c', await engine.sendInput('c', `m${i}`, { inputId: `req-${i}` }));
    await compacted(store, 'c', 4);
    const second = (await store.readEvents('c', { fromEventId: 2, toEventId: 2 }))[0]!;
    expect(second.type === 'HistoryCompacted' && second.droppedInputIds).toEqual(['req-1', 'req-2', 'req-3', 'req-4']);
    const before = (await engine.describe('c')).lastEventId;
    // A kept input's retry is deduplicated, and so is a dropped one's: nothing is appended.
    expect(await engine.sendInput('c', 'm6', { inputId: 'req-6' })).toBe('req-6');
    expect(await engine.sendInput('c', 'pay order 1', { inputId: 'req-1' })).toBe('req-1');
    expect((await engine.describe('c')).lastEventId).toBe(before);
    expect(runs.filter((r) => r === 'c:pay order 1')).toHaveLength(1);
    // An id the task never had is still sent.
    await engine.turnResult('c', await engine.sendInput('c', 'm7', { inputId: 'req-7' }));
    expect((await engine.describe('c')).turn).toBe(7);
  });
});
