import { afterEach, expect, it, vi } from 'vitest';
import { MAX_TIMEOUT_MS, systemClock } from '../../src/runtime/clock.js';

afterEach(() => {
  vi.useRealTimers();
});

const DAY = 24 * 60 * 60 * 1000;

it('a system-clock timer longer than 2^31-1 ms (~24.8 days) fires when due, not at once', () => {
  vi.useFakeTimers();
  const fired: number[] = [];
  const start = Date.now();
  systemClock.setTimer(() => fired.push(Date.now() - start), 30 * DAY);
  vi.advanceTimersByTime(1000);
  expect(fired).toEqual([]);
  vi.advanceTimersByTime(MAX_TIMEOUT_MS);
  expect(fired).toEqual([]);
  vi.advanceTimersByTime(30 * DAY - MAX_TIMEOUT_MS - 1000 - 1);
  expect(fired).toEqual([]);
  vi.advanceTimersByTime(1);
  expect(fired).toEqual([30 * DAY]);
});

it('cancelling a long system-clock timer after it re-armed stops it', () => {
  vi.useFakeTimers();
  let fired = false;
  const timer = systemClock.setTimer(() => (fired = true), 60 * DAY);
  vi.advanceTimersByTime(MAX_TIMEOUT_MS + 10);
  timer.cancel();
  vi.advanceTimersByTime(60 * DAY);
  expect(fired).toBe(false);
  expect(vi.getTimerCount()).toBe(0);
});

it('a short system-clock timer fires once after its delay', () => {
  vi.useFakeTimers();
  let count = 0;
  systemClock.setTimer(() => count++, 50);
  vi.advanceTimersByTime(49);
  expect(count).toBe(0);
  vi.advanceTimersByTime(1);
  expect(count).toBe(1);
  vi.advanceTimersByTime(1000);
  expect(count).toBe(1);
});
