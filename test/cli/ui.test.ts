/** `turnlog ui` as a process: usage errors, a missing store, and a clean stop on SIGTERM. */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterEach, beforeAll, expect, it } from 'vitest';
import { appendHistory, cli, ensureBuilt, MAIN, withLevel } from './run-cli.js';
import { richHistory } from './helpers.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const cleanups: (() => Promise<unknown>)[] = [];
beforeAll(() => ensureBuilt());
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

it('rejects a bad port (exit 2) and a missing store (exit 3)', async () => {
  const tmp = await makeTmpDir('turnlog-ui-cli-');
  cleanups.push(tmp.remove);
  expect((await cli(['--store', tmp.path, 'ui', '--port', '70000'])).code).toBe(2);
  const missing = await cli(['--store', join(tmp.path, 'nope'), 'ui', '--port', '0']);
  expect([missing.code, missing.stderr]).toEqual([3, expect.stringContaining('does not exist')]);
});

it('prints its URL first, serves the store, and on SIGTERM stops and releases the store', async () => {
  const tmp = await makeTmpDir('turnlog-ui-cli-');
  cleanups.push(tmp.remove);
  await withLevel(tmp.path, (s) => appendHistory(s, 't-rich', richHistory()));
  const child = spawn(process.execPath, [MAIN, '--store', tmp.path, 'ui', '--port', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const line = await new Promise<string>((resolve) => createInterface({ input: child.stdout }).once('line', resolve));
  const url = /^turnlog ui: (http:\/\/127\.0\.0\.1:\d+\/) /.exec(line)?.[1];
  expect(url).toBeDefined();
  const res = await fetch(new URL('/api/tasks', url));
  expect(((await res.json()) as { tasks: { taskId: string }[] }).tasks.map((t: { taskId: string }) => t.taskId)).toEqual(['t-rich']);
  child.kill('SIGTERM');
  expect(await exited).toBe(0);
  // The lock is released: a reading command opens the store again.
  expect((await cli(['--store', tmp.path, 'list'])).code).toBe(0);
});
