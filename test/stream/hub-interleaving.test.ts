// The stream hub under random interleavings of appends, live chunks and readers that come late,
// start from an offset or stop early: every reader gets its items in offset order, each once,
// none lost while the ring holds them, and the end once. A property, so a change to how items
// reach readers (batching, waking) cannot drop or reorder one in a case the example tests miss.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import { StreamHub } from '../../src/stream/hub.js';
import type { StreamItem } from '../../src/stream/items.js';
import { completedEvent as completed, stepEvent as step, stubSource } from '../helpers/stream-source.js';

type Op = { op: 'append' } | { op: 'chunk' } | { op: 'tick'; macro: boolean } | { op: 'reader'; from: number; stopAfter: number | undefined };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { arbitrary: fc.constant({ op: 'append' } as Op), weight: 4 },
  { arbitrary: fc.constant({ op: 'chunk' } as Op), weight: 4 },
  { arbitrary: fc.boolean().map((macro) => ({ op: 'tick', macro }) as Op), weight: 3 },
  { arbitrary: fc.record({ op: fc.constant('reader' as const), from: fc.nat(40), stopAfter: fc.option(fc.integer({ min: 1, max: 6 }), { nil: undefined }) }), weight: 2 },
);


async function run(ops: Op[], writesHere: boolean): Promise<void> {
  const events: HistoryEvent[] = [];
  const src = stubSource(events, { writesHere: () => writesHere });
  const hub = new StreamHub(src);
  // Every item in the order a reader must see it: offsets, and a chunk's data.
  const canon: string[] = [];
  let lastEvent = 0;
  let n = 0;
  const append = (e: HistoryEvent): void => {
    events.push(e);
    lastEvent = e.eventId;
    n = 0;
    canon.push(String(e.eventId));
    hub.appended('t', [e]);
  };
  const readers: { from: string | undefined; stopAfter: number | undefined; got: Promise<string[]> }[] = [];
  const read = async (from: string | undefined, stopAfter: number | undefined): Promise<string[]> => {
    const out: string[] = [];
    for await (const item of hub.read('t', { ...(from === undefined ? {} : { from }), pollMs: 1 }) as AsyncGenerator<StreamItem>) {
      out.push(item.kind === 'chunk' ? `${item.offset}=${String(item.data)}` : item.offset);
      if (stopAfter !== undefined && out.length >= stopAfter) break;
    }
    return out;
  };
  // The first live item gives the task a log, so every append after it is seen by the hub.
  hub.output('t', 0, 1, 1, { kind: 'chunk', data: 'c0.1' as never }, 0);
  canon.push('0.1=c0.1');
  n = 1;
  for (const o of ops) {
    if (o.op === 'append') append(step(lastEvent + 1));
    else if (o.op === 'chunk') {
      n++;
      const at = `${lastEvent}.${n}`;
      hub.output('t', lastEvent, 1, 1, { kind: 'chunk', data: `c${at}` as never }, 0);
      canon.push(`${at}=c${at}`);
    } else if (o.op === 'tick') await (o.macro ? new Promise((r) => setImmediate(r)) : Promise.resolve());
    else {
      // From the start, or from an item already there (its offset).
      const k = o.from % (canon.length + 1);
      const from = k === 0 ? undefined : canon[k - 1]!.split('=')[0];
      readers.push({ from, stopAfter: o.stopAfter, got: read(from, o.stopAfter) });
    }
  }
  readers.push({ from: undefined, stopAfter: undefined, got: read(undefined, undefined) });
  await new Promise((r) => setImmediate(r));
  append(completed(lastEvent + 1));
  for (const r of readers) {
    const got = await r.got;
    const start = r.from === undefined ? 0 : canon.findIndex((c) => c.split('=')[0] === r.from) + 1;
    const want = canon.slice(start);
    expect(got).toEqual(r.stopAfter === undefined ? want : want.slice(0, r.stopAfter));
  }
}

describe('StreamHub interleavings', () => {
  it('every reader, early, late, from an offset or stopping early, gets its items in order, once each, and the end once (appends through this engine)', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { maxLength: 40 }), (ops) => run(ops, true)),
      { numRuns: 150 },
    );
  });

  it('the same when readers poll the store (another engine writes)', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { maxLength: 30 }), (ops) => run(ops, false)),
      { numRuns: 60 },
    );
  });
});
