// Review: operator resend/resume of a kept failed turn whose input was queued before the
// compaction cut (its InputQueued lives in HistoryCompacted.state, not as an event).
import { expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import { compaction } from '../../src/replay/compact.js';
import { failedTurnInputs } from '../../src/runtime/operator.js';
import { historyBuilder } from '../../src/testing/history-builder.js';

function apply(events: readonly HistoryEvent[], c: Extract<HistoryEvent, { type: 'HistoryCompacted' }>): HistoryEvent[] {
  return [events[0]!, c, ...events.filter((e) => e.eventId > c.throughEventId)];
}

it('failedTurnInputs finds the input of a kept failed turn queued before the cut', () => {
  const b = historyBuilder('t', { tick: 10 }).created({ kind: 'multi-turn' });
  b.input('one').turnStarted();
  b.input('two').input('three').input('four');
  b.suspended('waiting', { output: 'r1', state: { m: ['one'] } });
  b.turnStarted().suspended('waiting', { output: 'r2', state: { m: ['one', 'two'] } });
  b.turnStarted().suspended('waiting', { output: 'r3', state: { m: ['one', 'two', 'three'] } });
  b.turnStarted().failed('model down');
  const events = b.build();
  const whole = failedTurnInputs('t', events);
  expect(whole.turn).toBe(4);
  expect(whole.inputs.map((q) => q.inputId)).toEqual(['in-4']);

  const c = compaction('t', events, 2)!;
  expect(c.turns).toBe(2);
  const stored = apply(events, c);
  const found = failedTurnInputs('t', stored);
  expect(found.turn).toBe(4);
  expect(found.inputs.map((q) => q.inputId)).toEqual(['in-4']);
  expect(found.inputs[0]!.input).toEqual(whole.inputs[0]!.input);
});
