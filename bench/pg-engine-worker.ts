// One engine process of the PostgreSQL engines benchmark (bench/postgres-engines.bench.ts). argv:
// url, schema, tasks, turns per task, name. Opens an engine and runs one warm-up round of the same
// load (JIT and pool warm, as in a long-lived engine), prints "ready", runs its one-step turns
// after "go" on stdin, prints "done <process CPU ms> <appends> <commits>" of the timed round, and exits.
import { createInterface } from 'node:readline';
import { Engine } from '../src/runtime/engine.js';
import { silentLogger } from '../src/logger.js';
import { createPostgresStore } from '../src/store/postgres-store.js';
import { defineWorkflow } from '../src/workflow/define-workflow.js';

const [url, schema, tasks, turns, name] = process.argv.slice(2) as [string, string, string, string, string];
const oneStep = defineWorkflow({ name: 'one-step', kind: 'multi-turn', turn: (ctx, x: number) => ctx.step('s', () => x + 1) });
const store = createPostgresStore({ connectionString: url, schema });
const engine = await Engine.open({ store, workflows: [oneStep], logger: silentLogger, scanIntervalMs: 0, owner: name, instance: name });
const round = (tag: string) =>
  Promise.all(
    Array.from({ length: Number(tasks) }, async (_, i) => {
      const h = await engine.start(oneStep, 0, { taskId: `${name}-${tag}${i}` });
      await h.nextTurn();
      for (let k = 1; k < Number(turns); k++) {
        await h.send(k);
        await h.nextTurn();
      }
    }),
  );
await round('w');
const lines = createInterface({ input: process.stdin });
process.stdout.write('ready\n');
await new Promise<void>((r) => lines.once('line', () => r()));
const cpu0 = process.cpuUsage();
const gc0 = store.groupCommitStats();
await round('t');
const cpu = process.cpuUsage(cpu0);
const gc = store.groupCommitStats();
process.stdout.write(`done ${(cpu.user + cpu.system) / 1000} ${gc.appends - gc0.appends} ${gc.batches - gc0.batches}\n`);
await engine.shutdown();
await store.close();
lines.close();
