/**
 * Review probes: CLI commands on edge stores and histories.
 */
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { cli, cliJSON, ensureBuilt, withLevel } from './run-cli.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

beforeAll(() => ensureBuilt(), 300_000);

describe('review: reading commands never create a store', () => {
  it('an existing directory that holds no LevelDB is exit 3 and is left untouched', async () => {
    const dir = await makeTmpDir('turnlog-review-cli-');
    cleanups.push(dir.remove);
    for (const args of [['list'], ['why', 't1'], ['stats'], ['show', 't1'], ['events', 't1']]) {
      const r = await cliJSON([...args, '--store', dir.path]);
      expect(r.code, args.join(' ')).toBe(3);
      expect(r.json.error.code).toBe('TURNLOG_STORE_NOT_FOUND');
    }
    expect(readdirSync(dir.path)).toEqual([]);
  });

  it('a real but empty store still lists no tasks (exit 0)', async () => {
    const dir = await makeTmpDir('turnlog-review-cli-');
    cleanups.push(dir.remove);
    await withLevel(dir.path, async () => undefined);
    expect(existsSync(join(dir.path, 'CURRENT'))).toBe(true);
    const r = await cli(['list', '--store', dir.path]);
    expect(r.code).toBe(0);
  });
});
