/**
 * src/runtime/task-cache.ts withLock: holders of one task's lock run one at a time in call order;
 * a hold that fails rejects its caller only; `busy` counts queued and holding operations and has
 * dropped by the time a caller resumes (an idle entry may then be evicted).
 */
import { expect, it } from 'vitest';
import { TaskCache, TaskEntry } from '../../src/runtime/task-cache.js';
import type { Runtime } from '../../src/runtime/runtime.js';

it('holders run one at a time in order, a failed hold does not block the next, busy drops before the caller resumes', async () => {
  const cache = new TaskCache({} as Runtime);
  const t = new TaskEntry('t');
  const order: string[] = [];
  let holding = 0;
  const hold = (name: string, fail = false) =>
    cache.withLock(t, async () => {
      expect(++holding).toBe(1);
      order.push(`${name} in`);
      await new Promise((r) => setTimeout(r, 5));
      order.push(`${name} out`);
      holding--;
      if (fail) throw new Error(`${name} failed`);
      return name;
    });
  const a = hold('a');
  const b = hold('b', true);
  const c = hold('c');
  expect(t.busy).toBe(3);
  expect(await a).toBe('a');
  expect(t.busy).toBe(2);
  await expect(b).rejects.toThrow('b failed');
  expect(t.busy).toBe(1);
  expect(await c).toBe('c');
  expect(t.busy).toBe(0);
  expect(order).toEqual(['a in', 'a out', 'b in', 'b out', 'c in', 'c out']);
});
