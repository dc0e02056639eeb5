// Review: fork of a compacted history. Inputs still queued at the fork point belong to the
// original's future (docs/history.md#forks) even when they were queued before the compaction cut,
// i.e. when they live inside HistoryCompacted.state rather than as InputQueued events.
import { describe, expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import { compaction } from '../../src/replay/compact.js';
import { fold } from '../../src/replay/fold.js';
import { forkEvents } from '../../src/replay/fork.js';
import { historyBuilder } from '../../src/testing/history-builder.js';

function apply(events: readonly HistoryEvent[], c: Extract<HistoryEvent, { type: 'HistoryCompacted' }>): HistoryEvent[] {
  return [events[0]!, c, ...events.filter((e) => e.eventId > c.throughEventId)];
}

/** Turn 1 runs while three more inputs queue; turns 2 and 3 take two of them; one stays queued. */
function chat(): HistoryEvent[] {
  const b = historyBuilder('orig', { tick: 10 }).created({ kind: 'multi-turn' });
  b.input('one').turnStarted();
  b.input('two').input('three').input('four');
  b.suspended('waiting', { output: 'r1', state: { m: ['one'] } });
  b.turnStarted().suspended('waiting', { output: 'r2', state: { m: ['one', 'two'] } });
  b.turnStarted().suspended('waiting', { output: 'r3', state: { m: ['one', 'two', 'three'] } });
  return b.build();
}

describe('fork of a compacted history', () => {
  it('the uncompacted fork leaves the still-queued input with the original', () => {
    const orig = chat();
    expect(fold('orig', orig).queue.map((q) => q.input)).toHaveLength(1);
    const f = forkEvents('orig', orig, { atTurn: 3, newTaskId: 'f' });
    expect(fold('f', f).queue).toEqual([]);
  });

  it('the compacted fork leaves it with the original too (the input was queued before the cut)', () => {
    const orig = chat();
    const c = compaction('orig', orig, 1);
    expect(c).toBeDefined();
    const stored = apply(orig, c!);
    expect(fold('orig', stored).queue).toHaveLength(1);
    const f = forkEvents('orig', stored, { atTurn: 3, newTaskId: 'f' });
    const s = fold('f', f);
    expect(s.status).toBe('suspended');
    expect(s.queue).toEqual([]);
  });
});
