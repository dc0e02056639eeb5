/**
 * Golden histories (Temporal's replay testing): recorded from real runs of the support-agent
 * fixture, replayed in CI against the current code. Re-record with
 * `UPDATE_GOLDEN=1 npx vitest run test/testing/golden.test.ts` after an intended change.
 */
import { existsSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { replayHistories, replayHistory } from '../../src/testing/index.js';
import { supportAgent } from '../fixtures/workflows/support-agent.js';
import { supportAgent as exampleAgent } from '../../examples/support-agent/agent.js';
import { GOLDEN_DIR, goldenPath, recordAll, writeGolden } from './golden.js';

const SCENARIOS = ['support-conversation', 'support-timeout', 'support-recovered', 'examples/support-agent'];

beforeAll(async () => {
  if (process.env['UPDATE_GOLDEN'] === '1') await writeGolden(await recordAll());
});

describe('golden histories', () => {
  it.each(SCENARIOS)('%s exists (re-record with UPDATE_GOLDEN=1)', (scenario) => {
    expect(existsSync(goldenPath(scenario)), `${goldenPath(scenario)} is missing: run UPDATE_GOLDEN=1 npx vitest run test/testing/golden.test.ts`).toBe(true);
  });

  it('the conversation replays turn by turn: completed, completed, failed, suspended', async () => {
    const report = await replayHistory({ history: goldenPath('support-conversation'), workflows: [supportAgent] });
    expect(report.taskId).toBe('support-conversation');
    expect(report.results.map((r) => [r.turn, r.terminal, r.status, r.outcome])).toEqual([
      [1, 'TurnCompleted', 'ok', 'completed'],
      [2, 'TurnCompleted', 'ok', 'completed'],
      [3, 'TurnFailed', 'ok', 'failed'],
      [4, 'TurnSuspended', 'ok', 'suspended'],
    ]);
    expect(report.results.map((r) => r.calls)).toEqual([4, 5, 3, 3]);
  });

  it('the timed-out turn is cut off: its recorded calls match, its outcome is not compared', async () => {
    const report = await replayHistory({ history: goldenPath('support-timeout'), workflows: [supportAgent] });
    expect(report.results.map((r) => [r.turn, r.terminal, r.status])).toEqual([
      [1, 'TurnCompleted', 'ok'],
      [2, 'TurnTimedOut', 'cut-off'],
      [3, 'TurnCompleted', 'ok'],
    ]);
  });

  it('a recovered turn replays its last attempt with every recorded call', async () => {
    const report = await replayHistory({ history: goldenPath('support-recovered'), workflows: [supportAgent] });
    expect(report.results).toEqual([
      expect.objectContaining({ turn: 1, attempt: 2, terminal: 'TurnCompleted', status: 'ok', calls: 5 }),
    ]);
  });

  it('replayHistories replays the whole folder', async () => {
    const report = await replayHistories(GOLDEN_DIR, [supportAgent]);
    expect(report.tasks).toBeGreaterThanOrEqual(3);
  });

  it('the examples/support-agent conversation replays, steering included (pendingInputCount as recorded)', async () => {
    const report = await replayHistory({ history: goldenPath('examples/support-agent'), workflows: [exampleAgent] });
    expect(report.results.map((r) => [r.turn, r.terminal, r.status])).toEqual([
      [1, 'TurnCompleted', 'ok'],
      [2, 'TurnCompleted', 'ok'],
      [3, 'TurnCompleted', 'ok'],
    ]);
    const events = (await import('./mutate.js')).loadEvents(goldenPath('examples/support-agent'));
    expect(events.filter((e) => e.type === 'InputsTaken' && e.inputIds.includes('msg-2b'))).toHaveLength(1);
  });
});
