/**
 * Every replay ends with a verdict (issue #18, items 1 and 2): a recorded exit for recovery
 * aborts the signal with shutdownRequested; a handler that waits for something replay never
 * delivers is TURNLOG_REPLAY_STALLED; the per-turn time limit is TURNLOG_REPLAY_TIMEOUT.
 */
import { readFile as readFileCb } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { ReplayStalledError, isTurnlogError } from '../../src/errors.js';
import type { HistoryEvent } from '../../src/history/events.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { replayHistory } from '../../src/testing/index.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { napper, patient, stuck } from '../fixtures/workflows/replay-endings.js';

/** Turn 1 of `workflow`: TurnStarted, step a = 'hi' (event 4), then whatever `end` appends. */
function oneStep(workflow: string, end: (b: ReturnType<typeof historyBuilder>) => unknown = () => undefined): HistoryEvent[] {
  const b = historyBuilder('t1').created({ workflow, kind: 'multi-turn' }).input('hi').turnStarted().step('a', 'hi');
  end(b);
  return b.build();
}

async function rejection(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => {
      throw new Error('expected the replay to reject');
    },
    (e: unknown) => e,
  );
}

describe('item 1: a last attempt that exited for recovery replays to a verdict', () => {
  it('the history exactly as a real engine shutdown leaves it: cut off, the handler saw shutdownRequested', async () => {
    const store = new MemoryHistoryStore();
    const e1 = await Engine.open({ store, workflows: [patient], logger: silentLogger, scanIntervalMs: 0, clock: new ManualClock() });
    const h = await e1.start(patient, 'hi', { taskId: 'p1' });
    for (let i = 0; i < 500 && !(await h.history()).some((e) => e.type === 'StepCompleted'); i++) await new Promise((r) => setTimeout(r, 2));
    await e1.shutdown({ graceMs: 60_000 }); // the handler returns exitForRecovery at once
    const events = await store.readEvents('p1');
    expect(events.map((e) => e.type).slice(-2)).toEqual(['StepCompleted', 'TurnExitedForRecovery']);
    const report = await replayHistory({ history: events, workflows: [patient], taskId: 'p1' });
    expect(report.results).toEqual([expect.objectContaining({ turn: 1, status: 'cut-off', terminal: undefined, outcome: 'exit-for-recovery' })]);
  });

  it('with no recorded call before the exit, the abort still comes after the handler starts waiting', async () => {
    const waiter = defineWorkflow({
      name: 'waiter',
      kind: 'multi-turn',
      turn: async (ctx) => {
        await new Promise((r) => ctx.signal.addEventListener('abort', r, { once: true }));
        return ctx.exitForRecovery();
      },
    });
    const events = historyBuilder('w1').created({ workflow: 'waiter', kind: 'multi-turn' }).input('hi').turnStarted().exitedForRecovery().build();
    const report = await replayHistory({ history: events, workflows: [waiter] });
    expect(report.results[0]).toMatchObject({ status: 'cut-off', outcome: 'exit-for-recovery' });
  });

  it('an exit then TurnTimedOut(recovery_backstop), and an exit then TurnFailed(RecoveriesExhausted): cut off', async () => {
    const backstop = oneStep('patient', (b) => b.exitedForRecovery().timedOut('recovery_backstop', { completeTask: false }));
    const exhausted = oneStep('patient', (b) =>
      b.exitedForRecovery().failed({ message: 'recoveries exhausted', type: 'RecoveriesExhausted' }, { completeTask: false }),
    );
    for (const [events, terminal] of [
      [backstop, 'TurnTimedOut'],
      [exhausted, 'TurnFailed'],
    ] as const) {
      const report = await replayHistory({ history: events, workflows: [patient] });
      expect(report.results[0]).toMatchObject({ status: 'cut-off', terminal, outcome: 'exit-for-recovery' });
    }
  });

  it('only the last attempt exit counts: an exit of attempt 1 then a completed attempt 2 is compared', async () => {
    const events = oneStep('patient', (b) => b.exitedForRecovery().recovered().cancel('turn', 'stop').cancelled('stop', { completeTask: false }));
    const report = await replayHistory({ history: events, workflows: [patient] });
    expect(report.results[0]).toMatchObject({ attempt: 2, status: 'cut-off', terminal: 'TurnCancelled', outcome: 'cancelled' });
  });
});

describe('item 2: a replay that cannot finish rejects, naming task, turn and last call', () => {
  const intervals: NodeJS.Timeout[] = [];
  afterEach(() => {
    for (const t of intervals.splice(0)) clearInterval(t);
  });

  it('a crash mid-turn whose handler awaits a promise nothing resolves: TURNLOG_REPLAY_STALLED', async () => {
    const events = oneStep('stuck', (b) => b.crashed());
    const err = await rejection(replayHistory({ history: events, workflows: [stuck], taskId: 'chat-7' }));
    expect(err).toBeInstanceOf(ReplayStalledError);
    const e = err as ReplayStalledError;
    expect({ code: e.code, taskId: e.taskId, turn: e.turn, eventId: e.eventId, lastCall: e.lastCall }).toEqual({
      code: 'TURNLOG_REPLAY_STALLED',
      taskId: 'chat-7',
      turn: 1,
      eventId: 4,
      lastCall: 'step "a" at position 1',
    });
    expect(e.message).toContain('Task chat-7, turn 1: the replay cannot finish');
  });

  it('a history that simply ends mid-turn stalls the same way; a signal nobody aborts too', async () => {
    expect(isTurnlogError(await rejection(replayHistory({ history: oneStep('stuck'), workflows: [stuck] })), 'TURNLOG_REPLAY_STALLED')).toBe(true);
    const err = await rejection(replayHistory({ history: oneStep('patient'), workflows: [patient] }));
    expect(isTurnlogError(err, 'TURNLOG_REPLAY_STALLED')).toBe(true);
  });

  it('a handler waiting on its own timer or file read is not stalled (no false failures)', async () => {
    const events = oneStep('napper', (b) => b.step('b', 'hi!').suspended('waiting', { output: 'hi!', completeTask: false }));
    expect((await replayHistory({ history: events, workflows: [napper] })).results[0]).toMatchObject({ status: 'ok' });
    const reader = defineWorkflow({
      name: 'reader',
      turn: async (ctx) => {
        await ctx.step('a', () => 'hi');
        const text = await readFile(fileURLToPath(import.meta.url), 'utf8');
        await new Promise((r) => setImmediate(r));
        return text.length > 0;
      },
    });
    const readEvents = historyBuilder('r1').created({ workflow: 'reader' }).input(null).turnStarted().step('a', 'hi').completed(true).build();
    expect((await replayHistory({ history: readEvents, workflows: [reader] })).results[0]).toMatchObject({ status: 'ok' });
  });

  it('a handler lazily importing a module not loaded yet is not stalled (vitest serves import() over its own RPC)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'turnlog-lazy-'));
    try {
      const file = join(dir, 'lazy.mjs');
      await writeFile(file, 'export const answer = 42;');
      const lazy = defineWorkflow({
        name: 'lazy',
        turn: async (ctx) => {
          await ctx.step('a', () => 'hi');
          const m = (await import(pathToFileURL(file).href)) as { answer: number };
          return m.answer;
        },
      });
      const events = historyBuilder('l1').created({ workflow: 'lazy' }).input(null).turnStarted().step('a', 'hi').completed(42).build();
      expect((await replayHistory({ history: events, workflows: [lazy] })).results[0]).toMatchObject({ status: 'ok' });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('once its own timer has fired and its file read is done, a handler awaiting nothing else is stalled', async () => {
    const late = defineWorkflow({
      name: 'late',
      kind: 'multi-turn',
      turn: async (ctx) => {
        await ctx.step('a', () => 'hi');
        await new Promise((r) => setTimeout(r, 5));
        await new Promise((r) => setImmediate(r));
        await new Promise((r, j) => readFileCb(fileURLToPath(import.meta.url), (err) => (err ? j(err) : r(undefined))));
        return new Promise<never>(() => undefined);
      },
    });
    const err = await rejection(replayHistory({ history: oneStep('late'), workflows: [late] }));
    expect(isTurnlogError(err, 'TURNLOG_REPLAY_STALLED'), String(err)).toBe(true);
  });

  it('a handler that keeps a resource alive but never ends: TURNLOG_REPLAY_TIMEOUT at timeoutMs', async () => {
    const holder = defineWorkflow({
      name: 'holder',
      kind: 'multi-turn',
      turn: async (ctx) => {
        await ctx.step('a', () => 'hi');
        intervals.push(setInterval(() => undefined, 60_000));
        return new Promise<never>(() => undefined);
      },
    });
    const err = await rejection(replayHistory({ history: oneStep('holder'), workflows: [holder], timeoutMs: 50 }));
    expect(err).toBeInstanceOf(ReplayStalledError);
    expect((err as ReplayStalledError).code).toBe('TURNLOG_REPLAY_TIMEOUT');
    expect((err as ReplayStalledError).message).toContain('did not settle within 50 ms');
  });

  it('a bad timeoutMs is TURNLOG_INVALID_ARGUMENT', async () => {
    const err = await rejection(replayHistory({ history: oneStep('stuck'), workflows: [stuck], timeoutMs: -1 }));
    expect(isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT')).toBe(true);
  });
});
