/**
 * Child tasks on PostgreSQL: the parent runs on engine A, whose only turn slot it holds, so its
 * child runs on engine B (another owner and instance); A learns the child's end through the
 * shared store and records it once in the parent's history.
 */
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { silentLogger } from '../../src/logger.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema } from '../helpers/postgres.js';

const researcher = defineWorkflow({
  name: 'pg-researcher',
  turn: async (ctx, topic: string) => ctx.step('search', () => `notes on ${topic}`),
});
const lead = defineWorkflow({
  name: 'pg-lead',
  turnTimeoutMs: 60_000,
  turn: async (ctx, topic: string) => (await ctx.startChild(researcher, topic)).result(),
});

describePg('child tasks on PostgreSQL', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it('a child runs on another engine; the parent records its outcome once', async () => {
    const schema = uniqueSchema('turnlog_children');
    cleanups.push(() => dropSchema(schema));
    const open = async (owner: string, instance: string, maxRunningTurns: number): Promise<Engine> => {
      const store = createPostgresStore({ connectionString: PG_URL, schema });
      const engine = await Engine.open({ store, workflows: [lead, researcher], logger: silentLogger, owner, instance, maxRunningTurns, scanIntervalMs: 100 });
      cleanups.push(() => store.close());
      cleanups.push(() => engine.shutdown({ graceMs: 100 }));
      return engine;
    };
    const a = await open('engine-a', 'host-a', 1);
    const b = await open('engine-b', 'host-b', 8);
    const h = await a.start(lead, 'tides', { taskId: 'pg-lead-1' });
    expect(await h.result()).toBe('notes on tides');
    const child = await b.history('pg-lead-1/c1.1');
    expect(child[0]).toMatchObject({ type: 'TaskCreated', parent: { taskId: 'pg-lead-1', turn: 1, seq: 1 } });
    expect(child.filter((e) => e.type === 'TurnStarted').map((e) => (e.type === 'TurnStarted' ? e.instance : ''))).toEqual(['host-b']);
    const parent = await a.history('pg-lead-1');
    expect(parent.filter((e) => e.type === 'ChildStarted')).toHaveLength(1);
    expect(parent.filter((e) => e.type === 'ChildEnded')).toMatchObject([{ childId: 'pg-lead-1/c1.1', status: 'completed' }]);
    expect((await b.describe('pg-lead-1')).children).toEqual([{ childId: 'pg-lead-1/c1.1', workflow: 'pg-researcher', turn: 1, seq: 1, detached: false, status: 'completed' }]);
  });
});
