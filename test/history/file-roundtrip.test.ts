// Review: export/import files carry compacted + delta + fork histories exactly (both formats).
import fc from 'fast-check';
import { expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import { encodeHistoryFile, parseHistoryFile } from '../../src/history/history-file.js';
import { encodeState } from '../../src/history/state-codec.js';
import { compaction } from '../../src/replay/compact.js';
import { fold } from '../../src/replay/fold.js';
import { forkEvents } from '../../src/replay/fork.js';
import { isTurnTerminal } from '../../src/history/events.js';
import { arbChatHistory, withDeltas } from '../replay/arbitrary-history.js';

function apply(events: readonly HistoryEvent[], c: Extract<HistoryEvent, { type: 'HistoryCompacted' }>): HistoryEvent[] {
  return [events[0]!, c, ...events.filter((e) => e.eventId > c.throughEventId)];
}
const bytes = (id: string, events: readonly HistoryEvent[]) => Buffer.from(encodeState(fold(id, events)));

it('compacted, delta-encoded histories and forks of them round-trip through json and binary files to the same state', async () => {
  let checked = 0;
  await fc.assert(
    fc.asyncProperty(arbChatHistory, fc.integer({ min: 1, max: 3 }), async (full, keep) => {
      const events = withDeltas(full);
      const c = compaction('sim', events, keep);
      if (c === undefined) return;
      const stored = apply(events, c);
      const kept = stored.filter(isTurnTerminal).map((e) => (e as { turn: number }).turn);
      const variants: [string, HistoryEvent[]][] = [['sim', stored]];
      if (events[0]!.type === 'TaskCreated' && events[0]!.kind === 'multi-turn' && kept.length > 0) {
        variants.push(['f', forkEvents('sim', stored, { atTurn: kept[0]!, newTaskId: 'f' })]);
      }
      for (const [id, evs] of variants) {
        for (const format of ['json', 'binary'] as const) {
          const file = parseHistoryFile(await encodeHistoryFile({ taskId: id, events: evs }, format), `x.${format}`);
          expect(file.tasks[0]!.events.map((e) => e.eventId)).toEqual(evs.map((e) => e.eventId));
          // It folds to the same state, byte for byte (and imports under another id).
          expect(bytes(id, file.tasks[0]!.events)).toEqual(bytes(id, evs));
          expect(fold('imported', file.tasks[0]!.events).taskId).toBe('imported');
          checked++;
        }
      }
    }),
    { numRuns: 60, seed: 7 },
  );
  expect(checked).toBeGreaterThan(20);
});
