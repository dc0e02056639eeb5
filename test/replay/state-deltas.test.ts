/**
 * State deltas (history format 2) over generated histories: a history whose terminals carry
 * deltas folds, at every prefix, to exactly the state of the same history with full states.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeEvent, encodeEvent } from '../../src/history/codec.js';
import type { HistoryEvent } from '../../src/history/events.js';
import type { TaskState } from '../../src/history/state.js';
import { decodeState, encodeState } from '../../src/history/state-codec.js';
import { fold, withFullStates } from '../../src/replay/fold.js';
import { arbChatHistory, arbHistory, withDeltas } from './arbitrary-history.js';

const arbAny = fc.oneof(arbHistory, arbChatHistory);

const isDelta = (e: HistoryEvent) => (e.type === 'TurnCompleted' || e.type === 'TurnSuspended') && e.stateDelta !== undefined;

describe('state deltas over generated histories', () => {
  it('fold with deltas equals fold with full states, at every prefix, and deltas are written', () => {
    let deltas = 0;
    let copies = 0;
    fc.assert(
      fc.property(arbAny, (events) => {
        const d = withDeltas(events);
        let full: TaskState | undefined;
        let delta: TaskState | undefined;
        for (let k = 0; k < events.length; k++) {
          full = fold('sim', [events[k]!], full);
          delta = fold('sim', [d[k]!], delta);
          expect(delta).toStrictEqual(full);
        }
        for (const e of d) {
          if (!isDelta(e)) continue;
          deltas++;
          const pieces = (e as { stateDelta: { pieces: Array<object> } }).stateDelta.pieces;
          copies += pieces.filter((p) => 'source' in p).length;
        }
      }),
      { numRuns: 100, seed: 21 },
    );
    // The generator's chats grow by step results, so deltas copy from them.
    expect(deltas).toBeGreaterThan(100);
    expect(copies).toBeGreaterThan(50);
  });

  it('deltas survive the codec and the JSON mapping, and expand back to the full-state history', () => {
    fc.assert(
      fc.property(arbAny, (events) => {
        const d = withDeltas(events);
        const back = d.map((e) => decodeEvent(encodeEvent(e), 'sim'));
        expect(Buffer.from(encodeState(fold('sim', back)))).toStrictEqual(Buffer.from(encodeState(fold('sim', events))));
        expect(withFullStates('sim', back).map((e) => encodeEvent(e))).toStrictEqual(events.map((e) => encodeEvent(e)));
      }),
      { numRuns: 50, seed: 22 },
    );
  });

  it('snapshot + a tail of deltas equals the full fold', () => {
    fc.assert(
      fc.property(arbAny, fc.nat(), (events, r) => {
        const d = withDeltas(events);
        const k = 1 + (r % d.length);
        const restored = decodeState(encodeState(fold('sim', d.slice(0, k))));
        expect(fold('sim', d.slice(k), restored)).toStrictEqual(fold('sim', events));
      }),
      { numRuns: 100, seed: 23 },
    );
  });

  it('a format-1 task never gets a delta', () => {
    fc.assert(
      fc.property(arbHistory, (events) => {
        const v1 = events.map((e) => (e.type === 'TaskCreated' ? { ...e, formatVersion: 1 } : e));
        expect(withDeltas(v1).some(isDelta)).toBe(false);
      }),
      { numRuns: 50, seed: 24 },
    );
  });
});
