/**
 * `turnlog why` and `turnlog show` on a task whose turn waits (docs/time.md#waiting-for-an-event-approvals):
 * the open wait with its deadline and the fix, the signals buffered for a later wait, and the
 * timeline lines of WaitStarted and SignalReceived; `--json` lists them.
 */
import { afterEach, beforeAll, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { silentLogger } from '../../src/logger.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { until } from '../helpers/processes.js';
import { cli, cliJSON, ensureBuilt } from './run-cli.js';

const desk = defineWorkflow({
  name: 'why-desk',
  turnTimeoutMs: 7_200_000,
  turn: async (ctx, _: null) => {
    const r = await ctx.waitFor('approval', { timeoutMs: 3_600_000 });
    return r.ok;
  },
});

const dirs: { remove: () => Promise<void> }[] = [];
beforeAll(() => ensureBuilt());
afterEach(async () => {
  for (const d of dirs.splice(0)) await d.remove();
});

it('why names the open wait, its deadline and how to end it, and the buffered signals; show lists them', async () => {
  const dir = await makeTmpDir('turnlog-why-waits-');
  dirs.push(dir);
  const clock = new ManualClock();
  const engine = await Engine.open({ store: dir.path, workflows: [desk], clock, logger: silentLogger, scanIntervalMs: 0, inspect: false });
  await engine.start(desk, null, { taskId: 'w-1' });
  await until(async () => (await engine.history('w-1')).some((e) => e.type === 'WaitStarted'), 'the turn to wait');
  await engine.signal('w-1', 'other', { note: 'for later' });
  await engine.shutdown({ graceMs: 0 });

  const why = await cli(['--store', dir.path, 'why', 'w-1']);
  expect(why.code, why.stderr).toBe(0);
  expect(why.stdout).toMatch(/waiting: {2}turn 1 call 1 waits for signal "approval" until 2026-01-01 01:00:00\.000Z/);
  expect(why.stdout).toContain('`turnlog signal w-1 approval <json>` ends it');
  expect(why.stdout).toMatch(/signal: {3}"other" \(sig-[^)]+\) buffered since .* for the next wait of that name: \{"note":"for later"\}/);
  const json = await cliJSON(['--store', dir.path, 'why', 'w-1']);
  expect(json.json.waits).toEqual([{ turn: 1, seq: 1, name: 'approval', deadline: Date.UTC(2026, 0, 1, 1) }]);
  expect(json.json.signals).toEqual([expect.objectContaining({ name: 'other' })]);

  const show = await cli(['--store', dir.path, 'show', 'w-1']);
  expect(show.stdout).toContain('call 1: wait for signal "approval", times out at 2026-01-01 01:00:00.000Z');
  expect(show.stdout).toContain('signal "other" received');
  const shown = await cliJSON(['--store', dir.path, 'show', 'w-1']);
  expect(shown.json.turns[0].waits).toEqual([expect.objectContaining({ seq: 1, name: 'approval', ended: null })]);
});
