/**
 * Issue #10 item 16: a store is only created in a missing or empty directory. A non-empty
 * directory that is not a turnlog store is refused before LevelDB writes a byte, and an open the
 * operating system refuses names the system's error (TURNLOG_STORE_OPEN) instead of
 * TURNLOG_STORE_CLOSED.
 */
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Level } from 'level';
import { afterEach, describe, expect, it } from 'vitest';
import { isTurnlogError } from '../../src/errors.js';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { LevelHistoryStore, openStore } from '../../src/store/index.js';
import { inspectStoreDir } from '../../src/store/store-dir.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

async function tmp(): Promise<string> {
  const d = await makeTmpDir('turnlog-dir-');
  cleanups.push(d.remove);
  return d.path;
}

async function failure(p: Promise<unknown>): Promise<Error & { code?: string }> {
  const err = await p.then(() => undefined, (e: unknown) => e);
  if (!(err instanceof Error)) throw new Error('expected a rejection');
  return err;
}

const echo = defineWorkflow({ name: 'echo', turn: async (_ctx, x: number) => x });

describe('the store directory', () => {
  it("Engine.open({ store: <a project directory> }) writes nothing into it", async () => {
    const project = await tmp();
    await writeFile(join(project, 'package.json'), '{}');
    await mkdir(join(project, 'src'));
    const err = await failure(Engine.open({ store: project, workflows: [echo], logger: silentLogger, scanIntervalMs: 0 }));
    expect(isTurnlogError(err, 'TURNLOG_STORE_NOT_FOUND')).toBe(true);
    expect(err.message).toContain(`Store ${project} is a non-empty directory that holds no turnlog store; nothing was written to it`);
    expect((await readdir(project)).sort()).toEqual(['package.json', 'src']);
  });

  it('creates a store in a missing or an empty directory, and reopens it', async () => {
    const empty = await tmp();
    for (const dir of [join(await tmp(), 'a', 'b', 'store'), empty]) {
      expect(await inspectStoreDir(dir)).toBe(dir === empty ? 'empty' : 'missing');
      const store = await openStore(dir);
      await store.close();
      expect(await inspectStoreDir(dir)).toBe('store');
      await (await openStore(dir)).close();
    }
  });

  it('refuses a file, and a LevelDB that another program wrote, without touching them', async () => {
    const root = await tmp();
    const file = join(root, 'notes.txt');
    await writeFile(file, 'hello');
    const fileErr = await failure(openStore(file));
    expect(isTurnlogError(fileErr, 'TURNLOG_STORE_NOT_FOUND')).toBe(true);
    expect(fileErr.message).toContain('is not a directory');

    const foreign = join(root, 'other-app');
    const db = new Level<string, string>(foreign);
    await db.put('user:1', 'alice');
    await db.close();
    const err = await failure(openStore(foreign));
    expect(isTurnlogError(err, 'TURNLOG_STORE_NOT_FOUND')).toBe(true);
    expect(err.message).toContain('written by something other than turnlog');
    const again = new Level<string, string>(foreign);
    expect(await again.keys().all()).toEqual(['user:1']);
    await again.close();
  });

  it('create: false opens only an existing store', async () => {
    const root = await tmp();
    for (const dir of [join(root, 'missing'), root]) {
      const err = await failure(new LevelHistoryStore(dir, { create: false }).open());
      expect(isTurnlogError(err, 'TURNLOG_STORE_NOT_FOUND')).toBe(true);
    }
    expect(await readdir(root)).toEqual([]);
  });

  it('an open the operating system refuses is TURNLOG_STORE_OPEN with its cause, not TURNLOG_STORE_CLOSED', async () => {
    const root = await tmp();
    await writeFile(join(root, 'file'), 'x');
    const err = await failure(openStore(join(root, 'file', 'store')));
    expect(isTurnlogError(err, 'TURNLOG_STORE_OPEN')).toBe(true);
    expect(err.message).toContain('ENOTDIR');
    let cause: unknown = err.cause;
    const codes: unknown[] = [];
    for (; cause instanceof Error; cause = cause.cause) codes.push((cause as { code?: unknown }).code);
    expect(codes).toContain('ENOTDIR');
  });
});
