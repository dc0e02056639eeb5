/**
 * The notices of the PostgreSQL store (store/postgres-notifier.ts), without a server: one
 * notifying transaction at a time, at most one per interval; what commits meanwhile goes in the
 * next one, a task once with its latest id; the first after a quiet spell goes at once.
 */
import { afterEach, beforeEach, expect, it, vi } from 'vitest';
import { Notifier } from '../../src/store/postgres-notifier.js';

const ids = (text: string) => [...text.matchAll(/'(\d+:[^']*)'/g)].map((m) => m[1]).sort();

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
});
afterEach(() => {
  vi.useRealTimers();
});

function notifier(intervalMs: number) {
  const sent: string[] = [];
  const n = new Notifier(async () => ({ query: async (text: string) => void sent.push(text), release: () => undefined }), 'chan', intervalMs);
  return { n, sent };
}

it('sends the first notice at once and the next ones together, one interval after it', async () => {
  const { n, sent } = notifier(100);
  n.add('a', 1);
  await vi.advanceTimersByTimeAsync(0);
  expect(sent.map(ids)).toEqual([['1:a']]);
  n.add('b', 2);
  n.add('a', 3);
  n.add('a', 2); // an older id of a task already pending changes nothing
  await vi.advanceTimersByTimeAsync(99);
  expect(sent).toHaveLength(1);
  await vi.advanceTimersByTimeAsync(1);
  expect(sent.map(ids)).toEqual([['1:a'], ['2:b', '3:a']]);
  expect(sent[1]).toContain(`pg_notify('chan'`);
  // A quiet spell longer than the interval: the next notice goes at once again.
  await vi.advanceTimersByTimeAsync(500);
  n.add('c', 7);
  await vi.advanceTimersByTimeAsync(0);
  expect(sent.map(ids)[2]).toEqual(['7:c']);
  await n.drain();
  expect(n.sent).toBe(3);
});

it('a routine notice waits ten intervals for company; an urgent one or a drain sends it sooner', async () => {
  const { n, sent } = notifier(100);
  n.add('a', 1, true); // the first after a quiet spell: at once, routine or not
  await vi.advanceTimersByTimeAsync(0);
  n.add('a', 2, true);
  n.add('a', 3, true);
  await vi.advanceTimersByTimeAsync(999);
  expect(sent).toHaveLength(1);
  await vi.advanceTimersByTimeAsync(1);
  expect(sent.map(ids)).toEqual([['1:a'], ['3:a']]);
  // Routine notices waiting: an urgent one (a turn's end) goes one interval after the last send, with them.
  n.add('a', 4, true);
  await vi.advanceTimersByTimeAsync(30);
  n.add('b', 9);
  await vi.advanceTimersByTimeAsync(69);
  expect(sent).toHaveLength(2);
  await vi.advanceTimersByTimeAsync(1);
  expect(sent.map(ids)[2]).toEqual(['4:a', '9:b']);
  // A drain does not wait ten intervals.
  n.add('a', 5, true);
  const drained = n.drain();
  await vi.advanceTimersByTimeAsync(100);
  await drained;
  expect(sent.map(ids)[3]).toEqual(['5:a']);
});

it('with interval 0 sends each notice as soon as the one before it is out', async () => {
  const { n, sent } = notifier(0);
  n.add('a', 1);
  await vi.advanceTimersByTimeAsync(0);
  n.add('a', 2);
  await vi.advanceTimersByTimeAsync(0);
  expect(sent.map(ids)).toEqual([['1:a'], ['2:a']]);
});

it('drain waits for a notice held back by the interval', async () => {
  const { n, sent } = notifier(50);
  n.add('a', 1);
  await vi.advanceTimersByTimeAsync(0);
  n.add('b', 1);
  const drained = n.drain();
  await vi.advanceTimersByTimeAsync(50);
  await drained;
  expect(sent.map(ids)).toEqual([['1:a'], ['1:b']]);
});

it('the store refuses a noticeIntervalMs that is not a number of ms from 0 to 60000', async () => {
  const { createPostgresStore } = await import('../../src/store/postgres-store.js');
  for (const bad of [-1, Number.NaN, 60_001, '5' as unknown as number]) {
    expect(() => createPostgresStore({ connectionString: 'postgres://u@localhost/db', noticeIntervalMs: bad })).toThrow(/noticeIntervalMs .* must be a number of ms from 0 to 60000/);
  }
  expect(() => createPostgresStore({ connectionString: 'postgres://u@localhost/db', noticeIntervalMs: 0 })).not.toThrow();
});
