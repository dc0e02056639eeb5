// The package entry's own functions (docs/storage.md promises `openStore` from 'turnlog').
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { isTurnlogError, MemoryHistoryStore, openStore } from '../src/index.js';
import { makeTmpDir } from './helpers/tmp-dir.js';

let cleanup: (() => Promise<void>) | undefined;
afterEach(async () => {
  await cleanup?.();
  cleanup = undefined;
});

describe('openStore', () => {
  it('creates and opens a LevelDB store in a missing directory, and reopens it', async () => {
    const dir = await makeTmpDir();
    cleanup = dir.remove;
    const path = join(dir.path, 'store');
    const store = await openStore(path);
    expect(store.exclusive).toBe(true);
    expect((await store.listTasks({ limit: 10 })).tasks).toEqual([]);
    await store.close();
    const again = await openStore(path);
    await again.close();
  });

  it('refuses a non-empty directory that holds no store, writing nothing (TURNLOG_STORE_NOT_FOUND)', async () => {
    const dir = await makeTmpDir();
    cleanup = dir.remove;
    await mkdir(join(dir.path, 'src'));
    await writeFile(join(dir.path, 'package.json'), '{}');
    const err = await openStore(dir.path).catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_STORE_NOT_FOUND')).toBe(true);
  });

  it('opens a store object as is', async () => {
    const mem = new MemoryHistoryStore();
    expect(await openStore(mem)).toBe(mem);
    expect((await mem.listTasks({ limit: 1 })).tasks).toEqual([]);
    await mem.close();
  });
});
