/**
 * src/runtime/task-cache.ts withLock: holders of one task's lock run one at a time in call order;
 * a hold that fails rejects its caller only; `busy` counts queued and holding operations and has
 * dropped by the time a caller resumes (an idle entry may then be evicted).
 */
import { expect, it } from 'vitest';
import fc from 'fast-check';
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

it('a holder that throws synchronously, or returns a plain value, holds and releases the lock like any other; each caller resumes with the count already down', async () => {
  const cache = new TaskCache({} as Runtime);
  const t = new TaskEntry('t');
  const seen: string[] = [];
  const sync = cache.withLock(t, (() => {
    seen.push(`sync in ${t.busy}`);
    throw new Error('sync throw');
  }) as never);
  const plain = cache.withLock(t, (() => {
    seen.push(`plain in ${t.busy}`);
    return 'plain';
  }) as never);
  const after = cache.withLock(t, async () => {
    seen.push(`after in ${t.busy}`);
    return 'after';
  });
  // Reactions attached at once, as a caller's await is: each runs after its hold's release.
  sync.catch(() => seen.push(`sync caller ${t.busy}`));
  void plain.then(() => seen.push(`plain caller ${t.busy}`));
  void after.then(() => seen.push(`after caller ${t.busy}`));
  expect(t.busy).toBe(3);
  await expect(sync).rejects.toThrow('sync throw');
  expect(await plain).toBe('plain');
  expect(await after).toBe('after');
  expect(seen).toEqual(['sync in 3', 'sync caller 2', 'plain in 2', 'plain caller 1', 'after in 1', 'after caller 0']);
});

it('withLockNow runs a free lock\'s holder at once and queues behind a held one; its synchronous part cannot lock the task again; the lock is free again after the last release', async () => {
  const cache = new TaskCache({} as Runtime);
  const t = new TaskEntry('t');
  const order: string[] = [];
  let holding = 0;
  const hold = (name: string, now: boolean) =>
    (now ? cache.withLockNow.bind(cache) : cache.withLock.bind(cache))(t, async () => {
      expect(++holding).toBe(1);
      order.push(`${name} in`);
      await new Promise((r) => setTimeout(r, 5));
      order.push(`${name} out`);
      holding--;
      return name;
    });
  // Free: the holder's synchronous part has run when withLockNow returns.
  const a = hold('a', true);
  expect(order).toEqual(['a in']);
  // Held: withLockNow queues as withLock does, in call order.
  const b = hold('b', false);
  const c = hold('c', true);
  expect(order).toEqual(['a in']);
  expect(t.busy).toBe(3);
  expect(await Promise.all([a, b, c])).toEqual(['a', 'b', 'c']);
  expect(order).toEqual(['a in', 'a out', 'b in', 'b out', 'c in', 'c out']);
  expect(t.busy).toBe(0);
  // Free again: at once, and a plain value or a synchronous throw hold and release like a promise.
  const plain = cache.withLockNow(t, (() => 'plain') as never);
  expect(t.busy).toBe(1);
  expect(await plain).toBe('plain');
  await expect(cache.withLockNow(t, () => {
    throw new Error('sync throw');
  })).rejects.toThrow('sync throw');
  expect(t.busy).toBe(0);
  // Locking the task again inside the synchronous part would run two holders at once: refused.
  await expect(cache.withLockNow(t, async () => cache.withLock(t, async () => 'nested'))).rejects.toThrow(/inside its own lock/);
  expect(await cache.withLockNow(t, async () => 'after')).toBe('after');
  expect(t.busy).toBe(0);
});

/**
 * Property: whatever mix of withLock and withLockNow holders (synchronous throws, plain values,
 * holds of a few microtasks or a macrotask, rejections), issued in bursts and from the reactions of
 * earlier holds (a caller resuming after its hold and taking the lock again at once, as a step's
 * next record does), holders never overlap, enter in call order, each caller gets its own outcome,
 * and the lock ends free (a later withLockNow runs its holder synchronously) with busy back to 0.
 */
it('withLock and withLockNow holders never overlap and enter in call order, whatever they do (property)', async () => {
  type Body = { kind: 'throw' } | { kind: 'plain' } | { kind: 'micro'; n: number; fail: boolean } | { kind: 'macro'; fail: boolean };
  type Op = { now: boolean; body: Body; then?: Op | undefined; gap: number };
  const body: fc.Arbitrary<Body> = fc.oneof(
    fc.constant<Body>({ kind: 'throw' }),
    fc.constant<Body>({ kind: 'plain' }),
    fc.record({ kind: fc.constant('micro' as const), n: fc.integer({ min: 0, max: 4 }), fail: fc.boolean() }),
    fc.record({ kind: fc.constant('macro' as const), fail: fc.boolean() }),
  );
  const leaf = fc.record({ now: fc.boolean(), body, gap: fc.integer({ min: 0, max: 3 }) });
  const op: fc.Arbitrary<Op> = fc.record({ now: fc.boolean(), body, gap: fc.integer({ min: 0, max: 3 }), then: fc.option(leaf, { nil: undefined }) });
  await fc.assert(
    fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 12 }), async (ops) => {
      const cache = new TaskCache({} as Runtime);
      const t = new TaskEntry('t');
      let holding = 0;
      let overlap = false;
      const called: number[] = [];
      const entered: number[] = [];
      const settled: Promise<unknown>[] = [];
      let next = 0;
      const issue = (o: Op): void => {
        const id = next++;
        called.push(id);
        const fn = (): unknown => {
          if (++holding > 1) overlap = true;
          entered.push(id);
          const leave = (): void => void holding--;
          switch (o.body.kind) {
            case 'throw':
              leave();
              throw new Error(`throw ${id}`);
            case 'plain':
              leave();
              return id;
            case 'micro': {
              const { n, fail } = o.body;
              let p: Promise<unknown> = Promise.resolve();
              for (let i = 0; i < n; i++) p = p.then(() => undefined);
              return p.then(() => {
                leave();
                if (fail) throw new Error(`fail ${id}`);
                return id;
              });
            }
            case 'macro': {
              const { fail } = o.body;
              return new Promise((r) => setImmediate(r)).then(() => {
                leave();
                if (fail) throw new Error(`fail ${id}`);
                return id;
              });
            }
          }
        };
        const p = (o.now ? cache.withLockNow(t, fn as never) : cache.withLock(t, fn as never)) as Promise<unknown>;
        // The caller resumes and, for a follow-up, locks again at once (a step's next record).
        const own = p.then(
          (v: unknown) => {
            if (v !== id) throw new Error(`caller ${id} got ${String(v)}`);
            if (o.then) issue(o.then);
          },
          (err: Error) => {
            if (!err.message.endsWith(` ${id}`)) throw err;
            if (o.then) issue(o.then);
          },
        );
        settled.push(own);
      };
      for (const o of ops) {
        issue(o);
        for (let i = 0; i < o.gap; i++) await Promise.resolve();
      }
      // Follow-ups are issued from reactions: wait until nothing more is added.
      for (let seen = -1; seen !== settled.length; ) {
        seen = settled.length;
        await Promise.all(settled);
        await new Promise((r) => setImmediate(r));
      }
      expect(overlap).toBe(false);
      expect(entered).toEqual(called);
      expect(t.busy).toBe(0);
      let ranAtOnce = false;
      const last = cache.withLockNow(t, (async () => void (ranAtOnce = true)) as never);
      expect(ranAtOnce).toBe(true);
      await last;
    }),
    { numRuns: 300 },
  );
});
