// The stream hub's reader (a hand-written async iterator, not a generator): items read in one pass
// are handed out one resolved promise each. These pin what a generator gave for free: order,
// nothing dropped or doubled across passes, calls queued behind a read in flight, and a reader that
// stops early (break, return while waiting, throw) lets go of the task.
import { describe, expect, it } from 'vitest';
import { StreamHub, type StreamSource } from '../../src/stream/hub.js';
import { completedEvent as completed, stepEvent as step, stubSource } from '../helpers/stream-source.js';
import type { StreamItem } from '../../src/stream/items.js';
import type { HistoryEvent } from '../../src/history/events.js';

function storeSource(): { source: StreamSource; events: HistoryEvent[] } {
  const events: HistoryEvent[] = [];
  return {
    events,
    source: stubSource(events, { decoder: { value: (p) => p, failure: (f) => f, chunk: (p) => new TextDecoder().decode(p.data) } }),
  };
}
const chunk = (text: string) => ({ kind: 'chunk' as const, data: { metadata: {}, data: new TextEncoder().encode(text) } });
const tick = () => new Promise((r) => setImmediate(r));

/** Whether the hub still keeps `taskId`'s live items once `maxTasks` (1) other tasks produced output. */
async function keptAfterOthers(hub: StreamHub, taskId: string, from?: string): Promise<boolean> {
  hub.output('other', 0, 1, 1, { kind: 'step-started', seq: 1, name: 'x' }, 0);
  const stop = new AbortController();
  const r = hub.read(taskId, { signal: stop.signal, ...(from ? { from } : {}) });
  const first = r.next();
  const got = await Promise.race([first, tick().then(tick).then(() => undefined)]);
  stop.abort();
  await r.return(undefined);
  return got !== undefined && !got.done;
}

describe('StreamHub reader', () => {
  it('hands out every item once, in offset order, however appends and output interleave with the reads', async () => {
    const { source, events } = storeSource();
    const hub = new StreamHub(source);
    const seen: StreamItem[] = [];
    const reading = (async () => {
      for await (const item of hub.read('t')) seen.push(item);
    })();
    let id = 0;
    let emitted = 0;
    // Bursts of different sizes between reads: several steps and chunks before the reader runs,
    // one at a time, and output produced while the reader is part way through a pass.
    for (const burst of [1, 3, 0, 7, 2, 1, 5]) {
      for (let b = 0; b < burst; b++) {
        id++;
        events.push(step(id));
        hub.appended('t', [step(id)]);
        for (let k = 1; k <= 3; k++) hub.output('t', id, 1, 1, chunk(String(++emitted)), id);
      }
      await tick();
      if (seen.length) hub.output('t', id, 1, 1, chunk(String(++emitted)), id);
    }
    events.push(completed(id + 1));
    hub.appended('t', [completed(id + 1)]);
    await reading;
    const offsets = seen.map((i) => i.offset);
    const key = (o: string) => o.split('.').map(Number);
    const sorted = [...offsets].sort((a, b) => key(a)[0]! - key(b)[0]! || (key(a)[1] ?? 0) - (key(b)[1] ?? 0));
    expect(offsets).toEqual(sorted);
    expect(new Set(offsets).size).toBe(offsets.length);
    const chunks = seen.filter((i) => i.kind === 'chunk');
    expect(chunks.map((i) => (i as { data: string }).data)).toEqual(Array.from({ length: emitted }, (_, k) => String(k + 1)));
    expect(seen.filter((i) => i.kind === 'step-completed').map((i) => i.offset)).toEqual(Array.from({ length: id }, (_, k) => String(k + 1)));
    expect(seen.at(-1)!.kind).toBe('task-completed');
  });

  it('next() calls made before anything arrives are answered in order, as a generator would', async () => {
    const { source } = storeSource();
    const hub = new StreamHub(source);
    const r = hub.read('t');
    const pending = [r.next(), r.next(), r.next()];
    await tick();
    for (let k = 1; k <= 3; k++) hub.output('t', 0, 1, 1, chunk(`0.${k}`), 0);
    const got = await Promise.all(pending);
    expect(got.map((g) => (g.done ? 'done' : g.value.offset))).toEqual(['0.1', '0.2', '0.3']);
    await r.return(undefined);
    expect(await r.next()).toEqual({ done: true, value: undefined });
  });

  it('a reader that breaks out early, one that returns while waiting and one that throws let go of the task', async () => {
    const { source } = storeSource();
    const hub = new StreamHub(source, { maxTasks: 1 });
    for (let k = 1; k <= 10; k++) hub.output('t', 0, 1, 1, chunk(`0.${k}`), 0);
    // Break after two of ten buffered items: the reader is released, so the task is no longer kept.
    let n = 0;
    for await (const _ of hub.read('t')) if (++n === 2) break;
    expect(await keptAfterOthers(hub, 't')).toBe(false);

    // Return while a next() waits: it ends when the pending read does (at the next output), and lets go.
    hub.output('u', 0, 1, 1, chunk('0.1'), 0);
    const waiting = hub.read('u');
    expect((await waiting.next()).value).toMatchObject({ offset: '0.1' });
    const pending = waiting.next();
    const returned = waiting.return(undefined);
    hub.output('u', 0, 1, 1, chunk('0.2'), 0);
    expect((await pending).value).toMatchObject({ offset: '0.2' });
    expect(await returned).toEqual({ done: true, value: undefined });
    expect(await waiting.next()).toEqual({ done: true, value: undefined });
    expect(await keptAfterOthers(hub, 'u')).toBe(false);

    // throw(): rejects with the error, and the reader is done.
    hub.output('v', 0, 1, 1, chunk('0.1'), 0);
    hub.output('v', 0, 1, 1, chunk('0.2'), 0);
    const thrown = hub.read('v');
    expect((await thrown.next()).value).toMatchObject({ offset: '0.1' });
    await expect(thrown.throw(new Error('stop'))).rejects.toThrow('stop');
    expect(await thrown.next()).toEqual({ done: true, value: undefined });
    expect(await keptAfterOthers(hub, 'v')).toBe(false);
  });

  it('a reader with its next() pending is kept; it lets go at task-completed without another next()', async () => {
    const { source, events } = storeSource();
    const hub = new StreamHub(source, { maxTasks: 1 });
    const r = hub.read('t');
    const first = r.next();
    await tick();
    hub.output('other', 0, 1, 1, { kind: 'step-started', seq: 1, name: 'x' }, 0);
    events.push(step(1), completed(2));
    hub.appended('t', [step(1), completed(2)]);
    expect((await first).value).toMatchObject({ kind: 'step-completed', offset: '1' });
    expect((await r.next()).value).toMatchObject({ kind: 'task-completed', offset: '2' });
    // Released at the last item: output to another task now drops t's (empty) log.
    hub.output('t', 2, 1, 1, chunk('2.1'), 2);
    expect(await keptAfterOthers(hub, 't', '2')).toBe(false);
    expect(await r.next()).toEqual({ done: true, value: undefined });
  });
});
