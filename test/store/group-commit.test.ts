import { describe, expect, it } from 'vitest';
import { GroupCommitter, type BatchOp } from '../../src/store/group-commit.js';

/** A batch writer the test settles by hand, so it chooses when each write completes. */
function controlledWriter() {
  const calls: { ops: BatchOp[]; sync: boolean; resolve: () => void; reject: (e: Error) => void }[] = [];
  const write = (ops: BatchOp[], sync: boolean) =>
    new Promise<void>((resolve, reject) => {
      calls.push({ ops, sync, resolve, reject });
    });
  return { calls, write };
}

const put = (k: string): BatchOp => ({ type: 'put', key: Buffer.from(k), value: Buffer.alloc(0) });
const keys = (ops: BatchOp[]) => ops.map((o) => o.key.toString());
const settled = <T>(p: Promise<T>) => p.then(() => 'ok', (e: Error) => e.message);
/** Lets pending ticks and microtasks run (the next batch starts on the tick after a settle). */
const turn = () => new Promise<void>((r) => setImmediate(r));

describe('GroupCommitter', () => {
  it('writes at once when idle, then merges everything queued meanwhile into one batch, in order', async () => {
    const w = controlledWriter();
    const failed: string[][] = [];
    const gc = new GroupCommitter(w.write, (t) => failed.push([...t]));
    const committed: string[] = [];
    const p1 = gc.submit('a', [put('a1')], false, () => committed.push('a1'));
    expect(w.calls).toHaveLength(1);
    const p2 = gc.submit('b', [put('b1')], false, () => committed.push('b1'));
    const p3 = gc.submit('a', [put('a2'), put('a3')], true, () => committed.push('a2'));
    expect(w.calls).toHaveLength(1);
    w.calls[0]!.resolve();
    await p1;
    await turn();
    expect(w.calls).toHaveLength(2);
    expect(keys(w.calls[1]!.ops)).toEqual(['b1', 'a2', 'a3']);
    // One durable member makes the merged batch durable.
    expect(w.calls[1]!.sync).toBe(true);
    w.calls[1]!.resolve();
    await Promise.all([p2, p3]);
    expect(committed).toEqual(['a1', 'b1', 'a2']);
    expect(failed).toEqual([]);
    expect({ writes: gc.writes, batches: gc.batches }).toEqual({ writes: 3, batches: 2 });
  });

  it('a failed batch fails all its writes and the queued writes of the same tasks; others proceed', async () => {
    const w = controlledWriter();
    const failed: string[][] = [];
    const gc = new GroupCommitter(w.write, (t) => failed.push([...t].sort()));
    const committed: string[] = [];
    const p1 = gc.submit('a', [put('a1')], true, () => committed.push('a1'));
    const p2 = gc.submit('a', [put('a2')], true, () => committed.push('a2'));
    const p3 = gc.submit('b', [put('b1')], true, () => committed.push('b1'));
    w.calls[0]!.reject(new Error('disk full'));
    expect(await settled(p1)).toBe('disk full');
    expect(await settled(p2)).toBe('disk full');
    expect(failed).toEqual([['a']]);
    await turn();
    expect(w.calls).toHaveLength(2);
    expect(keys(w.calls[1]!.ops)).toEqual(['b1']);
    w.calls[1]!.resolve();
    expect(await settled(p3)).toBe('ok');
    expect(committed).toEqual(['b1']);
  });

  it('writes submitted by callers resumed from a finished batch join one batch, not one alone', async () => {
    const w = controlledWriter();
    const gc = new GroupCommitter(w.write, () => undefined);
    // Ten "tasks" that each append again as soon as their previous append resolves.
    const chains = Array.from({ length: 10 }, (_, i) =>
      gc.submit(`t${i}`, [put(`t${i}-1`)], true, () => undefined).then(() => gc.submit(`t${i}`, [put(`t${i}-2`)], true, () => undefined)),
    );
    expect(w.calls.map((c) => c.ops.length)).toEqual([1]);
    w.calls[0]!.resolve();
    await turn();
    // t0's second write joins t1..t9's first ones (starting the queued nine at once would leave it alone).
    expect(w.calls.map((c) => c.ops.length)).toEqual([1, 10]);
    w.calls[1]!.resolve();
    await turn();
    expect(w.calls.map((c) => c.ops.length)).toEqual([1, 10, 9]);
    w.calls[2]!.resolve();
    await Promise.all(chains);
  });

  it("a lone writer's next append goes out in its own continuation, not on the next tick", async () => {
    const w = controlledWriter();
    const gc = new GroupCommitter(w.write, () => undefined);
    const p1 = gc.submit('a', [put('a1')], true, () => undefined, true);
    // Queued while a1 is written, not an append: it waits, and rides with a's next append.
    const lease = gc.submit('b', [put('b-lease')], true, () => undefined);
    w.calls[0]!.resolve();
    await p1;
    expect(w.calls).toHaveLength(1); // the tick after the settle has not run yet
    const snapshot = gc.submit('a', [put('a-snap')], true, () => undefined); // not an append: queued
    expect(w.calls).toHaveLength(1);
    const p2 = gc.submit('a', [put('a2')], true, () => undefined, true);
    expect(keys(w.calls[1]!.ops)).toEqual(['b-lease', 'a-snap', 'a2']); // at once, in submission order
    // Another append in the same tick waits for that batch: one batch in flight at a time.
    const p3 = gc.submit('c', [put('c1')], true, () => undefined, true);
    await turn();
    expect(w.calls).toHaveLength(2);
    w.calls[1]!.resolve();
    await Promise.all([lease, snapshot, p2]);
    await turn();
    expect(keys(w.calls[2]!.ops)).toEqual(['c1']);
    w.calls[2]!.resolve();
    await p3;
    await gc.drain();
    expect({ writes: gc.writes, batches: gc.batches }).toEqual({ writes: 5, batches: 3 });
  });

  it("another task's append in that tick waits for the tick; the lone writer's takes it along", async () => {
    const w = controlledWriter();
    const gc = new GroupCommitter(w.write, () => undefined);
    const p1 = gc.submit('a', [put('a1')], true, () => undefined, true);
    w.calls[0]!.resolve();
    await p1;
    const b = gc.submit('b', [put('b1')], true, () => undefined, true);
    expect(w.calls).toHaveLength(1);
    const p2 = gc.submit('a', [put('a2')], true, () => undefined, true);
    expect(keys(w.calls[1]!.ops)).toEqual(['b1', 'a2']);
    w.calls[1]!.resolve();
    await Promise.all([b, p2]);
  });

  it("a new task's first append after a lone batch goes out at once, and the lone writer's waits for it", async () => {
    const w = controlledWriter();
    const gc = new GroupCommitter(w.write, () => undefined);
    const p1 = gc.submit('a', [put('a1')], true, () => undefined, true);
    w.calls[0]!.resolve();
    await p1;
    // The caller resumed by a's batch starts task n: nothing else to wait for in this tick.
    const n = gc.submit('n', [put('n1')], true, () => undefined, 'new');
    expect(keys(w.calls[1]!.ops)).toEqual(['n1']);
    // One batch in flight: a's next append (or another new task's) waits for n's.
    const p2 = gc.submit('a', [put('a2')], true, () => undefined, true);
    const m = gc.submit('m', [put('m1')], true, () => undefined, 'new');
    expect(w.calls).toHaveLength(2);
    w.calls[1]!.resolve();
    await n;
    await turn();
    expect(keys(w.calls[2]!.ops)).toEqual(['a2', 'm1']);
    w.calls[2]!.resolve();
    await Promise.all([p2, m]);
  });

  it("after a batch of several writes, a new task's first append still waits for the tick", async () => {
    const w = controlledWriter();
    const gc = new GroupCommitter(w.write, () => undefined);
    const first = gc.submit('a', [put('a1')], true, () => undefined, true);
    const queued = ['b', 'c'].map((t) => gc.submit(t, [put(`${t}1`)], true, () => undefined, true));
    w.calls[0]!.resolve();
    await first;
    await turn();
    expect(keys(w.calls[1]!.ops)).toEqual(['b1', 'c1']);
    w.calls[1]!.resolve();
    await Promise.all(queued);
    // Two callers were resumed: a new task's create waits for the tick, as their appends would.
    const n = gc.submit('n', [put('n1')], true, () => undefined, 'new');
    expect(w.calls).toHaveLength(2);
    await turn();
    expect(keys(w.calls[2]!.ops)).toEqual(['n1']);
    w.calls[2]!.resolve();
    await n;
  });

  it('after a batch of several writes, their next appends still wait for the tick and go out together', async () => {
    const w = controlledWriter();
    const gc = new GroupCommitter(w.write, () => undefined);
    const first = gc.submit('a', [put('a1')], true, () => undefined, true);
    const queued = ['b', 'c'].map((t) => gc.submit(t, [put(`${t}1`)], true, () => undefined, true));
    w.calls[0]!.resolve();
    await first;
    // a's batch was lone: a's next append takes b1 and c1 along at once.
    const again = ['a', 'b', 'c'].map((t, i) => (i === 0 ? gc.submit(t, [put(`${t}2`)], true, () => undefined, true) : queued[i - 1]!.then(() => gc.submit(t, [put(`${t}2`)], true, () => undefined, true))));
    expect(keys(w.calls[1]!.ops)).toEqual(['b1', 'c1', 'a2']);
    w.calls[1]!.resolve();
    await turn();
    // That batch had three writes: b2 and c2 joined one batch on the tick.
    expect(keys(w.calls[2]!.ops)).toEqual(['b2', 'c2']);
    w.calls[2]!.resolve();
    await Promise.all(again);
  });

  it('drain waits for queued batches', async () => {
    const w = controlledWriter();
    const gc = new GroupCommitter(w.write, () => undefined);
    await gc.drain();
    void gc.submit('a', [put('a1')], true, () => undefined);
    void gc.submit('a', [put('a2')], true, () => undefined);
    let drained = false;
    const d = gc.drain().then(() => {
      drained = true;
    });
    w.calls[0]!.resolve();
    await new Promise((r) => setImmediate(r));
    expect(drained).toBe(false);
    w.calls[1]!.resolve();
    await d;
    expect(drained).toBe(true);
  });

  it("drain() between a lone batch's settle and its tick waits for the lone writer's next batch, which went out at once", async () => {
    const w = controlledWriter();
    const gc = new GroupCommitter(w.write, () => undefined);
    const p1 = gc.submit('a', [put('a1')], true, () => undefined, true);
    w.calls[0]!.resolve();
    await p1;
    let drained = false;
    const d = gc.drain().then(() => (drained = true));
    const p2 = gc.submit('a', [put('a2')], true, () => undefined, true);
    expect(w.calls).toHaveLength(2);
    await turn();
    await turn();
    expect(drained).toBe(false);
    w.calls[1]!.resolve();
    await p2;
    await d;
    expect(drained).toBe(true);
  });

  it('after a lone batch that failed, the writer\'s next append waits for the tick (its head was dropped), and the failure took its queued writes', async () => {
    const w = controlledWriter();
    const dropped: string[][] = [];
    const gc = new GroupCommitter(w.write, (tasks) => void dropped.push([...tasks]));
    const p1 = gc.submit('a', [put('a1')], true, () => undefined, true);
    const queuedA = gc.submit('a', [put('a-snap')], true, () => undefined);
    const queuedB = gc.submit('b', [put('b1')], true, () => undefined, true);
    w.calls[0]!.reject(new Error('disk full'));
    expect(await settled(p1)).toBe('disk full');
    expect(await settled(queuedA)).toBe('disk full');
    expect(dropped).toEqual([['a']]);
    const p2 = gc.submit('a', [put('a2')], true, () => undefined, true);
    expect(w.calls).toHaveLength(1); // no fast path after a failure
    await turn();
    expect(keys(w.calls[1]!.ops)).toEqual(['b1', 'a2']);
    w.calls[1]!.resolve();
    expect(await Promise.all([settled(queuedB), settled(p2)])).toEqual(['ok', 'ok']);
  });

  it('any interleaving of appends, new tasks\' first appends, other writes, settles, failures and ticks: one batch in flight, every write in one batch, in submission order per task, each settled once', async () => {
    // A small seeded generator: the same cases on every run.
    let seed = 12345;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    for (let round = 0; round < 200; round++) {
      const w = controlledWriter();
      let inFlight = 0;
      let maxInFlight = 0;
      const write = (ops: BatchOp[], sync: boolean) => {
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        return w.write(ops, sync).finally(() => inFlight--);
      };
      const gc2 = new GroupCommitter(write, () => undefined);
      const submitted = new Map<string, string[]>();
      const outcomes = new Map<string, number>();
      const all: Promise<unknown>[] = [];
      let next = 0;
      // `'new'`: a new task's first append (AppendOptions.fresh), which may go out at once after a lone batch.
      const submit = (task: string, append: boolean | 'new') => {
        const k = `${task}:${next++}`;
        submitted.set(task, [...(submitted.get(task) ?? []), k]);
        outcomes.set(k, 0);
        const p = gc2.submit(task, [put(k)], true, () => undefined, append);
        all.push(
          p.then(
            () => {
              outcomes.set(k, outcomes.get(k)! + 1);
              // A resumed caller often appends again at once (a sequential task), sometimes after
              // a write that is not an append (a lease renewal, a snapshot) of its own or another task.
              if (append && rand(2) === 0 && next < 60) {
                if (rand(3) === 0) submit(`t${rand(3)}`, false);
                submit(task, true);
              }
            },
            () => outcomes.set(k, outcomes.get(k)! + 1),
          ),
        );
      };
      let settledCalls = 0;
      for (let op = 0; op < 40; op++) {
        const r = rand(10);
        if (r < 5) submit(`t${rand(3)}`, rand(4) === 0 ? false : rand(3) === 0 ? 'new' : true);
        else if (r < 8 && settledCalls < w.calls.length) {
          const c = w.calls[settledCalls++]!;
          if (rand(8) === 0) c.reject(new Error('write failed'));
          else c.resolve();
          await Promise.resolve();
          await Promise.resolve();
        } else await turn();
      }
      // Settle everything still pending.
      for (let guard = 0; guard < 200 && (settledCalls < w.calls.length || [...outcomes.values()].some((n) => n === 0)); guard++) {
        if (settledCalls < w.calls.length) w.calls[settledCalls++]!.resolve();
        await turn();
      }
      await Promise.all(all);
      await gc2.drain();
      expect(maxInFlight).toBe(1);
      expect([...outcomes.values()].every((n) => n === 1)).toBe(true);
      // Every write went out in exactly one batch (or was failed with its task's queue), and a
      // task's writes went out in the order they were submitted.
      const written = w.calls.flatMap((c) => keys(c.ops));
      expect(new Set(written).size).toBe(written.length);
      for (const [task, ks] of submitted) {
        const order = written.filter((k) => k.startsWith(`${task}:`));
        expect(order).toEqual(ks.filter((k) => order.includes(k)));
      }
    }
  });
});
