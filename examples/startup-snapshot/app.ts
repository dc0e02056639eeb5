/**
 * An app built into a Node startup snapshot. At build time (`--build-snapshot`, capture mode)
 * it registers its workflows and opens nothing; the deserialized main function calls
 * `afterRestore()`, which opens LevelDB (its native module loads only then) and recovers.
 * The same file runs as a plain cold start for comparison. See README.md beside it.
 *
 * Environment at run time:
 *   DEMO_STORE     store directory (required)
 *   DEMO_SEED      start this task and crash (SIGKILL) in the middle of its turn
 *   DEMO_AWAIT     wait for this task's turn to end and print it
 *   DEMO_SESSION, DEMO_RESTORE_ID   the restore's session and restore id (snapshot starts)
 */
import v8 from 'node:v8';
import { Engine } from '../../src/runtime/engine.js';
import { SnapshotLifecycle } from '../../src/runtime/lifecycle.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';

function emit(event: string, fields: Record<string, unknown> = {}): void {
  process.stdout.write(JSON.stringify({ event, ...fields }) + '\n');
}

const report = defineWorkflow({
  name: 'report',
  turn: async (ctx, topic: string) => {
    const facts = await ctx.step('fetch', () => {
      emit('effect', { taskId: ctx.taskId, step: 'fetch', attempt: ctx.attempt });
      return [`${topic} is durable`, `${topic} recovers`];
    });
    // The crash window: the seeding run dies here, after `fetch` is recorded.
    if (process.env['DEMO_SEED'] === ctx.taskId) process.kill(process.pid, 'SIGKILL');
    const summary = await ctx.step('summarize', () => {
      emit('effect', { taskId: ctx.taskId, step: 'summarize', attempt: ctx.attempt });
      return facts.join('; ');
    });
    return { summary, entryMode: ctx.entryMode, attempt: ctx.attempt };
  },
});

// Everything below runs at capture time too: it must open nothing (no store, timer or socket).
const engine = Engine.create({
  store: process.env['DEMO_STORE'] ?? '.turnlog-snapshot-demo',
  workflows: [report],
  scanIntervalMs: 60_000,
});
const lifecycle = new SnapshotLifecycle({ engine, name: 'report-app' });

async function main(fromSnapshot: boolean): Promise<void> {
  // Process start to here: Node boot plus, for a cold start, loading and evaluating the bundle.
  const mainMs = Math.round(performance.now() * 10) / 10;
  const env = process.env;
  const store = env['DEMO_STORE'];
  if (!store) throw new Error('DEMO_STORE must name the store directory.');
  if (fromSnapshot) {
    await lifecycle.afterRestore({ sessionId: env['DEMO_SESSION'] ?? 'demo', restoreId: env['DEMO_RESTORE_ID'] ?? `r-${process.pid}` });
  } else {
    await lifecycle.start(); // cold start: activates now (TURNLOG_SNAPSHOT_CAPTURE is unset)
  }
  // Activated and the immediate recovery pass ran (recovered turns are running now).
  emit('ready', { fromSnapshot, mainMs, sinceProcessStartMs: Math.round(performance.now() * 10) / 10, owner: engine.owner });
  const seed = env['DEMO_SEED'];
  if (seed) await engine.start(report, 'turnlog', { taskId: seed, inputId: `${seed}-in` });
  const wait = env['DEMO_AWAIT'];
  if (wait) {
    const r = await engine.turnResult(wait, `${wait}-in`);
    emit('completed', { taskId: wait, status: r.status, output: r.output });
  }
  await lifecycle.stop();
}

function fail(err: unknown): void {
  console.error(err);
  process.exitCode = 1;
}

if (v8.startupSnapshot.isBuildingSnapshot()) {
  if (!lifecycle.capture) throw new Error('Build the snapshot with TURNLOG_SNAPSHOT_CAPTURE=true (build.mjs sets it).');
  void lifecycle.start(); // 'deferred': nothing opens while capturing
  v8.startupSnapshot.setDeserializeMainFunction(() => main(true).catch(fail));
} else {
  main(false).catch(fail);
}
