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

describe('operator actions without --yes and without a terminal', () => {
  // docs/cli.md#operator-actions: the refusal is a usage error (exit 2) whatever the store, so a
  // script learns it needs --yes before it learns an engine must run (exit 1) or the store is missing.
  it('is exit 2 (USAGE) on a store no engine holds and on a missing store, and writes nothing', async () => {
    const dir = await makeTmpDir('turnlog-review-cli-');
    cleanups.push(dir.remove);
    const store = join(dir.path, 'store');
    await withLevel(store, async () => undefined);
    const before = readdirSync(store).sort();
    for (const args of [['cancel', 't1'], ['cancel', 't1', '--turn'], ['withdraw', 't1', 'in-1'], ['resend', 't1', '1'], ['resume', 't1']]) {
      for (const at of [store, join(dir.path, 'missing')]) {
        const r = await cliJSON([...args, '--store', at]);
        expect(r.code, `${args.join(' ')} on ${at}`).toBe(2);
        expect(r.json.error.code).toBe('USAGE');
        expect(r.json.error.message).toContain('Pass --yes');
      }
    }
    expect(readdirSync(store).sort()).toEqual(before);
    expect(existsSync(join(dir.path, 'missing'))).toBe(false);
    // With --yes the store's own state decides: no engine answers (exit 1).
    const yes = await cliJSON(['cancel', 't1', '--yes', '--store', store]);
    expect(yes.code).toBe(1);
    expect(yes.json.error.code).toBe('TURNLOG_INSPECT_SOCKET');
  });
});
