// Compaction (pure): a compacted history folds to exactly the state of the whole one.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeEvent, encodeEvent } from '../../src/history/codec.js';
import type { HistoryEvent } from '../../src/history/events.js';
import { encodeState } from '../../src/history/state-codec.js';
import { compaction } from '../../src/replay/compact.js';
import { fold } from '../../src/replay/fold.js';
import { forkEvents } from '../../src/replay/fork.js';
import { arbChatHistory, withDeltas } from './arbitrary-history.js';

/** What the store holds after compactHistory: event 1, the compacted event 2, then the tail. */
function apply(events: readonly HistoryEvent[], c: Extract<HistoryEvent, { type: 'HistoryCompacted' }>): HistoryEvent[] {
  return [events[0]!, c, ...events.filter((e) => e.eventId > c.throughEventId)];
}

const bytes = (events: readonly HistoryEvent[]) => Buffer.from(encodeState(fold('sim', events)));

describe('compaction', () => {
  it('a compacted history (twice compacted, with deltas, through the codec) folds to the same state', () => {
    let compacted = 0;
    fc.assert(
      fc.property(arbChatHistory, fc.integer({ min: 1, max: 4 }), (full, keep) => {
        const events = withDeltas(full);
        const c = compaction('sim', events, keep);
        if (c === undefined) return;
        compacted++;
        const once = apply(events, c).map((e) => decodeEvent(encodeEvent(e), 'sim'));
        expect(bytes(once)).toEqual(bytes(events));
        expect(once.filter((e) => e.type === 'TurnStarted' && e.turn <= c.turns)).toEqual([]);
        // Compacting a compacted history again (later turns) keeps the same state too.
        const again = compaction('sim', once, 1);
        if (again) expect(bytes(apply(once, again))).toEqual(bytes(events));
      }),
      { numRuns: 80, seed: 41 },
    );
    expect(compacted).toBeGreaterThan(20);
  });

  it('runs every keepTurns turns, not after each', () => {
    const events = withDeltas(fc.sample(arbChatHistory, { numRuns: 40, seed: 42 }).find((h) => h.filter((e) => e.type === 'TurnStarted' && e.attempt === 1).length >= 8)!);
    const c = compaction('sim', events, 2)!;
    expect(c).toBeDefined();
    // Right after a compaction there is nothing to do until keepTurns more turns end.
    expect(compaction('sim', apply(events, c), 2)).toBeUndefined();
  });

  it('a fold rejects a HistoryCompacted that is not event 2 or whose state does not decode', () => {
    const events = withDeltas(fc.sample(arbChatHistory, { numRuns: 40, seed: 43 }).find((h) => h.filter((e) => e.type === 'TurnStarted' && e.attempt === 1).length >= 4)!);
    const c = compaction('sim', events, 1)!;
    expect(() => fold('sim', [events[0]!, { ...c, state: new Uint8Array([1, 2, 3]) }])).toThrow(/history-compacted/);
    expect(() => fold('sim', [events[0]!, events[1]!, { ...c, eventId: 3 }])).toThrow(/history-compacted|event-id-dense/);
  });

  it('a fork of a compacted history renumbers densely and folds to the same state at that turn', () => {
    const events = withDeltas(fc.sample(arbChatHistory, { numRuns: 40, seed: 44 }).find((h) => h.filter((e) => e.type === 'TurnStarted' && e.attempt === 1).length >= 6)!);
    const c = compaction('sim', events, 2)!;
    const stored = apply(events, c);
    const last = stored.filter((e) => e.type === 'TurnCompleted' || e.type === 'TurnSuspended').at(-1)!;
    const f = forkEvents('sim', stored, { atTurn: (last as { turn: number }).turn, newTaskId: 'f' });
    expect(f.map((e) => e.eventId)).toEqual(f.map((_, i) => i + 1));
    expect(Buffer.from(fold('f', f).state!.data)).toEqual(Buffer.from(fold('sim', events.slice(0, last.eventId)).state!.data));
  });

  it('droppedInputIds: every input queued in the dropped events, kept across a second compaction', () => {
    let checked = 0;
    fc.assert(
      fc.property(arbChatHistory, fc.integer({ min: 1, max: 3 }), (full, keep) => {
        const events = withDeltas(full);
        const c = compaction('sim', events, keep);
        if (c === undefined) return;
        const queuedIds = (upTo: number) => [...new Set(events.filter((e) => e.type === 'InputQueued' && e.eventId <= upTo).map((e) => (e as { inputId: string }).inputId))];
        expect(c.droppedInputIds).toEqual(queuedIds(c.throughEventId));
        const once = apply(events, c).map((e) => decodeEvent(encodeEvent(e), 'sim'));
        const again = compaction('sim', once, 1);
        if (again === undefined) return;
        // The second cut's list holds the first's (now inside it) and the inputs queued since.
        expect(again.droppedInputIds).toEqual(queuedIds(again.throughEventId));
        checked++;
      }),
      { numRuns: 80, seed: 45 },
    );
    expect(checked).toBeGreaterThan(5);
  });
});
