/**
 * Issue #10 items 3–4 in the CLI: a task the engine isolated is marked in `list` and `show`
 * (which shows what is readable and exits 1), and with `--json` every command prints exactly
 * one JSON document, also when it fails half-way through its output.
 */
import { existsSync } from 'node:fs';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Level } from 'level';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventKey } from '../../src/store/keys.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { oneShotHistory, richHistory } from './helpers.js';
import { appendHistory, cli, ensureBuilt, withLevel } from './run-cli.js';

let tmp: { path: string; remove: () => Promise<void> };
let store: string;

beforeAll(async () => {
  ensureBuilt();
  tmp = await makeTmpDir('turnlog-cli-corrupt-');
  store = join(tmp.path, 'store');
  await withLevel(store, async (s) => {
    await appendHistory(s, 'good', oneShotHistory('summarize', 'succeeded'));
    await appendHistory(s, 'bad', richHistory());
    // What the engine writes when it isolates the task.
    await s.markCorrupt({ taskId: 'bad', key: 'events/bad/5', code: 'TURNLOG_HISTORY_CORRUPT', message: 'Stored record events/bad/5 cannot be decoded', time: 0 });
  });
  const db = new Level<Buffer, Buffer>(store, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
  await db.open();
  await db.put(eventKey('bad', 5), Buffer.from([0xff, 0xff, 0x01]));
  await db.close();
});

afterAll(async () => {
  await tmp?.remove();
});

/** Runs with --json and requires stdout to be exactly one JSON document. */
async function oneDocument(args: string[]): Promise<{ code: number; doc: any; stderr: string }> {
  const r = await cli([...args, '--json']);
  let doc: unknown;
  try {
    doc = JSON.parse(r.stdout);
  } catch {
    throw new Error(`turnlog ${args.join(' ')} --json: stdout is not one JSON document (exit ${r.code}):\n${r.stdout}`);
  }
  return { code: r.code, doc, stderr: r.stderr };
}

describe('a corrupt task in the CLI', () => {
  it('list marks it, in the table and in --json', async () => {
    const text = await cli(['--store', store, 'list']);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/bad\s.*\[corrupt\]/);
    expect(text.stdout).toContain('1 task(s) cannot be read and are isolated by the engine: bad (events/bad/5)');
    const { doc } = await oneDocument(['--store', store, 'list']);
    expect(doc.tasks.find((t: { taskId: string }) => t.taskId === 'bad').corrupt).toMatchObject({ key: 'events/bad/5', code: 'TURNLOG_HISTORY_CORRUPT' });
    expect(doc.tasks.find((t: { taskId: string }) => t.taskId === 'good').corrupt).toBeUndefined();
  });

  it('show prints the events before the unreadable one, marks the task and exits 1', async () => {
    const text = await cli(['--store', store, 'show', 'bad']);
    expect(text.code).toBe(1);
    expect(text.stdout).toContain('CORRUPT   events/bad/5 cannot be read (TURNLOG_HISTORY_CORRUPT); shown: the events before it');
    expect(text.stdout).toContain('lookup-order');
    expect(text.stderr).toContain('events/bad/5');
    const { code, doc } = await oneDocument(['--store', store, 'show', 'bad']);
    expect(code).toBe(1);
    expect(doc.corrupt).toMatchObject({ key: 'events/bad/5', code: 'TURNLOG_HISTORY_CORRUPT' });
    expect(doc.timeline.map((t: { eventId: number }) => t.eventId)).toEqual([1, 2, 3, 4]);
    expect((await oneDocument(['--store', store, 'show', 'good'])).doc.corrupt).toBeNull();
  });

  it('events --json closes the array and puts the error in the same document', async () => {
    const { code, doc } = await oneDocument(['--store', store, 'events', 'bad']);
    expect(code).toBe(1);
    expect(doc.events.map((e: { eventId: number }) => e.eventId)).toEqual([1, 2, 3, 4]);
    expect(doc.error).toMatchObject({ code: 'TURNLOG_HISTORY_CORRUPT', exitCode: 1 });
    expect(doc.error.message).toContain('events/bad/5');
    // From the unreadable event on: an empty array and the error.
    const from = await oneDocument(['--store', store, 'events', 'bad', '--from', '5']);
    expect(from.doc.events).toEqual([]);
    expect(from.doc.error.code).toBe('TURNLOG_HISTORY_CORRUPT');
  });

  it('export to stdout fails before writing a byte; to a file it leaves no file', async () => {
    const r = await cli(['--store', store, 'export', 'bad']);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    const out = join(tmp.path, 'bad.json');
    const { code, doc } = await oneDocument(['--store', store, 'export', 'bad', '-o', out]);
    expect(code).toBe(1);
    expect(doc.error.code).toBe('TURNLOG_HISTORY_CORRUPT');
    expect(existsSync(out)).toBe(false);
  });
});

describe('--json: exactly one document from every command, also on errors', () => {
  const cases: [string, string[], number, string][] = [
    ['events of a corrupt task', ['events', 'bad'], 1, 'TURNLOG_HISTORY_CORRUPT'],
    ['export of a corrupt task to stdout', ['export', 'bad'], 1, 'TURNLOG_HISTORY_CORRUPT'],
    ['export --all with a corrupt task', ['export', '--all'], 1, 'TURNLOG_HISTORY_CORRUPT'],
    ['why of a corrupt task', ['why', 'bad'], 1, 'TURNLOG_HISTORY_CORRUPT'],
    ['events of an unknown task', ['events', 'nope'], 3, 'TURNLOG_TASK_NOT_FOUND'],
    ['show of an unknown task', ['show', 'nope'], 3, 'TURNLOG_TASK_NOT_FOUND'],
    ['a bad option value', ['list', '--limit', '0'], 2, 'USAGE'],
    ['an unknown option', ['list', '--nope'], 2, 'USAGE'],
    ['an unknown command', ['frobnicate'], 2, 'USAGE'],
    ['no command', [], 2, 'USAGE'],
    ['a missing argument', ['events'], 2, 'USAGE'],
    ['import of a missing file', ['import', '/nonexistent/file.json'], 3, ''],
    ['replay without --workflows', ['replay', 'bad'], 2, 'USAGE'],
  ];
  for (const [what, args, exit, code] of cases) {
    it(what, async () => {
      const r = await oneDocument(['--store', store, ...args]);
      expect(r.code).toBe(exit);
      expect(r.doc.error.exitCode).toBe(exit);
      if (code) expect(r.doc.error.code).toBe(code);
    });
  }

  it('import into a non-empty directory that is not a store: one error document, nothing written', async () => {
    const file = join(tmp.path, 'good.json');
    expect((await cli(['--store', store, 'export', 'good', '-o', file])).code).toBe(0);
    const project = join(tmp.path, 'project');
    await mkdir(project);
    await writeFile(join(project, 'package.json'), '{}');
    const r = await oneDocument(['--store', project, 'import', file]);
    expect(r.code).toBe(3);
    expect(r.doc.error.code).toBe('TURNLOG_STORE_NOT_FOUND');
    expect(await readdir(project)).toEqual(['package.json']);
  });

  it('stats and list still print their one document on a store with a corrupt task', async () => {
    expect((await oneDocument(['--store', store, 'stats'])).doc.tasks).toBe(2);
    expect((await oneDocument(['--store', store, 'list'])).doc.tasks).toHaveLength(2);
  });
});
