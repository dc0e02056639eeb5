/**
 * Runs the real built binary (`node dist/src/cli/main.js`) and captures its output and exit
 * code. Builds first when any source file is newer than the built entry point.
 */
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LevelHistoryStore } from '../../src/store/index.js';
import type { HistoryEvent } from '../../src/history/events.js';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const MAIN = join(ROOT, 'dist/src/cli/main.js');

function newestMtime(dir: string): number {
  if (!existsSync(dir)) return 0;
  let m = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    m = Math.max(m, e.isDirectory() ? newestMtime(p) : statSync(p).mtimeMs);
  }
  return m;
}

const LOCK = join(ROOT, 'dist/.build-lock');

// Test files run in parallel workers: one tsc at a time, and nobody reads dist mid-build.
function withBuildLock(fn: () => void): void {
  mkdirSync(join(ROOT, 'dist'), { recursive: true });
  const deadline = Date.now() + 300_000;
  for (;;) {
    try {
      mkdirSync(LOCK);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const age = Date.now() - (statSync(LOCK, { throwIfNoEntry: false })?.mtimeMs ?? Date.now());
      if (age > 300_000) rmSync(LOCK, { recursive: true, force: true }); // a killed run's lock
      if (Date.now() > deadline) throw new Error(`Timed out waiting for ${LOCK}; remove it if no build runs.`);
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100);
    }
  }
  try {
    fn();
  } finally {
    rmSync(LOCK, { recursive: true, force: true });
  }
}

/** Compiles with tsc when dist is missing or older than src/ (npm test builds anyway). */
export function ensureBuilt(): void {
  withBuildLock(() => {
    const sources = Math.max(newestMtime(join(ROOT, 'src')), newestMtime(join(ROOT, 'test/fixtures')));
    if (existsSync(MAIN) && statSync(MAIN).mtimeMs >= sources) return;
    try {
      execFileSync(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json'], { cwd: ROOT, stdio: 'pipe' });
    } catch {
      // Type errors elsewhere in the tree still emit JavaScript; the existence check below decides.
    }
  });
  if (!existsSync(MAIN)) throw new Error(`${MAIN} was not built; run npx tsc -p tsconfig.json`);
}

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `turnlog …args`; never rejects, the exit code is in the result. */
export function cli(args: readonly string[], env: Record<string, string | undefined> = {}): Promise<CliResult> {
  const fullEnv: Record<string, string | undefined> = { ...process.env, TURNLOG_STORE: undefined, ...env };
  for (const k of Object.keys(fullEnv)) if (fullEnv[k] === undefined) delete fullEnv[k];
  return new Promise((res) => {
    execFile(process.execPath, [MAIN, ...args], { env: fullEnv as NodeJS.ProcessEnv, maxBuffer: 256 * 1024 * 1024, encoding: 'utf8' }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
      res({ code, stdout, stderr });
    });
  });
}

/** Runs `turnlog …args` and returns stdout as bytes (binary exports to stdout). */
export function cliBytes(args: readonly string[]): Promise<{ code: number; stdout: Buffer; stderr: string }> {
  const env: Record<string, string | undefined> = { ...process.env };
  delete env['TURNLOG_STORE'];
  return new Promise((res) => {
    execFile(process.execPath, [MAIN, ...args], { env: env as NodeJS.ProcessEnv, maxBuffer: 256 * 1024 * 1024, encoding: 'buffer' }, (err, stdout, stderr) => {
      res({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr: stderr.toString('utf8') });
    });
  });
}

/** Runs the CLI with `--json` and parses stdout. */
export async function cliJSON(args: readonly string[], env: Record<string, string | undefined> = {}): Promise<{ code: number; json: any; stderr: string }> {
  const r = await cli([...args, '--json'], env);
  let json: unknown;
  try {
    json = JSON.parse(r.stdout);
  } catch {
    throw new Error(`stdout is not JSON (exit ${r.code}):\n${r.stdout}\n${r.stderr}`);
  }
  return { code: r.code, json, stderr: r.stderr };
}

/** Opens a Level store, runs `fn`, closes it (the CLI needs the lock afterwards). */
export async function withLevel<T>(dir: string, fn: (s: LevelHistoryStore) => Promise<T>): Promise<T> {
  const store = new LevelHistoryStore(dir, { sync: false });
  await store.open();
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}

/** Appends a built history through the store API, split at generation changes. */
export async function appendHistory(store: LevelHistoryStore, taskId: string, events: readonly HistoryEvent[]): Promise<void> {
  let i = 0;
  while (i < events.length) {
    const g = events[i]!.generation;
    let j = i + 1;
    while (j < events.length && events[j]!.generation === g) j++;
    await store.append(taskId, events.slice(i, j), { expectedLastEventId: i, generation: g });
    i = j;
  }
}
