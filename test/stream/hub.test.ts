// The stream hub on its own (no engine): which tasks' live items it keeps beyond `maxTasks`, and
// the ring of one task's items. Engine-level streaming is in stream.test.ts.
import { describe, expect, it } from 'vitest';
import { StreamHub, type StreamSource } from '../../src/stream/hub.js';
import { stepEvent, stubSource } from '../helpers/stream-source.js';
import type { StreamItem } from '../../src/stream/items.js';
import type { HistoryEvent } from '../../src/history/events.js';

const source = stubSource();

function stepStarted(hub: StreamHub, taskId: string, seq: number): void {
  hub.output(taskId, 0, 1, 1, { kind: 'step-started', seq, name: `s${seq}` }, 0);
}

/** The live items a new reader of `taskId` gets at once (it then stops). */
async function kept(hub: StreamHub, taskId: string): Promise<string[]> {
  const stop = new AbortController();
  const reader = hub.read(taskId, { signal: stop.signal });
  const out: string[] = [];
  const quiet = Symbol('quiet');
  for (;;) {
    const next = await Promise.race([reader.next(), new Promise<typeof quiet>((r) => setTimeout(() => r(quiet), 20))]);
    if (next === quiet || next.done) break;
    const item: StreamItem = next.value;
    out.push(item.kind === 'step-started' ? `${item.kind} ${item.name}` : item.kind);
  }
  stop.abort();
  await reader.return(undefined);
  return out;
}

describe('StreamHub', () => {
  it('beyond maxTasks drops the least recently used task without readers, whichever was created first', async () => {
    const hub = new StreamHub(source, { maxTasks: 2 });
    stepStarted(hub, 'a', 1);
    stepStarted(hub, 'b', 1);
    stepStarted(hub, 'a', 2); // a is used again: b is now the least recently used
    stepStarted(hub, 'c', 1);
    expect(await kept(hub, 'b')).toEqual([]);
    // Reading b made a log for it again (empty), dropping the least recently used: a, then c.
    const hub2 = new StreamHub(source, { maxTasks: 2 });
    stepStarted(hub2, 'a', 1);
    stepStarted(hub2, 'b', 1);
    stepStarted(hub2, 'a', 2);
    stepStarted(hub2, 'c', 1);
    expect(await kept(hub2, 'a')).toEqual(['step-started s1', 'step-started s2']);
    expect(await kept(hub2, 'a')).toEqual(['step-started s1', 'step-started s2']);
  });

  it('a task with a reader is kept however old its last use', async () => {
    const hub = new StreamHub(source, { maxTasks: 2 });
    stepStarted(hub, 'watched', 1);
    const stop = new AbortController();
    const reader = hub.read('watched', { signal: stop.signal });
    const first = await reader.next();
    expect(first.value).toMatchObject({ kind: 'step-started', name: 's1' });
    for (const id of ['x', 'y', 'z']) stepStarted(hub, id, 1);
    stepStarted(hub, 'watched', 2);
    expect((await reader.next()).value).toMatchObject({ kind: 'step-started', name: 's2' });
    stop.abort();
    await reader.return(undefined);
  });

  it('a full ring drops its oldest items: a new reader gets one gap, then the newest bufferItems', async () => {
    const hub = new StreamHub(source, { bufferItems: 3 });
    for (let seq = 1; seq <= 7; seq++) stepStarted(hub, 't', seq);
    expect(await kept(hub, 't')).toEqual(['gap', 'step-started s5', 'step-started s6', 'step-started s7']);
  });
});

describe('StreamHub appended events', () => {
  /** A store of StepCompleted events that counts its reads. */
  function storeSource(): { source: StreamSource; events: HistoryEvent[]; reads: number[] } {
    const events: HistoryEvent[] = [];
    const reads: number[] = [];
    return {
      events,
      reads,
      source: {
        ...source,
        readEvents: async (_taskId, from) => {
          reads.push(from);
          return events.filter((e) => e.eventId >= from);
        },
      },
    };
  }
  const step = stepEvent;

  async function take(reader: AsyncGenerator<StreamItem>, n: number): Promise<string[]> {
    const out: string[] = [];
    while (out.length < n) out.push((await reader.next()).value!.offset);
    return out;
  }

  it('keeps no events of a task nobody reads: a later reader reads them from the store, with the live items between', async () => {
    const { source: src, events, reads } = storeSource();
    const hub = new StreamHub(src);
    hub.output('t', 0, 1, 1, { kind: 'step-started', seq: 1, name: 's1' }, 0); // the task has a log now
    for (let id = 1; id <= 3; id++) {
      events.push(step(id));
      hub.appended('t', [step(id)]);
    }
    const stop = new AbortController();
    const reader = hub.read('t', { signal: stop.signal });
    expect(await take(reader, 4)).toEqual(['0.1', '1', '2', '3']);
    expect(reads).toEqual([1]);
    // With a reader attached, appends are kept: the next ones come without a store read.
    const next = take(reader, 2);
    for (let id = 4; id <= 5; id++) {
      events.push(step(id));
      hub.appended('t', [step(id)]);
    }
    expect(await next).toEqual(['4', '5']);
    expect(reads).toEqual([1]);
    stop.abort();
    await reader.return(undefined);
  });

  it('a reader behind the trimmed cache of appended events reads the rest from the store, in order, once each', async () => {
    const { source: src, events, reads } = storeSource();
    const hub = new StreamHub(src, { bufferItems: 3 });
    const stop = new AbortController();
    const reader = hub.read('t', { signal: stop.signal });
    const first = reader.next(); // attaches the reader; nothing stored yet
    await new Promise((r) => setTimeout(r, 0));
    events.push(step(1));
    hub.appended('t', [step(1)]);
    expect((await first).value!.offset).toBe('1');
    // 20 appends while the reader waits: the cache (at most 2 × 3) no longer reaches back to 2.
    for (let id = 2; id <= 21; id++) {
      events.push(step(id));
      hub.appended('t', [step(id)]);
    }
    expect(await take(reader, 20)).toEqual(Array.from({ length: 20 }, (_, i) => String(i + 2)));
    expect(reads).toEqual([1, 2]);
    // Caught up: kept appends serve it again.
    const next = take(reader, 1);
    events.push(step(22));
    hub.appended('t', [step(22)]);
    expect(await next).toEqual(['22']);
    expect(reads).toEqual([1, 2]);
    stop.abort();
    await reader.return(undefined);
  });

  it('two readers at different places, one leaving and a new one coming, an append seen by the store before the hub: each event once, the end once', async () => {
    const { source: src, events, reads } = storeSource();
    const hub = new StreamHub(src, { bufferItems: 4 });
    const push = (id: number) => {
      events.push(step(id));
      hub.appended('t', [step(id)]);
    };
    hub.output('t', 0, 1, 1, { kind: 'step-started', seq: 1, name: 's1' }, 0);
    for (let id = 1; id <= 2; id++) push(id); // nobody reads: nothing kept
    const a = hub.read('t');
    expect(await take(a, 3)).toEqual(['0.1', '1', '2']);
    const stopB = new AbortController();
    const b = hub.read('t', { from: '1', signal: stopB.signal });
    expect(await take(b, 1)).toEqual(['2']); // from the store: its first read
    for (let id = 3; id <= 5; id++) push(id);
    expect(await take(a, 3)).toEqual(['3', '4', '5']);
    // b leaves behind; a stays, so appends are still kept.
    stopB.abort();
    await b.return(undefined);
    push(6);
    expect(await take(a, 1)).toEqual(['6']);
    expect(reads).toEqual([1, 1]);
    // An event the store has and the hub is not yet told of: a reader coming now reads it from the
    // store, and the notification that follows gives it to nobody twice.
    events.push(step(7));
    const c = hub.read('t', { from: '5' });
    expect(await take(c, 2)).toEqual(['6', '7']);
    hub.appended('t', [step(7)]);
    expect(await take(a, 1)).toEqual(['7']);
    const completed = { type: 'TaskCompleted', eventId: 8, generation: 1, time: 8, outcome: 'succeeded' } as unknown as HistoryEvent;
    events.push(completed);
    hub.appended('t', [completed]);
    for (const r of [a, c]) {
      const last = await r.next();
      expect(last.value).toMatchObject({ kind: 'task-completed', offset: '8' });
      expect(await r.next()).toEqual({ done: true, value: undefined });
    }
    expect(reads).toEqual([1, 1, 5]);
    // Every reader gone: the next append is not kept, and a later reader reads the store.
    push(9);
    const d = hub.read('t', { from: '7' });
    expect((await d.next()).value).toMatchObject({ kind: 'task-completed', offset: '8' });
    expect(await d.next()).toEqual({ done: true, value: undefined });
    expect(reads).toEqual([1, 1, 5, 7]);
  });
});
