/**
 * What is at a store path, checked before LevelDB opens it: LevelDB creates its files in any
 * directory it is given (`Engine.open({ store: '.' })` wrote them next to package.json). One
 * check for the Level store and the CLI (docs/storage.md#the-store-directory).
 */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * - `missing`: nothing there (LevelDB creates the directory);
 * - `empty`: an empty directory;
 * - `store`: a directory holding a LevelDB (a `CURRENT` file);
 * - `foreign`: a non-empty directory without one (a project folder, a typo);
 * - `not-directory`: a file or something else.
 */
export type StoreDirState = 'missing' | 'empty' | 'store' | 'foreign' | 'not-directory';

export async function inspectStoreDir(dir: string): Promise<StoreDirState> {
  const st = await stat(dir).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return undefined;
    throw err;
  });
  if (st === undefined) return 'missing';
  if (!st.isDirectory()) return 'not-directory';
  const current = await stat(join(dir, 'CURRENT')).catch(() => undefined);
  if (current?.isFile()) return 'store';
  return (await readdir(dir)).length === 0 ? 'empty' : 'foreign';
}
