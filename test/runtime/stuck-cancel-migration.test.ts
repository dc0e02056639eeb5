/**
 * Migration 7 (summaries.cancel_requested, cancel_known_through) on a schema an older build
 * filled: rows as that build wrote them (no cancel columns), then several engines of this build
 * open at once, each migrating (docs/scale-out.md#pending-task-cancels). The migration applies
 * once, existing rows are not known, and the engines' claims derive them: every suspended task
 * with a task cancel pending (a compacted history too) completes cancelled with exactly one
 * TaskCompleted, an idle one stays suspended, and no turn runs.
 */
import { afterAll, afterEach, expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import { silentLogger } from '../../src/logger.js';
import { compaction } from '../../src/replay/compact.js';
import { Engine } from '../../src/runtime/engine.js';
import { MIGRATIONS, migrate } from '../../src/store/postgres-migrations.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { PG_URL, describePg, dropSchema, uniqueSchema, withClient } from '../helpers/postgres.js';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

let runs = 0;
const chat = defineWorkflow({ name: 'chat', kind: 'multi-turn', turn: async () => (runs++, 'a') });

/** `turns` ended turns of a multi-turn task, then (with `cancel`) a task cancel and nothing after it. */
function history(id: string, turns: number, cancel: boolean): HistoryEvent[] {
  let b = historyBuilder(id, { start: Date.now() - 60_000, tick: 1 }).created({ workflow: 'chat', kind: 'multi-turn' });
  for (let t = 0; t < turns; t++) b = b.input(`q${t}`).turnStarted().step('s').completed('a');
  if (cancel) b = b.cancel('task', 'closed by the user');
  return b.build();
}

describePg('migration 7 on rows an older build wrote, several engines opening at once', () => {
  const source = uniqueSchema('turnlog_m7src');
  const target = uniqueSchema('turnlog_m7old');
  afterAll(async () => {
    await dropSchema(source);
    await dropSchema(target);
  });

  it('migrates once; the claims derive the old rows and complete each pending cancel exactly once', async () => {
    // The histories, written by this build into a scratch schema (one compacted before its cancel).
    const scratch = createPostgresStore({ connectionString: PG_URL, schema: source });
    await scratch.open();
    const compacted = history('stuck-compacted', 4, true);
    for (const [id, events] of [['stuck', history('stuck', 1, true)], ['stuck-compacted', compacted], ['idle', history('idle', 2, false)]] as const) {
      await scratch.append(id, events, { expectedLastEventId: 0, generation: 1 });
    }
    const cut = compaction('stuck-compacted', compacted, 1)!;
    expect(cut).toBeDefined();
    await scratch.compactHistory!('stuck-compacted', cut);
    await scratch.close();

    // The old schema: migrations before 7, and the rows copied as a build without the columns wrote them.
    const cols = 'task_id, workflow, kind, status, outcome, last_event_id, max_generation, turn, queued, last_input_id, created_at, updated_at';
    await withClient(async (c) => {
      await migrate(c as never, target, MIGRATIONS.filter((m) => m.version < 7));
      await c.query(`INSERT INTO "${target}".events SELECT * FROM "${source}".events`);
      await c.query(`INSERT INTO "${target}".summaries (${cols}) SELECT ${cols} FROM "${source}".summaries`);
      await c.query(`INSERT INTO "${target}".leases SELECT * FROM "${source}".leases`);
    });

    runs = 0;
    const engines = await Promise.all(
      [0, 1, 2].map(async () => {
        const store = createPostgresStore({ connectionString: PG_URL, schema: target });
        const engine = await Engine.open({ store, workflows: [chat], logger: silentLogger, scanIntervalMs: 0 });
        cleanups.push(() => engine.shutdown({ graceMs: 0 }));
        return engine;
      }),
    );
    await Promise.all(engines.map((e) => e.recovered()));

    const rows = await withClient(async (c) => ({
      versions: (await c.query(`SELECT version FROM "${target}".schema_migrations WHERE version = 7`)).rows.length,
      summaries: (await c.query(`SELECT task_id, status, outcome, last_event_id, cancel_requested, cancel_known_through FROM "${target}".summaries ORDER BY task_id`)).rows,
    }));
    expect(rows.versions).toBe(1);
    for (const id of ['stuck', 'stuck-compacted']) {
      const events = await engines[0]!.history(id);
      expect(events.filter((e) => e.type === 'TaskCompleted')).toEqual([expect.objectContaining({ outcome: 'cancelled' })]);
      expect(events.at(-1)!.type).toBe('TaskCompleted');
    }
    expect(rows.summaries).toEqual([
      expect.objectContaining({ task_id: 'idle', status: 'suspended', cancel_requested: false, cancel_known_through: rows.summaries[0].last_event_id }),
      expect.objectContaining({ task_id: 'stuck', status: 'completed', outcome: 'cancelled', cancel_requested: false }),
      expect.objectContaining({ task_id: 'stuck-compacted', status: 'completed', outcome: 'cancelled', cancel_requested: false }),
    ]);
    expect(runs).toBe(0);
  }, 60_000);
});
