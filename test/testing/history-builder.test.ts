// The history builder is public API of turnlog/testing (docs/testing.md#building-histories).
import { expect, it } from 'vitest';
import { fold } from '../../src/replay/fold.js';
import { historyBuilder, HistoryBuilder, renumberEvents } from '../../src/testing/index.js';

it('turnlog/testing exports the builder the tests use: dense ids, tracked turns, a foldable history', () => {
  const b = historyBuilder('t1').created({ kind: 'multi-turn' }).input('hi').turnStarted().step('s', 1).completed('ok');
  expect(b).toBeInstanceOf(HistoryBuilder);
  const events = b.build();
  expect(events.map((e) => e.eventId)).toEqual([1, 2, 3, 4, 5]);
  expect(fold('t1', events)).toMatchObject({ status: 'suspended', turn: 1, lastEventId: 5 });
  expect(renumberEvents(events.slice(1)).map((e) => e.eventId)).toEqual([1, 2, 3, 4]);
});
