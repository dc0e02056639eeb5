/**
 * src/runtime/task-cache.ts cached: the sync path of load for an entry already cached (a send or a
 * result wait awaits nothing then). It pins the entry as load does, until the next immediate,
 * so an eviction walk in between keeps it; an id not cached is undefined, and nothing is read.
 */
import { expect, it } from 'vitest';
import { TaskCache } from '../../src/runtime/task-cache.js';
import type { Runtime } from '../../src/runtime/runtime.js';

const immediate = () => new Promise((r) => setImmediate(r));

it('returns the cached entry pinned until the next immediate, and undefined for an id not cached', async () => {
  const cache = new TaskCache({ maxCached: 10 } as Runtime);
  expect(cache.cached('t')).toBeUndefined();
  const t = cache.createNew('t')!;
  await immediate();
  expect(t.busy).toBe(0);
  expect(cache.cached('t')).toBe(t);
  expect(t.busy).toBe(1);
  await immediate();
  expect(t.busy).toBe(0);
  expect(cache.cached('other')).toBeUndefined();
});
