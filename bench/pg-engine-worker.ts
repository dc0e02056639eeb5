// One engine process of the PostgreSQL benchmark (bench/postgres.bench.ts). argv: url, schema,
// tasks, turns per task, name. Opens an engine, prints "ready", runs its one-step turns after
// "go" on stdin, prints "done", and exits.
import { createInterface } from 'node:readline';
import { Engine } from '../src/runtime/engine.js';
import { silentLogger } from '../src/logger.js';
import { createPostgresStore } from '../src/store/postgres-store.js';
import { defineWorkflow } from '../src/workflow/define-workflow.js';

const [url, schema, tasks, turns, name] = process.argv.slice(2) as [string, string, string, string, string];
const oneStep = defineWorkflow({ name: 'one-step', kind: 'multi-turn', turn: (ctx, x: number) => ctx.step('s', () => x + 1) });
const store = createPostgresStore({ connectionString: url, schema });
const engine = await Engine.open({ store, workflows: [oneStep], logger: silentLogger, scanIntervalMs: 0, owner: name, instance: name });
const lines = createInterface({ input: process.stdin });
process.stdout.write('ready\n');
await new Promise<void>((r) => lines.once('line', () => r()));
await Promise.all(
  Array.from({ length: Number(tasks) }, async (_, i) => {
    const h = await engine.start(oneStep, 0, { taskId: `${name}-${i}` });
    await h.nextTurn();
    for (let k = 1; k < Number(turns); k++) {
      await h.send(k);
      await h.nextTurn();
    }
  }),
);
process.stdout.write('done\n');
await engine.shutdown();
await store.close();
lines.close();
