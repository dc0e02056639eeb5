/**
 * replayHistory({ isolate: 'worker' }) (issue #18 item 3): a handler that blocks its thread
 * is stopped at the time limit; verdicts and errors cross the thread boundary intact.
 */
import { copyFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { NonDeterminismError, ReplayStalledError, isTurnlogError } from '../../src/errors.js';
import type { HistoryEvent } from '../../src/history/events.js';
import { encodeHistoryFile } from '../../src/history/history-file.js';
import { ReplayFailuresError, replayHistories, replayHistory, type TurnReplayResult } from '../../src/testing/index.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { ROOT, ensureBuilt } from '../cli/run-cli.js';
import { goldenPath } from './golden.js';
import { loadEvents, mutate } from './mutate.js';

const ENDINGS = join(ROOT, 'dist/test/fixtures/workflows/replay-endings.js');
const SUPPORT = join(ROOT, 'dist/test/fixtures/workflows/support-agent.js');

beforeAll(() => ensureBuilt());

/** Turn 1: step a (event 4), then the worker crashed. */
function crashedAfterA(workflow: string): HistoryEvent[] {
  return historyBuilder('t1').created({ workflow, kind: 'multi-turn' }).input('hi').turnStarted().step('a', 'hi').crashed().build();
}

describe("isolate: 'worker'", () => {
  it('a handler spinning in for (;;) {} is terminated at timeoutMs: TURNLOG_REPLAY_TIMEOUT naming turn and last call', async () => {
    const err = await replayHistory({ history: crashedAfterA('spinner'), workflows: ENDINGS, isolate: 'worker', timeoutMs: 2000 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ReplayStalledError);
    const e = err as ReplayStalledError;
    expect([e.code, e.taskId, e.turn, e.eventId, e.lastCall]).toEqual(['TURNLOG_REPLAY_TIMEOUT', 'replay', 1, 4, 'step "a" at position 1']);
    expect(e.message).toContain('worker thread was terminated');
  });

  it('a golden history replays in the worker; onTurn sees every turn', async () => {
    const turns: TurnReplayResult[] = [];
    const report = await replayHistory({ history: goldenPath('support-conversation'), workflows: SUPPORT, isolate: 'worker', onTurn: (r) => turns.push(r) });
    expect(report.turns).toBe(4);
    expect(turns.map((t) => t.status)).toEqual(['ok', 'ok', 'ok', 'ok']);
  });

  it('errors keep their class and fields: a divergence, a stall', async () => {
    const renamed = mutate(loadEvents(goldenPath('support-conversation')), 7, (e) => ({ ...e, name: 'lookup-orders' }));
    const div = await replayHistory({ history: renamed, workflows: SUPPORT, isolate: 'worker', taskId: 'support-conversation' }).catch((e: unknown) => e);
    expect(div).toBeInstanceOf(NonDeterminismError);
    expect([(div as NonDeterminismError).turn, (div as NonDeterminismError).eventId]).toEqual([1, 7]);
    const stalled = await replayHistory({ history: crashedAfterA('stuck'), workflows: ENDINGS, isolate: 'worker' }).catch((e: unknown) => e);
    expect(isTurnlogError(stalled, 'TURNLOG_REPLAY_STALLED')).toBe(true);
    expect((stalled as ReplayStalledError).lastCall).toBe('step "a" at position 1');
  });

  it('workflow objects cannot cross into a worker: TURNLOG_INVALID_ARGUMENT; a module path also works in-process', async () => {
    const { stuck } = (await import(ENDINGS)) as { stuck: never };
    const err = await replayHistory({ history: crashedAfterA('stuck'), workflows: [stuck], isolate: 'worker' }).catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT')).toBe(true);
    const report = await replayHistory({ history: goldenPath('support-conversation'), workflows: SUPPORT });
    expect(report.turns).toBe(4);
  });
});

describe("replayHistories with isolate: 'worker'", () => {
  it('a payloadConverter the module does not export is refused (the worker would use the module\'s), not ignored', async () => {
    const converter = { toPayload: (v: unknown) => ({ metadata: {}, data: new TextEncoder().encode(JSON.stringify(v)) }), fromPayload: <T>() => undefined as T };
    const err = await replayHistory({ history: goldenPath('support-conversation'), workflows: SUPPORT, isolate: 'worker', payloadConverter: converter }).catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT')).toBe(true);
    expect((err as Error).message).toContain('exports none');
    const folder = await makeTmpDir('turnlog-replay-conv-');
    try {
      await copyFile(goldenPath('support-conversation'), join(folder.path, 'a.json'));
      const all = await replayHistories(folder.path, SUPPORT, { isolate: 'worker', payloadConverter: converter }).catch((e: unknown) => e);
      expect(isTurnlogError(all, 'TURNLOG_INVALID_ARGUMENT')).toBe(true);
    } finally {
      await folder.remove();
    }
  });

  it('a folder with a spinning handler: that file fails with TURNLOG_REPLAY_TIMEOUT, the others still replay', async () => {
    const dir = await makeTmpDir('turnlog-replay-worker-');
    try {
      await copyFile(goldenPath('support-conversation'), join(dir.path, 'a-support.json'));
      await writeFile(join(dir.path, 'b-spin.json'), await encodeHistoryFile({ taskId: 'spin-1', events: crashedAfterA('spinner') }, 'json'));
      const both = join(dir.path, 'all.mjs');
      await writeFile(both, `export * from ${JSON.stringify(SUPPORT)};\nexport * from ${JSON.stringify(ENDINGS)};\n`);
      const err = await replayHistories(dir.path, both, { isolate: 'worker', timeoutMs: 2000 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ReplayFailuresError);
      const f = err as ReplayFailuresError;
      expect(f.failures.map((x) => [x.taskId, (x.error as ReplayStalledError).code])).toEqual([['spin-1', 'TURNLOG_REPLAY_TIMEOUT']]);
      expect(f.report.reports.map((r) => [r.taskId, r.turns])).toEqual([['support-conversation', 4]]);
    } finally {
      await dir.remove();
    }
  });
});
