// `turnlog fork` (docs/cli.md#fork): a new task from the end of turn N, the original untouched.
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { compaction } from '../../src/replay/compact.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { appendHistory, cli, cliJSON, ensureBuilt, withLevel } from './run-cli.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});
beforeAll(() => ensureBuilt(), 300_000);

async function storeWithChat(): Promise<string> {
  const d = await makeTmpDir('turnlog-fork-');
  cleanups.push(d.remove);
  const b = historyBuilder('chat', { tick: 10 }).created({ workflow: 'chat', kind: 'multi-turn' });
  b.input('one').turnStarted().step('model', 'r1').completed('r1', { state: { m: ['one', 'r1'] } });
  b.input('two').turnStarted().step('model', 'r2').completed('r2', { state: { m: ['one', 'r1', 'two', 'r2'] } });
  b.input('three').turnStarted();
  const events = b.build();
  await withLevel(d.path, (s) => appendHistory(s, 'chat', events));
  return d.path;
}

describe('a compacted history in the CLI', () => {
  it('show prints the compaction; export and import carry it; fork at a kept turn', async () => {
    const d = await makeTmpDir('turnlog-compacted-');
    cleanups.push(d.remove);
    const b = historyBuilder('c', { tick: 10 }).created({ workflow: 'chat', kind: 'multi-turn' });
    for (let i = 1; i <= 4; i++) b.input(`m${i}`).turnStarted().step('model', `r${i}`).completed(`r${i}`, { state: { n: i } });
    const events = b.build();
    const c = compaction('c', events, 2)!;
    await withLevel(join(d.path, 'a'), async (s) => {
      await appendHistory(s, 'c', events);
      await s.compactHistory('c', c);
    });
    const show = await cli(['--store', join(d.path, 'a'), 'show', 'c']);
    expect(show.stdout).toContain(`history compacted: turns 1..2 (events 2..${c.throughEventId}`);
    const file = join(d.path, 'c.bin');
    expect((await cli(['--store', join(d.path, 'a'), 'export', 'c', '-o', file])).code).toBe(0);
    const imp = await cliJSON(['--store', join(d.path, 'b'), 'import', file, '--json']);
    expect(imp.json).toMatchObject({ events: events.length - c.throughEventId + 2 });
    const f = await cliJSON(['--store', join(d.path, 'b'), 'fork', 'c', '--at-turn', '3', '--json']);
    expect(f.json).toMatchObject({ taskId: 'c-fork-3', status: 'suspended' });
    expect((await cliJSON(['--store', join(d.path, 'b'), 'fork', 'c', '--at-turn', '1', '--json'])).json.error.code).toBe('TURNLOG_TURN_NOT_ENDED');
  });
});

describe('turnlog fork', () => {
  it('forks at the end of turn 1; show prints the origin; the original is untouched', async () => {
    const dir = await storeWithChat();
    const before = await cliJSON(['--store', dir, 'events', 'chat', '--json']);
    const r = await cliJSON(['--store', dir, 'fork', 'chat', '--at-turn', '1', '--json']);
    expect(r.code).toBe(0);
    expect(r.json).toEqual({ taskId: 'chat-fork-1', forkedFrom: { taskId: 'chat', turn: 1 }, events: 5, status: 'suspended' });
    const show = await cli(['--store', dir, 'show', 'chat-fork-1']);
    expect(show.code).toBe(0);
    expect(show.stdout).toContain('forked from chat at the end of turn 1 (event 5)');
    expect((await cliJSON(['--store', dir, 'events', 'chat', '--json'])).json).toEqual(before.json);
    const text = await cli(['--store', dir, 'fork', 'chat', '--at-turn', '2', '--new-task-id', 'b']);
    expect(text.stdout).toContain('forked chat at the end of turn 2 into b: 9 events, status suspended');
  });

  it('exit codes: unknown task 3, turn not ended 1, taken id 1, bad --at-turn 2; nothing written', async () => {
    const dir = await storeWithChat();
    expect((await cliJSON(['--store', dir, 'fork', 'nope', '--at-turn', '1', '--json'])).code).toBe(3);
    const open = await cliJSON(['--store', dir, 'fork', 'chat', '--at-turn', '3', '--json']);
    expect(open.code).toBe(1);
    expect(open.json.error).toMatchObject({ code: 'TURNLOG_TURN_NOT_ENDED' });
    expect(open.json.error.message).toContain('turns 1..2 have');
    const taken = await cliJSON(['--store', dir, 'fork', 'chat', '--at-turn', '1', '--new-task-id', 'chat', '--json']);
    expect(taken.json.error).toMatchObject({ code: 'TURNLOG_TASK_CONFLICT' });
    expect((await cliJSON(['--store', dir, 'fork', 'chat', '--at-turn', 'x', '--json'])).code).toBe(2);
    const list = await cliJSON(['--store', dir, 'list', '--json']);
    expect(JSON.stringify(list.json)).not.toContain('chat-fork');
  });
});
