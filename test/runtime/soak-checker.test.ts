/** The soak checker (test/helpers/soak-checker.ts) finds what it is meant to find. */
import { expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import { historyBuilder } from '../../src/testing/index.js';
import { checkSoakHistory } from '../helpers/soak-checker.js';

/** Two turns of a multi-turn chat: i1 (one step, re-run once), then i2; suspended, nothing queued. */
function sound(): HistoryEvent[] {
  return historyBuilder('t')
    .created({ workflow: 'chat', kind: 'multi-turn' })
    .input('a', { id: 'i1' })
    .turnStarted()
    .step('think', 1)
    .recovered()
    .completed('ok')
    .input('b', { id: 'i2' })
    .turnStarted()
    .completed('ok')
    .build();
}

it('a sound history has no problems', () => {
  expect(checkSoakHistory('t', sound(), { accepted: ['i1', 'i2'], uncertain: [] })).toEqual([]);
  expect(checkSoakHistory('t', sound(), { accepted: ['i1'], uncertain: ['i2'] })).toEqual([]);
});

it('finds a second terminal event, an input never sent or lost, a step recorded twice, a turn left open', () => {
  const h = sound();
  const lastTerminal = h[h.length - 1]!;
  const twice = [...h, { ...lastTerminal, eventId: h.length + 1 }];
  expect(checkSoakHistory('t', twice, { accepted: ['i1', 'i2'], uncertain: [] }).join('\n')).toContain('turn 2 has 2 terminal events');
  expect(checkSoakHistory('t', sound(), { accepted: ['i1'], uncertain: [] }).join('\n')).toContain('input i2 is queued but was never sent');
  expect(checkSoakHistory('t', sound(), { accepted: ['i1', 'i2', 'i3'], uncertain: [] }).join('\n')).toContain('accepted input i3 is queued 0 times');
  const step = h.find((e) => e.type === 'StepCompleted')!;
  const dup = [...h.slice(0, -1), { ...step, eventId: h.length }, { ...lastTerminal, eventId: h.length + 1 }];
  expect(checkSoakHistory('t', dup, { accepted: ['i1', 'i2'], uncertain: [] }).join('\n')).toContain('recorded twice');
  const open = h.slice(0, -1);
  expect(checkSoakHistory('t', open, { accepted: ['i1', 'i2'], uncertain: [] }).join('\n')).toContain('turn 2 still open');
});

it('finds an input that ran in two turns', () => {
  const h = historyBuilder('t')
    .created({ workflow: 'chat', kind: 'multi-turn' })
    .input('a', { id: 'i1' })
    .turnStarted()
    .completed('ok')
    .build();
  const again = historyBuilder('t')
    .created({ workflow: 'chat', kind: 'multi-turn' })
    .input('a', { id: 'i1' })
    .turnStarted()
    .completed('ok')
    .turnStarted({ inputIds: ['i1'] })
    .completed('ok')
    .build();
  expect(checkSoakHistory('t', h, { accepted: ['i1'], uncertain: [] })).toEqual([]);
  expect(checkSoakHistory('t', again, { accepted: ['i1'], uncertain: [] }).join('\n')).toContain('input i1 ran in turns 1,2');
});

it('finds a recorded step that ran again in a later attempt, and a record whose run was never logged', () => {
  // sound(): turn 1's step 'think' is recorded by attempt 1, then the turn is re-run (attempt 2).
  const h = sound();
  const inputs = { accepted: ['i1', 'i2'], uncertain: [], checkRuns: true };
  expect(checkSoakHistory('t', h, inputs, [{ turn: 1, name: 'think', attempt: 1 }])).toEqual([]);
  // An earlier attempt that ran the body and died before its record is allowed.
  const reRecorded = historyBuilder('t')
    .created({ workflow: 'chat', kind: 'multi-turn' })
    .input('a', { id: 'i1' })
    .turnStarted()
    .recovered()
    .step('think', 1)
    .completed('ok')
    .build();
  const step = reRecorded.find((e) => e.type === 'StepCompleted')!;
  expect(step.type === 'StepCompleted' && step.attempt).toBe(2);
  expect(checkSoakHistory('t', reRecorded, { accepted: ['i1'], uncertain: [], checkRuns: true }, [{ turn: 1, name: 'think', attempt: 1 }, { turn: 1, name: 'think', attempt: 2 }])).toEqual([]);
  expect(checkSoakHistory('t', h, inputs, [{ turn: 1, name: 'think', attempt: 1 }, { turn: 1, name: 'think', attempt: 2 }]).join('\n')).toContain(
    'step think of turn 1, recorded by attempt 1, ran again in attempt 2',
  );
  expect(checkSoakHistory('t', h, inputs, []).join('\n')).toContain('whose run of it was never logged');
  // Without checkRuns the runs are not looked at (a history checked on its own).
  expect(checkSoakHistory('t', h, { accepted: ['i1', 'i2'], uncertain: [] }, [])).toEqual([]);
});
