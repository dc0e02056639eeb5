/**
 * docs/testing.md#recorded-endings is a tested promise: every row is replayed from a built
 * history of that shape, and every ending the history format has must have a row. ENDINGS maps
 * every event type, so a new event type, timeout cause or engine failure code fails to compile
 * here until it has a shape (and then the docs table a row).
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { isTurnlogError } from '../../src/errors.js';
import type { EventType, TimeoutCause, TurnTerminalEvent } from '../../src/history/events.js';
import { replayHistory } from '../../src/testing/index.js';
import { ENGINE_FAILURE_CODES } from '../../src/testing/replay-history.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { historyBuilder, type HistoryBuilder } from '../../src/testing/history-builder.js';

type Mode = 'complete' | 'suspend' | 'fail' | 'wait' | 'more';

/** Step `a`, then what the input says: end its own way, wait for an abort, or ask for step `b`. */
const probe = defineWorkflow({
  name: 'probe',
  kind: 'multi-turn',
  turn: async (ctx, mode: Mode) => {
    await ctx.step('a', () => 'a');
    if (mode === 'complete') return 'done';
    if (mode === 'suspend') return ctx.suspend('waiting', 'out');
    if (mode === 'fail') throw new Error('handler failed');
    if (mode === 'wait') {
      if (!ctx.signal.aborted) await new Promise((r) => ctx.signal.addEventListener('abort', r, { once: true }));
      if (ctx.shutdownRequested) return ctx.exitForRecovery();
      throw ctx.signal.reason;
    }
    await ctx.step('b', () => 'b');
    return 'done';
  },
});

/** What follows step `a` of turn 1; `own` is the mode whose handler ends the turn by itself. */
interface Shape {
  end: (b: HistoryBuilder) => unknown;
  own?: Mode;
}
type EndingType = TurnTerminalEvent['type'] | 'TurnExitedForRecovery' | 'WorkerCrashed' | 'WorkerKilled';
type FailedKind = 'handler' | 'RecoveriesExhausted' | (typeof ENGINE_FAILURE_CODES)[number];
const open = { completeTask: false } as const;

const ENDINGS: {
  [T in EventType]: T extends 'TurnTimedOut'
    ? { [C in TimeoutCause]: Shape }
    : T extends 'TurnFailed'
      ? { [K in FailedKind]: Shape }
      : T extends EndingType
        ? Shape
        : 'not an ending';
} = {
  TaskCreated: 'not an ending',
  InputQueued: 'not an ending',
  InputWithdrawn: 'not an ending',
  OperatorAction: 'not an ending',
  TurnStarted: 'not an ending',
  StepCompleted: 'not an ending',
  InputsTaken: 'not an ending',
  Checkpointed: 'not an ending',
  PatchMarked: 'not an ending',
  TimerStarted: 'not an ending',
  ChildStarted: 'not an ending',
  ChildEnded: 'not an ending',
  SignalReceived: 'not an ending',
  WaitStarted: 'not an ending',
  WaitEnded: 'not an ending',
  TimeoutCancelRequested: 'not an ending',
  CancelRequested: 'not an ending',
  LeaseClaimed: 'not an ending',
  TaskCompleted: 'not an ending',
  HistoryCompacted: 'not an ending',
  StateMigrated: 'not an ending',
  TurnCompleted: { end: (b) => b.completed('done', open), own: 'complete' },
  TurnSuspended: { end: (b) => b.suspended('waiting', { ...open, output: 'out' }), own: 'suspend' },
  TurnFailed: {
    handler: { end: (b) => b.failed({ message: 'handler failed', type: 'Error' }, open), own: 'fail' },
    RecoveriesExhausted: { end: (b) => b.failed({ message: 'recoveries exhausted', type: 'RecoveriesExhausted' }, open) },
    TURNLOG_WORKER_CRASHED: { end: (b) => b.crashed().failed({ message: 'crashed 3 times', type: 'WorkerCrashed', code: 'TURNLOG_WORKER_CRASHED' }, open) },
    TURNLOG_WORKER_START: { end: (b) => b.failed({ message: 'no start', type: 'Error', code: 'TURNLOG_WORKER_START' }, open) },
    TURNLOG_WORKER_PROTOCOL: { end: (b) => b.failed({ message: 'garbage', type: 'Error', code: 'TURNLOG_WORKER_PROTOCOL' }, open) },
    TURNLOG_WORKFLOW_NOT_FOUND: { end: (b) => b.failed({ message: 'unknown', type: 'Error', code: 'TURNLOG_WORKFLOW_NOT_FOUND' }, open) },
    TURNLOG_PAYLOAD_TOO_LARGE: { end: (b) => b.failed({ message: 'output over the limit', type: 'PayloadTooLargeError', code: 'TURNLOG_PAYLOAD_TOO_LARGE' }, open) },
    TURNLOG_STATE_MIGRATION_FAILED: { end: (b) => b.failed({ message: 'the hook threw', type: 'StateMigrationFailed', code: 'TURNLOG_STATE_MIGRATION_FAILED' }, open) },
  },
  TurnCancelled: { end: (b) => b.cancel('turn', 'stop').cancelled('stop', open) },
  TurnTimedOut: {
    cooperative: { end: (b) => b.marker().timedOut('cooperative', open) },
    hard_cap: { end: (b) => b.marker().killed().timedOut('hard_cap', open) },
    recovery_marker: { end: (b) => b.marker().timedOut('recovery_marker', open) },
    recovery_backstop: { end: (b) => b.timedOut('recovery_backstop', open) },
  },
  TurnExitedForRecovery: { end: (b) => b.exitedForRecovery() },
  WorkerCrashed: { end: (b) => b.crashed() },
  WorkerKilled: { end: (b) => b.marker().killed() },
};
const MID_TURN = 'history ends mid-turn';

/** Every row key the code knows: `TurnCompleted`, `TurnTimedOut(cooperative)`, …, mid-turn. */
function shapes(): Map<string, Shape> {
  const out = new Map<string, Shape>();
  for (const [type, v] of Object.entries(ENDINGS) as [string, Shape | Record<string, Shape> | 'not an ending'][]) {
    if (v === 'not an ending') continue;
    if ('end' in v && typeof v.end === 'function') out.set(type, v as Shape);
    else for (const [k, s] of Object.entries(v as Record<string, Shape>)) out.set(`${type}(${k})`, s);
  }
  out.set(MID_TURN, { end: () => undefined });
  return out;
}

interface Row {
  key: string;
  status: 'ok' | 'cut-off';
  signal: 'compared' | 'timeout' | 'cancel' | 'shutdown' | 'nothing';
}

/** The table under `### Recorded endings` in docs/testing.md. */
function docRows(): Row[] {
  const md = readFileSync(new URL('../../docs/testing.md', import.meta.url), 'utf8');
  const section = md.split('### Recorded endings')[1]!.split('\n### ')[0]!;
  const rows: Row[] = [];
  for (const line of section.split('\n')) {
    const cells = line.split('|').map((c) => c.trim());
    if (cells.length < 5 || cells[1] === 'recorded ending' || cells[1]!.startsWith('---')) continue;
    rows.push({ key: cells[1]!.replace(/`/g, ''), status: cells[2] as Row['status'], signal: cells[3]!.replace(/`/g, '') as Row['signal'] });
  }
  return rows;
}

function history(mode: Mode, shape: Shape) {
  const b = historyBuilder('end-1').created({ workflow: 'probe', kind: 'multi-turn' }).input(mode).turnStarted().step('a', 'a');
  shape.end(b);
  return b.build();
}

const replay = (mode: Mode, shape: Shape) => replayHistory({ history: history(mode, shape), workflows: [probe], taskId: 'end-1' });

const OUTCOME = { timeout: 'timed-out', cancel: 'cancelled', shutdown: 'exit-for-recovery' } as const;

describe('docs/testing.md#recorded-endings', () => {
  const rows = docRows();
  const known = shapes();

  it('has exactly one row per recorded ending', () => {
    expect(rows.map((r) => r.key).sort()).toEqual([...known.keys()].sort());
  });

  for (const row of rows) {
    it(`${row.key}: ${row.status}, signal ${row.signal}`, async () => {
      const shape = known.get(row.key);
      expect(shape, `no shape for ${row.key}`).toBeDefined();
      if (row.signal === 'compared') {
        const r = await replay(shape!.own!, shape!);
        expect(r.results[0]).toMatchObject({ status: row.status });
        return;
      }
      if (row.signal === 'nothing') {
        // The record stops the handler where it stops: one call more is cut off there…
        expect((await replay('more', shape!)).results[0]).toMatchObject({ status: row.status, outcome: undefined });
        // …and a handler that waits for an abort the record does not hold cannot finish.
        const err = await replay('wait', shape!).catch((e: unknown) => e);
        expect(isTurnlogError(err, 'TURNLOG_REPLAY_STALLED'), String(err)).toBe(true);
        return;
      }
      const r = await replay('wait', shape!);
      expect(r.results[0]).toMatchObject({ status: row.status, outcome: OUTCOME[row.signal] });
    });
  }
});
