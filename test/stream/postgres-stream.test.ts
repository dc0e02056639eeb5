/**
 * Across engines on the PostgreSQL store (docs/streaming.md "Across engines"): a reader on engine
 * B follows a turn that engine A runs, by reading the store; durable items cross, chunks do not.
 */
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { silentLogger } from '../../src/logger.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import type { StreamItem } from '../../src/stream/items.js';
import { PG_URL, describePg, dropSchema, uniqueSchema } from '../helpers/postgres.js';

function gate() {
  let open!: () => void;
  const promise = new Promise<void>((r) => (open = r));
  return { promise, open };
}

describePg('task.stream() across engines on PostgreSQL', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it('a reader on another engine gets every durable item, in order, while the turn runs; chunks stay on the running engine', async () => {
    const schema = uniqueSchema('turnlog_stream');
    cleanups.push(() => dropSchema(schema));
    const hold = gate();
    const wf = defineWorkflow({
      name: 'pg-stream',
      turn: async (ctx) => {
        ctx.emit('token-1');
        await ctx.step('one', () => 1);
        await hold.promise;
        ctx.emit('token-2');
        await ctx.step('two', () => 2);
        return 'done';
      },
    });
    const open = async (name: string) => {
      const store = createPostgresStore({ connectionString: PG_URL, schema });
      const engine = await Engine.open({ store, workflows: [wf], logger: silentLogger, owner: name, instance: name, scanIntervalMs: 0 });
      cleanups.push(() => store.close());
      cleanups.push(() => engine.shutdown({ graceMs: 100 }));
      return engine;
    };
    const a = await open('engine-a');
    const b = await open('engine-b');
    await a.start(wf, null, { taskId: 'pg-s1' });

    const onB: StreamItem[] = [];
    const readingB = (async () => {
      for await (const item of b.stream('pg-s1', { pollMs: 50 })) onB.push(item);
    })();
    // B sees the first step while A's turn is still held open.
    for (let i = 0; i < 400 && !onB.some((x) => x.kind === 'step-completed'); i++) await new Promise((r) => setTimeout(r, 25));
    expect(onB.map((x) => x.kind)).toEqual(['input-queued', 'turn-started', 'step-completed']);
    hold.open();
    await readingB;
    expect(onB.map((x) => x.kind)).toEqual(['input-queued', 'turn-started', 'step-completed', 'step-completed', 'turn-ended', 'task-completed']);
    expect(onB.at(-2)).toMatchObject({ kind: 'turn-ended', status: 'completed', output: 'done' });

    // On A, the same durable items with the same offsets, and the chunks between them.
    const onA: StreamItem[] = [];
    for await (const item of a.stream('pg-s1')) onA.push(item);
    expect(onA.filter((x) => x.kind !== 'chunk' && x.kind !== 'step-started')).toEqual(onB);
    expect(onA.filter((x) => x.kind === 'chunk').map((x) => (x as { data: unknown }).data)).toEqual(['token-1', 'token-2']);
  });
});
