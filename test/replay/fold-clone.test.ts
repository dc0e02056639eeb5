/**
 * Review of src/replay/fold.ts cloneState / cloneOpenTurn (field by field instead of spread).
 * Checked against src/history/state.ts: every TaskState and OpenTurn field is copied, and the
 * arrays the fold mutates are copied. Kept as regression guards: incremental fold from every split
 * point equals the full fold (toStrictEqual, every optional field present), `from` is never
 * mutated, and a snapshot round trip of an incrementally folded state is exact.
 */
import v8 from 'node:v8';
import { describe, expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import type { OpenTurn, TaskState } from '../../src/history/state.js';
import { decodeState, encodeState } from '../../src/history/state-codec.js';
import { fold } from '../../src/replay/fold.js';
import { historyBuilder } from '../../src/testing/history-builder.js';

/** Every optional TaskState field set at the end except outcome (a completed task has no open turn). */
function everything(): HistoryEvent[] {
  return historyBuilder('clone')
    .created({ kind: 'multi-turn' })
    .input('a')
    .turnStarted()
    .step('s1', { v: 1 })
    .suspended('wait', { output: { o: 1 }, state: { st: 1 } })
    .input('b')
    .turnStarted()
    .failed({ message: 'outer', type: 'AppError', code: 'E1', details: { metadata: {}, data: new Uint8Array([1]) }, cause: { message: 'inner', type: 'Error' } })
    .input('c')
    .turnStarted()
    .step('s', { x: 1 })
    .step('f', null, { failure: 'bad' })
    .checkpoint({ c: 1 })
    .input('steer', { steering: true })
    .input('steer2', { steering: true })
    .take(['in-4'])
    .marker()
    .crashed({ exitCode: null, signal: 'SIGKILL' })
    .recovered()
    .cancel('task', 'stop everything')
    .input('queued', { steering: true })
    .build();
}

/** A history whose final state holds a task-level cancelRequested and an outcome-less ended turn, then completion. */
function cancelled(): HistoryEvent[] {
  return historyBuilder('clone2')
    .created({ kind: 'multi-turn' })
    .input('a')
    .turnStarted()
    .cancel('task', 'bye')
    .cancelled('bye')
    .taskCompleted('cancelled')
    .build();
}

const OPEN_TURN_KEYS: (keyof OpenTurn)[] = ['turn', 'attempt', 'attemptRunning', 'inputIds', 'inputs', 'entryMode', 'steered', 'turnStartedAt', 'deadline', 'executor', 'owner', 'instance', 'startedEventId', 'calls', 'checkpoint', 'taken', 'marker', 'workerCrashes', 'cancelRequested'];
const STATE_KEYS: (keyof TaskState)[] = ['taskId', 'workflow', 'kind', 'policy', 'formatVersion', 'createdAt', 'updatedAt', 'lastEventId', 'highestGeneration', 'status', 'turn', 'openTurn', 'queue', 'lastOutput', 'state', 'lastFailure', 'lastTurn', 'recoveryCount', 'workerCrashCount', 'lastInputId'];

describe('fold: field-by-field clone', () => {
  it('the test history really sets every optional field', () => {
    const s = fold('clone', everything());
    for (const k of STATE_KEYS) expect(s[k], k).toBeDefined();
    for (const k of OPEN_TURN_KEYS) expect(s.openTurn![k], `openTurn.${k}`).toBeDefined();
    const c = fold('clone2', cancelled());
    expect(c.outcome).toBe('cancelled');
  });

  for (const [name, history] of [['every optional field', everything], ['cancelled task', cancelled]] as const) {
    it(`incremental fold from every split point equals the full fold (${name}), and never mutates from`, () => {
      const events = history();
      const id = events[0]!.type === 'TaskCreated' ? (name === 'cancelled task' ? 'clone2' : 'clone') : '?';
      const full = fold(id, events);
      for (let cut = 1; cut < events.length; cut++) {
        const head = fold(id, events.slice(0, cut));
        const before = structuredClone(head);
        const inc = fold(id, events.slice(cut), head);
        expect(inc).toStrictEqual(full);
        expect(head).toStrictEqual(before);
        // One event at a time from the cut on, too (each step clones the previous state).
        let s = head;
        for (const e of events.slice(cut)) s = fold(id, [e], s);
        expect(s).toStrictEqual(full);
        expect(head).toStrictEqual(before);
      }
    });

    it(`a snapshot of an incrementally folded state round-trips exactly, and folding on from it matches (${name})`, () => {
      const events = history();
      const id = name === 'cancelled task' ? 'clone2' : 'clone';
      for (let cut = 1; cut <= events.length; cut++) {
        let s = fold(id, events.slice(0, 1));
        for (const e of events.slice(1, cut)) s = fold(id, [e], s);
        const back = decodeState(encodeState(s));
        expect(back).toEqual(s);
        expect(fold(id, events.slice(cut), back)).toEqual(fold(id, events));
      }
    });
  }
});

describe('fold leaves no dictionary-mode state', () => {
  // `delete` of a field that is not the last one added turns a V8 object into a dictionary
  // (~800 bytes more, slow to read); every finished task kept one in the engine's cache.
  v8.setFlagsFromString('--allow-natives-syntax');
  const hasFastProperties = new Function('o', 'return %HasFastProperties(o)') as (o: object) => boolean;

  it('after a turn ends, a task completes and a task cancel is taken, at once or event by event', () => {
    const histories: [string, HistoryEvent[]][] = [
      ['one-shot', historyBuilder('fast').created().input(1).turnStarted().step('s', 2).completed(2).build()],
      ['multi-turn', historyBuilder('fast').created({ kind: 'multi-turn' }).input('a').turnStarted().suspended('wait', { state: { n: 1 } }).build()],
      ['cancelled', historyBuilder('fast').created().input(1).turnStarted().cancel('task', 'stop').cancelled('stop').build()],
    ];
    for (const [name, events] of histories) {
      const whole = fold('fast', events);
      expect(hasFastProperties(whole), name).toBe(true);
      let s = fold('fast', events.slice(0, 1));
      for (const e of events.slice(1)) {
        s = fold('fast', [e], s);
        expect(hasFastProperties(s), `${name}, after ${e.type}`).toBe(true);
      }
      expect(s).toStrictEqual(whole);
    }
  });
});
