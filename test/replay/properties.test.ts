import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import type { TaskState } from '../../src/history/state.js';
import { decodeState, encodeState } from '../../src/history/state-codec.js';
import { decide } from '../../src/replay/decide.js';
import { explainDecision } from '../../src/replay/explain.js';
import { fold } from '../../src/replay/fold.js';
import { arbHistory, arbLeaseNow } from './arbitrary-history.js';

const RUNS = { numRuns: 200, seed: 7 };

/** Every intermediate state of a history, folded one event at a time (incrementally). */
function* prefixes(events: HistoryEvent[]): Generator<{ k: number; state: TaskState }> {
  let s: TaskState | undefined;
  for (let k = 0; k < events.length; k++) {
    s = fold('sim', [events[k]!], s);
    yield { k: k + 1, state: s };
  }
}

describe('replayer properties over generated valid histories', () => {
  it('fold accepts every generated history', () => {
    fc.assert(
      fc.property(arbHistory, (events) => {
        expect(fold('sim', events).lastEventId).toBe(events.length);
      }),
      RUNS,
    );
  });

  it('decide is total and deterministic at every prefix', () => {
    fc.assert(
      fc.property(arbHistory, arbLeaseNow, (events, { lease, now }) => {
        for (const { state } of prefixes(events)) {
          const d = decide(state, lease, now);
          expect(d.rule).toBeTruthy();
          expect(d.reason).toBeTruthy();
          expect(decide(structuredClone(state), lease && { ...lease }, now)).toStrictEqual(d);
          expect(explainDecision(d, state)).toContain(d.rule);
        }
      }),
      RUNS,
    );
  });

  it('an open turn with a marker never yields a rerun', () => {
    let seen = 0;
    fc.assert(
      fc.property(arbHistory, arbLeaseNow, (events, { lease, now }) => {
        for (const { state } of prefixes(events)) {
          if (state.openTurn?.marker === undefined) continue;
          seen++;
          expect(decide(state, lease, now).kind).not.toBe('rerun');
          expect(decide(state, undefined, now)).toMatchObject({ kind: 'finalize-turn' });
        }
      }),
      RUNS,
    );
    expect(seen).toBeGreaterThan(50);
  });

  it('a task with a cancel requested never yields a start-turn or a rerun', () => {
    let seen = 0;
    fc.assert(
      fc.property(arbHistory, arbLeaseNow, (events, { lease, now }) => {
        let taskCancelled = false;
        for (const { k, state } of prefixes(events)) {
          const e = events[k - 1]!;
          if (e.type === 'CancelRequested' && e.scope === 'task') taskCancelled = true;
          const turnCancelled = state.openTurn?.cancelRequested !== undefined;
          if (!taskCancelled && !turnCancelled) continue;
          seen++;
          const d = decide(state, lease, now);
          expect(d.kind).not.toBe('rerun');
          if (taskCancelled) expect(d.kind).not.toBe('start-turn');
        }
      }),
      RUNS,
    );
    expect(seen).toBeGreaterThan(50);
  });

  it('incremental fold equals full fold at every split point', () => {
    fc.assert(
      fc.property(arbHistory, (events) => {
        const full = fold('sim', events);
        for (let k = 1; k <= events.length; k++) {
          expect(fold('sim', events.slice(k), fold('sim', events.slice(0, k)))).toStrictEqual(full);
        }
      }),
      { numRuns: 100, seed: 11 },
    );
  });

  it('snapshots round-trip exactly, and snapshot + tail equals the full fold', () => {
    fc.assert(
      fc.property(arbHistory, fc.nat(), (events, r) => {
        const k = 1 + (r % events.length);
        const prefix = fold('sim', events.slice(0, k));
        const restored = decodeState(encodeState(prefix));
        expect(restored).toStrictEqual(prefix);
        expect(fold('sim', events.slice(k), restored)).toStrictEqual(fold('sim', events));
      }),
      { numRuns: 300, seed: 13 },
    );
  });
});
