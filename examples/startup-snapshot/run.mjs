// Starts the app from the snapshot blob or cold from the bundle and reports what it printed.
//   node examples/startup-snapshot/run.mjs <outDir>   builds, seeds, starts twice from the
//   snapshot and twice cold, and prints the start-up figures.
import { spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from './build.mjs';

/** Runs the app once. `blob` set: start from the snapshot; else a cold start of the same bundle. */
export function runApp({ entry, blob, env }) {
  const args = blob ? ['--snapshot-blob', blob] : [entry];
  const started = process.hrtime.bigint();
  const r = spawnSync(process.execPath, args, { env: { ...process.env, TURNLOG_SNAPSHOT_CAPTURE: '', ...env }, encoding: 'utf8', timeout: 60_000 });
  const wallMs = Number(process.hrtime.bigint() - started) / 1e6;
  const lines = r.stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l));
  return { status: r.status, signal: r.signal, stderr: r.stderr, lines, wallMs };
}

/** Seeds an interrupted task: a process starts it and is SIGKILLed after its first step is recorded. */
export function seed(app, taskId, env) {
  const r = runApp({ ...app, env: { ...env, DEMO_SEED: taskId } });
  if (r.signal !== 'SIGKILL') throw new Error(`seeding ${taskId} should end in SIGKILL, got ${r.status ?? r.signal}: ${r.stderr}`);
  return r;
}

/** The figures: time from spawn to `ready` (activated + recovery pass) and to exit, per start. */
export function measure(outDir, { rounds = 2 } = {}) {
  const store = join(outDir, 'store');
  const results = [];
  for (const mode of ['snapshot', 'cold']) {
    for (let i = 1; i <= rounds; i++) {
      const app = mode === 'snapshot' ? { blob: join(outDir, 'app.blob') } : { entry: join(outDir, 'app.cjs') };
      const env = { DEMO_STORE: store, DEMO_SESSION: 'demo-session', DEMO_RESTORE_ID: `restore-${i}` };
      const taskId = `${mode}-${i}`;
      seed(app, taskId, env);
      const r = runApp({ ...app, env: { ...env, DEMO_AWAIT: taskId } });
      const ready = r.lines.find((l) => l.event === 'ready');
      results.push({ mode, taskId, status: r.status, mainMs: ready?.mainMs, readyInProcessMs: ready?.sinceProcessStartMs, totalWallMs: Math.round(r.wallMs * 10) / 10, lines: r.lines, stderr: r.stderr });
    }
  }
  return results;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const outDir = resolve(process.argv[2] ?? join(fileURLToPath(new URL('.', import.meta.url)), 'out'));
  rmSync(outDir, { recursive: true, force: true });
  await build(outDir, join(outDir, 'store'));
  for (const r of measure(outDir, { rounds: Number(process.argv[3] ?? 3) })) {
    const done = r.lines.find((l) => l.event === 'completed');
    console.log(`${r.mode.padEnd(8)} ${r.taskId.padEnd(11)} main ${String(r.mainMs).padStart(6)} ms, ready ${String(r.readyInProcessMs).padStart(6)} ms after process start, exit after ${String(r.totalWallMs).padStart(6)} ms wall; ${done ? `${done.status} (${done.output.entryMode}, attempt ${done.output.attempt})` : 'NOT COMPLETED ' + r.stderr}`);
  }
}
