/**
 * `turnlog export --all` / `turnlog import` edges (issue #18 item 5): an empty store's binary
 * export round-trips; import leaves a void lease so the first claim takes a new generation
 * (docs/history.md, LeaseClaimed), and a snapshot so the first recovery reads no full history.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Level } from 'level';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { encodeHistoryFile, parseHistoryFile } from '../../src/history/history-file.js';
import { decodeState } from '../../src/history/state-codec.js';
import { fold } from '../../src/replay/fold.js';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { LevelHistoryStore } from '../../src/store/index.js';
import { eventKey, summaryKey } from '../../src/store/keys.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { T0, historyBuilder } from '../../src/testing/history-builder.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { oneShotHistory } from './helpers.js';
import { appendHistory, cli, cliJSON, ensureBuilt, withLevel } from './run-cli.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});
beforeAll(() => ensureBuilt(), 300_000);

async function tmp(): Promise<string> {
  const d = await makeTmpDir('turnlog-import-');
  cleanups.push(d.remove);
  return d.path;
}

/** An in-progress task of workflow `resumable`: turn 1 ran steps a, b, c under generation 1. */
function inProgress() {
  return historyBuilder('imp-1').created({ workflow: 'resumable', kind: 'multi-turn' }).input('hi').turnStarted().step('a', 1).step('b', 2).step('c', 3).build();
}

describe('export --all of an empty store', () => {
  it('binary: a non-empty file that reads back as zero tasks and imports (JSON did already)', async () => {
    const empty = await tmp();
    await withLevel(empty, async () => undefined);
    for (const format of ['binary', 'json'] as const) {
      const file = join(await tmp(), `all.${format === 'binary' ? 'bin' : 'json'}`);
      const ex = await cli(['--store', empty, 'export', '--all', '-o', file]);
      expect(ex.code, ex.stderr).toBe(0);
      const im = await cliJSON(['--store', join(await tmp(), 'copy'), 'import', file]);
      expect(im.code, JSON.stringify(im.json)).toBe(0);
      expect(im.json).toMatchObject({ format, tasks: [], events: 0 });
    }
    expect(parseHistoryFile(await encodeHistoryFile([], 'binary'), 'x.bin').tasks).toEqual([]);
  });
});

describe('import', () => {
  it('leaves a void lease at the history generation: the first recovery claims generation + 1, from the snapshot', async () => {
    const events = inProgress();
    const file = join(await tmp(), 'imp.json');
    await writeFile(file, await encodeHistoryFile({ taskId: 'imp-1', events }, 'json'));
    const dir = join(await tmp(), 'store');
    expect((await cli(['--store', dir, 'import', file])).code).toBe(0);
    await withLevel(dir, async (s) => {
      expect(await s.getLease('imp-1')).toMatchObject({ owner: 'turnlog-import', generation: 1, expiresAt: 0 });
      const snap = await s.getSnapshot('imp-1');
      expect(snap?.eventId).toBe(events.length);
      expect(decodeState(snap!.data)).toEqual(fold('imp-1', events));
    });

    const resumable = defineWorkflow({
      name: 'resumable',
      kind: 'multi-turn',
      turn: async (ctx) => {
        const sum = (await ctx.step('a', () => 0)) + (await ctx.step('b', () => 0)) + (await ctx.step('c', () => 0));
        return ctx.suspend('done', sum);
      },
    });
    const store = new LevelHistoryStore(dir);
    const reads: (number | undefined)[] = [];
    const readEvents = store.readEvents.bind(store);
    store.readEvents = (taskId, options) => {
      reads.push(options?.fromEventId);
      return readEvents(taskId, options);
    };
    // The builder's clock: the turn's deadline has not passed, so recovery re-runs it.
    const clock = new ManualClock(T0 + 10_000);
    const engine = await Engine.open({ store, workflows: [resumable], logger: silentLogger, scanIntervalMs: 0, clock });
    try {
      await engine.turnResult('imp-1', 'in-1');
      const after = await engine.history('imp-1');
      const claim = after.find((e) => e.type === 'LeaseClaimed');
      expect(claim).toMatchObject({ generation: 2, previousGeneration: 1, reason: 'recovery' });
      expect(after.at(-1)).toMatchObject({ type: 'TurnSuspended', generation: 2 });
      // Loading the task read only what follows the snapshot (nothing), never event 1.
      expect(reads[0]).toBe(events.length + 1);
    } finally {
      await engine.shutdown({ graceMs: 0 });
    }
  });
});

describe('import over a corrupt task', () => {
  it('a task whose summary cannot be read exists: a conflict without --force, replaced (mark cleared) with it', async () => {
    const events = oneShotHistory('summarize', 'succeeded');
    const file = join(await tmp(), 'good.json');
    await writeFile(file, await encodeHistoryFile({ taskId: 'bad', events }, 'json'));
    const dir = join(await tmp(), 'store');
    await withLevel(dir, async (s) => {
      await appendHistory(s, 'bad', events);
      await s.markCorrupt({ taskId: 'bad', key: 'summary/bad', code: 'TURNLOG_HISTORY_CORRUPT', message: 'unreadable', time: 0 });
    });
    const db = new Level<Buffer, Buffer>(dir, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
    await db.open();
    await db.put(summaryKey('bad'), Buffer.from([0xff, 0xff, 0x01]));
    await db.put(eventKey('bad', 2), Buffer.from([0xff, 0xff, 0x01]));
    await db.close();

    const refused = await cliJSON(['--store', dir, 'import', file]);
    expect(refused.code).toBe(1);
    expect(refused.json.error.code).toBe('TURNLOG_TASK_CONFLICT');
    expect(refused.json.error.message).toContain('bad (unreadable summary)');

    const forced = await cliJSON(['--store', dir, 'import', '--force', file]);
    expect(forced.code, JSON.stringify(forced.json)).toBe(0);
    expect(forced.json.tasks).toEqual([expect.objectContaining({ taskId: 'bad', replaced: true, status: 'completed' })]);
    await withLevel(dir, async (s) => {
      expect(await s.listCorrupt()).toEqual([]);
      expect(await s.readEvents('bad')).toEqual(events);
    });
  });
});
