// The stream hub on its own (no engine): which tasks' live items it keeps beyond `maxTasks`, and
// the ring of one task's items. Engine-level streaming is in stream.test.ts.
import { describe, expect, it } from 'vitest';
import { StreamHub, type StreamSource } from '../../src/stream/hub.js';
import type { StreamItem } from '../../src/stream/items.js';

const source: StreamSource = {
  readEvents: async () => [],
  writesHere: () => true,
  decoder: { value: (p) => p, failure: (f) => f, chunk: (p) => p },
  setTimer: (fn, ms) => {
    const t = setTimeout(fn, ms);
    return { cancel: () => clearTimeout(t) };
  },
};

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
