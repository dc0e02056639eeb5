import { describe, expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import type { TaskState } from '../../src/history/state.js';
import { fold } from '../../src/replay/fold.js';
import { historyBuilder, payload, T0 } from '../../src/testing/history-builder.js';

function deepFreeze<T>(o: T): T {
  if (typeof o === 'object' && o !== null && !Object.isFrozen(o) && !(o instanceof Uint8Array)) {
    Object.freeze(o);
    for (const v of Object.values(o)) deepFreeze(v);
  }
  return o;
}

const multi = () => historyBuilder('t').created({ workflow: 'chat', kind: 'multi-turn' });

describe('fold: statuses', () => {
  it('created → pending', () => {
    const s = fold('t', multi().build());
    expect(s).toMatchObject({ taskId: 't', workflow: 'chat', kind: 'multi-turn', status: 'pending', turn: 0, lastEventId: 1, createdAt: T0 });
    expect(s.openTurn).toBeUndefined();
  });

  it('TurnStarted → in_progress with the open turn', () => {
    const s = fold('t', multi().input('hi').turnStarted().build());
    expect(s.status).toBe('in_progress');
    expect(s.turn).toBe(1);
    expect(s.openTurn).toMatchObject({ turn: 1, attempt: 1, attemptRunning: true, inputIds: ['in-1'], entryMode: 'fresh', steered: false, startedEventId: 3, workerCrashes: 0 });
    expect(s.openTurn!.inputs.map((i) => i.inputId)).toEqual(['in-1']);
    expect(s.queue).toEqual([]);
    expect(s.openTurn!.deadline).toBe(s.openTurn!.turnStartedAt + s.policy.turnTimeoutMs);
  });

  it('multi-turn terminal → suspended; one-shot terminal → completed with its outcome', () => {
    expect(fold('t', multi().input('a').turnStarted().completed('x').build()).status).toBe('suspended');
    const one = fold('t', historyBuilder('t').created({ kind: 'one-shot' }).input('a').turnStarted().failed('boom').build());
    expect(one).toMatchObject({ status: 'completed', outcome: 'failed', lastFailure: { message: 'boom' } });
  });

  it('a one-shot terminal without TaskCompleted stays in_progress with no open turn', () => {
    const s = fold('t', historyBuilder('t').created({ kind: 'one-shot' }).input('a').turnStarted().completed('x', { completeTask: false }).build());
    expect(s.status).toBe('in_progress');
    expect(s.openTurn).toBeUndefined();
    expect(s.lastTurn).toMatchObject({ turn: 1, terminal: 'TurnCompleted' });
  });
});

describe('fold: turns, steps and recovery', () => {
  it('records calls in seq order, the latest checkpoint and the takes', () => {
    const s = fold('t', multi().input('a').turnStarted().step('s1', 1).checkpoint({ at: 1 }).input('steer').take().step('s2', null, { failure: 'nope' }).build());
    const t = s.openTurn!;
    expect(t.calls.map((c) => [c.kind, c.seq])).toEqual([
      ['step', 1],
      ['checkpoint', 2],
      ['take-inputs', 3],
      ['step', 4],
    ]);
    expect(t.checkpoint).toEqual(payload({ at: 1 }));
    expect(t.taken.map((i) => [i.inputId, i.steering])).toEqual([['in-2', true]]);
    expect(s.queue).toEqual([]);
    expect(t.calls[3]).toMatchObject({ kind: 'step', name: 's2', failure: { message: 'nope' } });
  });

  it('a crash ends the attempt and counts; a recovery re-opens the same turn keeping its record', () => {
    const b = multi().input('a').turnStarted().step('s1', 1).marker();
    const startedAt = b.turn.turnStartedAt;
    const s = fold('t', b.crashed().recovered({ instance: 'i-2', executor: 'process' }).build());
    const t = s.openTurn!;
    expect(t).toMatchObject({ turn: 1, attempt: 2, attemptRunning: true, entryMode: 'recovered', workerCrashes: 1, instance: 'i-2', executor: 'process', turnStartedAt: startedAt });
    expect(t.calls).toHaveLength(1);
    expect(t.marker).toBeDefined();
    expect(t.inputIds).toEqual(['in-1']);
    expect(s).toMatchObject({ recoveryCount: 1, workerCrashCount: 1 });
  });

  it('exit for recovery ends the attempt without counting a crash', () => {
    const s = fold('t', multi().input('a').turnStarted().exitedForRecovery().build());
    expect(s.openTurn).toMatchObject({ attemptRunning: false, workerCrashes: 0 });
    expect(s.workerCrashCount).toBe(0);
  });

  it('terminals set lastOutput/state/lastFailure and lastTurn', () => {
    const s = fold('t', multi().input('a').turnStarted().completed('out-1', { state: { n: 1 } }).input('b').turnStarted().recovered().failed('bad').build());
    expect(s.lastOutput).toEqual(payload('out-1'));
    expect(s.state).toEqual(payload({ n: 1 }));
    expect(s.lastFailure).toMatchObject({ message: 'bad' });
    expect(s.lastTurn).toMatchObject({ turn: 2, terminal: 'TurnFailed', attempts: 2 });
  });
});

describe('fold: queue and cancels', () => {
  it('queues in order, withdraws and records the last input id', () => {
    const s = fold('t', multi().input('a').input('b').input('c').withdraw('in-2').build());
    expect(s.queue.map((q) => q.inputId)).toEqual(['in-1', 'in-3']);
    expect(s.lastInputId).toBe('in-3');
  });

  it('steering inputs are flagged; a recovery attempt does not touch the queue', () => {
    const s = fold('t', multi().input('a').turnStarted().input('b').exitedForRecovery().recovered().build());
    expect(s.queue).toMatchObject([{ inputId: 'in-2', steering: true }]);
  });

  it('cancel scopes: task with no open turn → state; turn or task with an open turn → the turn', () => {
    expect(fold('t', multi().cancel('task', 'r').build()).cancelRequested).toMatchObject({ scope: 'task', reason: 'r', eventId: 2 });
    const open = fold('t', multi().input('a').turnStarted().cancel('turn').cancel('task').build());
    expect(open.openTurn!.cancelRequested).toMatchObject({ scope: 'task', eventId: 5 });
    expect(open.cancelRequested).toBeUndefined();
    // A turn-scoped cancel with no open turn has nothing to cancel.
    expect(fold('t', multi().cancel('turn').build()).cancelRequested).toBeUndefined();
  });

  it('generation and updatedAt follow the events', () => {
    const b = multi().leaseClaimed().leaseClaimed();
    const s = fold('t', b.build());
    expect(s.highestGeneration).toBe(3);
    expect(s.updatedAt).toBe(b.events[2]!.time);
  });
});

describe('fold: incremental and pure', () => {
  const events = multi().input('a').turnStarted().step('s', 1).input('b').take().crashed().recovered().step('s2', 2).completed('x').input('c').build();

  it('never mutates `from` (deep-frozen) and equals the full fold at every split', () => {
    for (let k = 1; k <= events.length; k++) {
      const prefix = deepFreeze(fold('t', events.slice(0, k)));
      expect(fold('t', events.slice(k), prefix)).toEqual(fold('t', events));
    }
  });

  it('returns `from` itself for an empty tail', () => {
    const s = fold('t', events);
    expect(fold('t', [], s)).toBe(s);
  });

  it('does not share mutable arrays with `from`', () => {
    const prefix = fold('t', events.slice(0, 3));
    const next = fold('t', events.slice(3, 6), prefix);
    expect(prefix.openTurn!.calls).toHaveLength(0);
    expect(next.openTurn!.calls.length).toBeGreaterThan(0);
    expect(prefix.queue).toHaveLength(0);
  });

  it('does not mutate the events', () => {
    const copy: HistoryEvent[] = structuredClone(events);
    fold('t', events);
    expect(events).toEqual(copy);
  });

  it('an empty history has no state', () => {
    expect(() => fold('t', [])).toThrow(/first-event-task-created/);
  });

  it('keeps optional fields absent rather than undefined', () => {
    const s: TaskState = fold('t', multi().input('a').turnStarted().build());
    for (const k of ['outcome', 'lastOutput', 'state', 'lastFailure', 'lastTurn', 'cancelRequested']) expect(Object.keys(s)).not.toContain(k);
    for (const k of ['checkpoint', 'marker', 'cancelRequested']) expect(Object.keys(s.openTurn!)).not.toContain(k);
  });
});
