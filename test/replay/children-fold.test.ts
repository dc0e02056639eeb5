/**
 * Child tasks, pure (docs/children.md): how ChildStarted / ChildEnded fold into recorded calls and
 * the task's children, the invariants they are checked against, snapshots of it, and the engine's
 * pure decisions (conflict, outcome, cascade) in runtime/children.ts.
 */
import { describe, expect, it } from 'vitest';
import { fold } from '../../src/replay/fold.js';
import { decodeState, encodeState } from '../../src/history/state-codec.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { isTurnlogError } from '../../src/errors.js';
import { childConflict, childOutcome, childrenToCancel } from '../../src/runtime/children.js';
import type { TaskState } from '../../src/history/state.js';

const parentHistory = () =>
  historyBuilder('lead')
    .created()
    .input('go')
    .turnStarted()
    .childStarted('researcher')
    .childStarted('researcher', { childId: 'side', detached: true })
    .childEnded('lead/c1.1', { output: 'notes' });

describe('fold: child calls', () => {
  it('ChildStarted and ChildEnded are calls at their positions; the task lists its children with their status', () => {
    const s = fold('lead', parentHistory().build());
    expect(s.openTurn!.calls).toMatchObject([
      { kind: 'child', seq: 1, op: 'start', childId: 'lead/c1.1', workflow: 'researcher', detached: false },
      { kind: 'child', seq: 2, op: 'start', childId: 'side', workflow: 'researcher', detached: true },
      { kind: 'child', seq: 3, op: 'await', childId: 'lead/c1.1', outcome: { status: 'completed' } },
    ]);
    expect(s.children).toEqual([
      { childId: 'lead/c1.1', workflow: 'researcher', turn: 1, seq: 1, detached: false, status: 'completed' },
      { childId: 'side', workflow: 'researcher', turn: 1, seq: 2, detached: true },
    ]);
    expect(childrenToCancel(s)).toEqual([]); // the ended one and the detached one stay
  });

  it('incremental fold equals the full fold, and a snapshot round-trips parent and children', () => {
    const events = parentHistory().completed('done').build();
    for (let i = 1; i < events.length; i++) {
      const prefix = fold('lead', events.slice(0, i));
      expect(fold('lead', events.slice(i), prefix)).toEqual(fold('lead', events));
      expect(decodeState(encodeState(prefix))).toEqual(prefix);
    }
    const child = historyBuilder('lead/c1.1').created().build();
    const created = { ...child[0]!, parent: { taskId: 'lead', turn: 1, seq: 1, detached: false } } as (typeof child)[0];
    const cs = fold('lead/c1.1', [created]);
    expect(cs.parent).toEqual({ taskId: 'lead', turn: 1, seq: 1, detached: false });
    expect(decodeState(encodeState(cs))).toEqual(cs);
  });

  it('refuses a second ChildStarted for the same child, and a ChildEnded for a child never started', () => {
    const twice = historyBuilder('lead').created().input().turnStarted().childStarted('r', { childId: 'x' }).childStarted('r', { childId: 'x' }).build();
    expect(() => fold('lead', twice)).toThrow(expect.objectContaining({ code: 'TURNLOG_HISTORY_INVARIANT', message: expect.stringContaining('duplicate-child') }));
    const stranger = historyBuilder('lead').created().input().turnStarted().childEnded('nobody').build();
    let err: unknown;
    try {
      fold('lead', stranger);
    } catch (e) {
      err = e;
    }
    expect(isTurnlogError(err, 'TURNLOG_HISTORY_INVARIANT')).toBe(true);
    expect((err as Error).message).toContain('child nobody was never started');
  });
});

describe('runtime/children.ts decisions', () => {
  const child = (parent?: TaskState['parent'], workflow = 'researcher'): TaskState => ({ ...fold('c', historyBuilder('c').created({ workflow }).build()), ...(parent ? { parent } : {}) });
  const call = { taskId: 'lead', turn: 1, seq: 2, detached: false };

  it('childConflict: the same parent call and workflow is a re-run; anything else names why', () => {
    expect(childConflict(child(call), call, 'researcher')).toBeUndefined();
    expect(childConflict(child(), call, 'researcher')).toBe('it was not started as a child task');
    expect(childConflict(child({ ...call, taskId: 'other' }), call, 'researcher')).toBe('it is a child of task other');
    expect(childConflict(child(call, 'writer'), call, 'researcher')).toBe('it runs workflow writer, not researcher');
    expect(childConflict(child({ ...call, turn: 2 }), call, 'researcher')).toContain('started by turn 2, call 2');
  });

  it('childOutcome: a turn result as the recorded outcome (withdrawn counts as cancelled)', () => {
    const toPayload = (v: unknown) => ({ metadata: {}, data: new TextEncoder().encode(JSON.stringify(v)) });
    expect(childOutcome({ taskId: 'c', turn: 1, inputIds: [], status: 'completed', output: 'x' }, toPayload)).toEqual({ status: 'completed', output: toPayload('x') });
    expect(childOutcome({ taskId: 'c', turn: 1, inputIds: [], status: 'suspended', reason: 'idle', output: 1 }, toPayload)).toEqual({ status: 'suspended', output: toPayload(1), reason: 'idle' });
    expect(childOutcome({ taskId: 'c', turn: 1, inputIds: [], status: 'failed', failure: { message: 'no', type: 'Error' } }, toPayload)).toEqual({ status: 'failed', failure: { message: 'no', type: 'Error' } });
    expect(childOutcome({ taskId: 'c', turn: 0, inputIds: [], status: 'withdrawn', reason: 'gone' }, toPayload)).toEqual({ status: 'cancelled', reason: 'gone' });
  });
});
