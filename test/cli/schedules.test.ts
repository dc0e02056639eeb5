/** `turnlog schedules` (docs/cli.md#schedules): the store's schedules, read from their tasks. */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { silentLogger } from '../../src/logger.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { cli, cliJSON, ensureBuilt } from './run-cli.js';

let tmp: { path: string; remove: () => Promise<void> };
let store: string;
const report = defineWorkflow({ name: 'report', turn: async (_ctx, _: null) => 'ok' });

beforeAll(async () => {
  ensureBuilt();
  tmp = await makeTmpDir('turnlog-cli-schedules-');
  store = join(tmp.path, 'store');
  const engine = await Engine.open({ store, workflows: [report], clock: new ManualClock(), logger: silentLogger, scanIntervalMs: 0, inspect: false });
  await engine.schedule('nightly', { cron: '0 2 * * *', workflow: report, input: null, timezone: 'Europe/Paris', catchUp: 'all' });
  await engine.schedule('gone', { cron: '* * * * *', workflow: report, input: null });
  await engine.unschedule('gone');
  await engine.shutdown({ graceMs: 0 });
});

afterAll(async () => {
  await tmp?.remove();
});

describe('turnlog schedules', () => {
  it('prints a table of schedules with the next slot; --json gives the fields; removed ones are not listed', async () => {
    const r = await cli(['--store', store, 'schedules']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/SCHEDULE\s+CRON\s+TIMEZONE\s+WORKFLOW\s+CATCH-UP\s+NEXT\s+LAST/);
    expect(r.stdout).toMatch(/nightly\s+0 2 \* \* \*\s+Europe\/Paris\s+report\s+all\s+2026-01-01 01:00:00\.000Z\s+-/);
    expect(r.stdout).not.toContain('gone');
    const j = await cliJSON(['--store', store, 'schedules']);
    expect(j.json).toEqual({
      schedules: [{ id: 'nightly', cron: '0 2 * * *', workflow: 'report', input: null, catchUp: 'all', timezone: 'Europe/Paris', nextRunAt: Date.UTC(2026, 0, 1, 1) }],
    });
  });

  it('says so when there are none', async () => {
    const empty = join(tmp.path, 'empty');
    const e = await Engine.open({ store: empty, workflows: [report], logger: silentLogger, scanIntervalMs: 0, inspect: false });
    await e.shutdown({ graceMs: 0 });
    const r = await cli(['--store', empty, 'schedules']);
    expect(r.stdout).toMatch(/^no schedules in /);
  });
});
