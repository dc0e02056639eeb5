import { afterEach, describe, expect, it, vi } from 'vitest';
import { Batcher } from '../../src/store/batcher.js';

/** A batcher whose batches settle when the test says so; `batches` lists what each carried. */
function harness(maxInFlight: number, spillMs?: number) {
  const batches: string[][] = [];
  const settle: (() => void)[] = [];
  const b = new Batcher<string>(
    (entries) => {
      batches.push(entries);
      return new Promise<void>((resolve) => settle.push(resolve));
    },
    maxInFlight,
    spillMs,
  );
  return { b, batches, settle };
}

/** Lets the batcher's settle callbacks and next-tick flush run. */
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('Batcher', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('writes a lone submission at once when idle', () => {
    const { b, batches } = harness(2);
    b.submit('a');
    expect(batches).toEqual([['a']]);
  });

  it('with a batch out and a slot free, later submissions wait and go together (not one statement each)', async () => {
    const { b, batches, settle } = harness(2, 60_000);
    b.submit('a');
    b.submit('b');
    b.submit('c');
    // The second slot is free, but b did not go out alone.
    expect(batches).toEqual([['a']]);
    settle[0]!();
    await turn();
    b.submit('d');
    expect(batches).toEqual([['a'], ['b', 'c']]);
    settle[1]!();
    await turn();
    expect(batches).toEqual([['a'], ['b', 'c'], ['d']]);
    expect(b.batches).toBe(3);
    expect(b.entries).toBe(4);
  });

  it('sends what waited as a second batch spillMs after it queued when the first stays out (a row lock)', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const { b, batches, settle } = harness(2, 5);
    b.submit('a');
    b.submit('b');
    b.submit('c');
    vi.advanceTimersByTime(4);
    expect(batches).toEqual([['a']]);
    vi.advanceTimersByTime(1);
    expect(batches).toEqual([['a'], ['b', 'c']]);
    // Both slots out: the next waits for one to settle, whatever the time.
    b.submit('d');
    vi.advanceTimersByTime(100);
    expect(batches).toEqual([['a'], ['b', 'c']]);
    settle[1]!();
    await turn();
    expect(batches).toEqual([['a'], ['b', 'c'], ['d']]);
  });

  it('with one batch in flight at most, a queue never spills early', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const { b, batches, settle } = harness(1, 5);
    b.submit('a');
    b.submit('b');
    vi.advanceTimersByTime(100);
    expect(batches).toEqual([['a']]);
    settle[0]!();
    await turn();
    expect(batches).toEqual([['a'], ['b']]);
  });

  it('a batch written with nothing queued frees its slot before it settles; with a queue it keeps it', async () => {
    const written: (() => void)[] = [];
    const settle: (() => void)[] = [];
    const batches: string[][] = [];
    const b = new Batcher<string>((entries, w) => {
      batches.push(entries);
      written.push(w);
      return new Promise<void>((resolve) => settle.push(resolve));
    }, 1);
    b.submit('a');
    written[0]!();
    // Idle again before a settles: the next submission goes at once, and a claim would be granted.
    b.submit('b');
    expect(batches).toEqual([['a'], ['b']]);
    b.submit('c');
    written[1]!();
    // c waits behind b: b's slot stays taken until b settles, then c goes.
    expect(batches).toEqual([['a'], ['b']]);
    expect(b.claim()).toBe(false);
    settle[0]!();
    settle[1]!();
    await turn();
    expect(batches).toEqual([['a'], ['b'], ['c']]);
    written[2]!();
    settle[2]!();
    await turn();
    expect(b.claim()).toBe(true);
    b.submit('d');
    expect(batches.length).toBe(3);
    b.settled();
    await turn();
    expect(batches).toEqual([['a'], ['b'], ['c'], ['d']]);
    expect(b.batches).toBe(5);
    expect(b.entries).toBe(5);
  });
});
