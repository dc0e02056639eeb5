// Shared by the crash matrices: runs a driver child (optionally SIGKILLed after its N-th
// append) and reads back the history it left on the Level store.
import { spawnSync } from 'node:child_process';
import { afterAll } from 'vitest';
import { makeTmpDir } from './tmp-dir.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import type { HistoryEvent } from '../../src/history/events.js';

export function runDriver(driver: string, dir: string, killAfter?: number) {
  const env = { ...process.env };
  delete env['TURNLOG_FAULT_KILL_AFTER_APPEND'];
  if (killAfter !== undefined) env['TURNLOG_FAULT_KILL_AFTER_APPEND'] = String(killAfter);
  const r = spawnSync(process.execPath, [driver, dir], { env, encoding: 'utf8', timeout: 60_000 });
  return { status: r.status, signal: r.signal, stdout: r.stdout, stderr: r.stderr };
}

export async function readStoredHistory(dir: string, taskId: string): Promise<HistoryEvent[]> {
  const store = new LevelHistoryStore(dir);
  await store.open();
  try {
    return await store.readEvents(taskId);
  } finally {
    await store.close();
  }
}

/**
 * The matrix: a baseline run, then for N = 1, 2, … a run SIGKILLed after its N-th append and a
 * second run that finishes; every run's output must equal the baseline's and `check(dir)` hold.
 * Stops at the first N past the last append; returns how many runs were killed.
 */
export async function killAtEveryAppend(
  driver: string,
  newDir: () => Promise<string>,
  check: (dir: string) => Promise<void>,
  maxN = 200,
): Promise<{ killed: number; expected: unknown }> {
  const { expect } = await import('vitest');
  const base = await newDir();
  const baseline = runDriver(driver, base);
  expect(baseline.status, baseline.stderr).toBe(0);
  const expected = JSON.parse(baseline.stdout) as unknown;
  await check(base);
  let killed = 0;
  for (let n = 1; n < maxN; n++) {
    const dir = await newDir();
    const first = runDriver(driver, dir, n);
    if (first.status === 0) {
      // N is past the last append: the run finished untouched. The matrix is complete.
      expect(JSON.parse(first.stdout)).toEqual(expected);
      break;
    }
    expect(first.signal, `run killed after append ${n}: ${first.stderr}`).toBe('SIGKILL');
    killed++;
    const second = runDriver(driver, dir);
    expect(second.status, `resume after kill at append ${n}: ${second.stderr}`).toBe(0);
    expect(JSON.parse(second.stdout), `conversation after kill at append ${n}`).toEqual(expected);
    await check(dir);
  }
  return { killed, expected };
}

/** Temporary store directories for a matrix, removed after the file's tests. */
export function matrixDirs(prefix: string): () => Promise<string> {
  const dirs: { remove: () => Promise<void> }[] = [];
  afterAll(async () => {
    for (const d of dirs) await d.remove();
  });
  return async () => {
    const d = await makeTmpDir(prefix);
    dirs.push(d);
    return d.path;
  };
}
