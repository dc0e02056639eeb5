// forkEvents (pure): the history of a fork at the end of turn N (docs/history.md#forks).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isTurnlogError } from '../../src/errors.js';
import { isTurnTerminal, type HistoryEvent } from '../../src/history/events.js';
import { encodeState } from '../../src/history/state-codec.js';
import { fold } from '../../src/replay/fold.js';
import { forkEvents } from '../../src/replay/fork.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { arbChatHistory, withDeltas } from './arbitrary-history.js';

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    return isTurnlogError(err) ? err.code : 'not a TurnlogError';
  }
  return undefined;
}

/** Three turns; a steering input queued during turn 2 and a task cancel during turn 3. */
function chat(): HistoryEvent[] {
  const b = historyBuilder('orig', { tick: 10 }).created({ kind: 'multi-turn' });
  b.input('one').turnStarted().step('model', 'r1').completed('r1', { state: { m: ['one', 'r1'] } });
  b.input('two').turnStarted().step('model', 'r2');
  b.input('steer');
  b.suspended('waiting', { output: 'r2', state: { m: ['one', 'r1', 'two', 'r2'] } });
  b.turnStarted().cancel('task', 'stop').cancelled('stop', { completeTask: 'cancelled' });
  return b.build();
}

describe('forkEvents', () => {
  it('copies the history up to the end of the turn, leaving out the later inputs, and records the origin', () => {
    const orig = chat();
    const f = forkEvents('orig', orig, { atTurn: 2, newTaskId: 'f' });
    const end = orig.find((e) => e.type === 'TurnSuspended')!;
    // Everything up to turn 2's terminal except the steering input still queued then.
    const kept = orig.slice(0, end.eventId).filter((e) => !(e.type === 'InputQueued' && e.inputId === 'in-3'));
    expect(f.map((e) => e.type)).toEqual(kept.map((e) => e.type));
    expect(f.map((e) => e.eventId)).toEqual(kept.map((_, i) => i + 1));
    expect(f[0]).toMatchObject({ type: 'TaskCreated', forkedFrom: { taskId: 'orig', turn: 2, eventId: end.eventId } });
    const s = fold('f', f);
    expect(s).toMatchObject({ status: 'suspended', turn: 2, queue: [] });
    expect(s.state).toEqual(fold('orig', orig.slice(0, end.eventId)).state);
    // The original is untouched.
    expect(orig[0]).not.toHaveProperty('forkedFrom');
    expect(chat()).toEqual(orig);
  });

  it('a task cancel pending at the turn end stays with the original', () => {
    const orig = chat();
    const f = forkEvents('orig', orig, { atTurn: 3, newTaskId: 'f' });
    expect(f.some((e) => e.type === 'CancelRequested')).toBe(false);
    expect(f.at(-1)).toMatchObject({ type: 'TurnCancelled', turn: 3 });
    expect(fold('f', f)).toMatchObject({ status: 'suspended', turn: 3 });
    expect(fold('f', f).cancelRequested).toBeUndefined();
  });

  it('refuses a turn that has not ended, a bad turn number and a one-shot task', () => {
    const open = historyBuilder('o').created({ kind: 'multi-turn' }).input('a').turnStarted().completed('x').input('b').turnStarted().build();
    expect(codeOf(() => forkEvents('o', open, { atTurn: 2, newTaskId: 'f' }))).toBe('TURNLOG_TURN_NOT_ENDED');
    expect(codeOf(() => forkEvents('o', open, { atTurn: 3, newTaskId: 'f' }))).toBe('TURNLOG_TURN_NOT_ENDED');
    expect(codeOf(() => forkEvents('o', open, { atTurn: 0, newTaskId: 'f' }))).toBe('TURNLOG_TURN_NOT_ENDED');
    expect(codeOf(() => forkEvents('o', open, { atTurn: 1.5, newTaskId: 'f' }))).toBe('TURNLOG_TURN_NOT_ENDED');
    const oneShot = historyBuilder('s').created({ kind: 'one-shot' }).input('a').turnStarted().completed('x', { completeTask: 'succeeded' }).build();
    expect(codeOf(() => forkEvents('s', oneShot, { atTurn: 1, newTaskId: 'f' }))).toBe('TURNLOG_WRONG_KIND');
    expect(codeOf(() => forkEvents('s', [], { atTurn: 1, newTaskId: 'f' }))).toBe('TURNLOG_TASK_NOT_FOUND');
  });

  it('over generated conversations with state deltas, a fork folds to the original state at that turn end', () => {
    fc.assert(
      fc.property(arbChatHistory, fc.nat(), (full, r) => {
        const events = withDeltas(full);
        const ends = events.filter(isTurnTerminal);
        if (ends.length === 0) return;
        const end = ends[r % ends.length]!;
        const f = forkEvents('sim', events, { atTurn: end.turn, newTaskId: 'fork' });
        const at = fold('sim', events.slice(0, end.eventId));
        const s = fold('fork', f);
        expect(s.turn).toBe(end.turn);
        expect(s.openTurn).toBeUndefined();
        expect(s.state === undefined ? undefined : Buffer.from(s.state.data)).toEqual(at.state === undefined ? undefined : Buffer.from(at.state.data));
        expect(s.queue).toEqual([]);
        expect(encodeState(s).length).toBeGreaterThan(0);
      }),
      { numRuns: 60, seed: 31 },
    );
  });
});
