/**
 * The fold's copy-on-write clone lists TaskState's fields one by one (a spread is megamorphic),
 * and the whole fold goes through it once a field ended, so the incremental-equals-whole property
 * no longer catches a field it forgets. `ALL` must name every TaskState field (it does not compile
 * otherwise), and the clone must keep each one (review finding, stop 25).
 */
import { expect, it } from 'vitest';
import type { TaskState } from '../../src/history/state.js';
import { cloneState } from '../../src/replay/fold.js';

// Every key of TaskState, required: a field added to TaskState and not here fails the typecheck.
const ALL: { [K in keyof Required<TaskState>]: true } = {
  taskId: true, workflow: true, kind: true, policy: true, formatVersion: true, createdAt: true, updatedAt: true,
  lastEventId: true, highestGeneration: true, status: true, outcome: true, turn: true, openTurn: true, queue: true,
  lastOutput: true, state: true, lastFailure: true, lastTurn: true, recoveryCount: true, workerCrashCount: true,
  cancelRequested: true, lastInputId: true, stateVersion: true, parent: true, children: true, signals: true,
};

it('cloneState keeps every TaskState field', () => {
  // A distinct sentinel per field (arrays where the clone may copy them).
  const full = Object.fromEntries(Object.keys(ALL).map((k) => [k, k === 'queue' || k === 'signals' || k === 'children' ? [{ of: k }] : { of: k }])) as unknown as TaskState;
  const shallow = cloneState(full, false);
  expect(Object.keys(shallow).sort()).toEqual(Object.keys(ALL).sort());
  for (const k of Object.keys(ALL) as (keyof TaskState)[]) expect(shallow[k], k).toEqual(full[k]);
});
