/**
 * Scheduled inputs in the derived records: the summary keeps their deliverAt (summarize), the
 * Level row carries it (and rows written before it still decode), and the claim of due work
 * hands a waiting task out only once its input is due or due within the horizon.
 */
import { describe, expect, it } from 'vitest';
import { summarize, scheduledWake } from '../../src/history/summary.js';
import { decodeSummary, encodeSummary, encodeSummaryRow } from '../../src/store/records.js';
import { claimFromIndex, type IndexEntry } from '../../src/store/due-work.js';
import { historyBuilder, T0 } from '../../src/testing/history-builder.js';
import { encodeEvent, decodeEvent } from '../../src/history/codec.js';
import type { TaskStatus, TaskSummary } from '../../src/history/events.js';
import { compaction } from '../../src/replay/compact.js';

const DAY = 86_400_000;

function waiting(): TaskSummary {
  const events = historyBuilder('t').created({ kind: 'multi-turn' }).input('a').turnStarted().suspended().input('later', { id: 'in-s', deliverAt: T0 + DAY }).build();
  return summarize('t', undefined, events);
}

async function claim(s: TaskSummary, now: number, horizonMs?: number): Promise<string[]> {
  const read = async (status: TaskStatus) => ({ entries: status === s.status ? [{ taskId: s.taskId, summary: s } as IndexEntry] : [] });
  const batch = await claimFromIndex({ now, instance: 'i', limit: 10, ...(horizonMs === undefined ? {} : { horizonMs }) }, read);
  return batch.tasks.map((t) => t.reason);
}

describe('scheduled inputs in summaries and claims', () => {
  it('summarize keeps deliverAt per scheduled input until a turn or takeInputs takes it', () => {
    const s = waiting();
    expect(s.scheduled).toEqual({ 'in-s': T0 + DAY });
    expect(scheduledWake(s)).toEqual({ wakeAt: T0 + DAY, count: 1 });
    const b = historyBuilder('t').created({ kind: 'multi-turn' }).input('a').turnStarted().suspended().input('later', { id: 'in-s', deliverAt: T0 + DAY });
    const taken = summarize('t', s, b.turnStarted({ inputIds: ['in-s'] }).build().slice(-1));
    expect(taken.scheduled).toBeUndefined();
  });

  it('a summary rebuilt from a compacted history keeps the scheduled inputs the dropped events queued', () => {
    const h = historyBuilder('t').created({ kind: 'multi-turn' }).input('later', { id: 'in-s', deliverAt: T0 + DAY }).input('a', { id: 'a' });
    const events = h.turnStarted({ inputIds: ['a'] }).suspended().input('b', { id: 'b' }).turnStarted({ inputIds: ['b'] }).suspended().build();
    const cut = compaction('t', events, 1)!;
    const compacted = [events[0]!, cut, ...events.slice(cut.throughEventId)];
    expect(summarize('t', undefined, compacted)).toEqual(summarize('t', undefined, events));
    expect(summarize('t', undefined, compacted).scheduled).toEqual({ 'in-s': T0 + DAY });
  });

  it('the Level summary row carries the scheduled inputs; 10-member rows still decode', () => {
    const s = waiting();
    const bytes = encodeSummary(s);
    expect(JSON.parse(bytes.toString())).toHaveLength(11);
    expect(decodeSummary('t', bytes)).toEqual(s);
    const { scheduled: _s, ...plain } = s;
    expect(JSON.parse(encodeSummaryRow(plain).toString())).toHaveLength(10);
    expect(decodeSummary('t', encodeSummary(plain))).toEqual(plain);
  });

  it('the Level summary row carries a pending task cancel as a 12th member, with or without scheduled inputs', () => {
    const s = waiting();
    const { scheduled: _s, ...plain } = s;
    for (const base of [s, plain]) {
      const flagged: TaskSummary = { ...base, cancelRequested: true };
      const row = JSON.parse(encodeSummary(flagged).toString()) as unknown[];
      expect(row).toHaveLength(12);
      expect(row[11]).toBe(1);
      expect(decodeSummary('t', encodeSummary(flagged))).toEqual(flagged);
      expect(encodeSummary(base)).toEqual(encodeSummaryRow(base));
    }
  });

  it('the claim hands out a waiting task only when its input is due, or due within the horizon', async () => {
    const s = waiting();
    expect(await claim(s, T0 + DAY - 1)).toEqual([]);
    expect(await claim(s, T0 + DAY)).toEqual(['queued']);
    expect(await claim(s, T0, DAY)).toEqual(['queued']);
    expect(await claim(s, T0, DAY - 1000)).toEqual([]);
  });

  it('InputQueued.deliverAt and TimerStarted round-trip through the codec', () => {
    const events = historyBuilder('t').created({ kind: 'multi-turn' }).input('x', { deliverAt: T0 + 5000 }).turnStarted().sleep(250).build();
    for (const e of events) {
      const back = decodeEvent(encodeEvent(e), 't');
      expect(Buffer.from(encodeEvent(back))).toEqual(Buffer.from(encodeEvent(e)));
      if (e.type === 'InputQueued') expect(back).toMatchObject({ deliverAt: T0 + 5000 });
      if (e.type === 'TimerStarted') expect(back).toEqual(e);
    }
  });
});
