/**
 * PgStoreContext.serial (797ea13 made its tail one then() instead of catch() plus then()): a
 * task's writes run one after another in call order whatever each one's outcome, other tasks'
 * run beside them, and the per-task queue empties once its writes settle (no entry kept per task
 * ever written). No database: serial is plain promise plumbing.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PgStoreContext } from '../../src/store/postgres-context.js';

const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
beforeEach(() => {
  unhandled.length = 0;
  process.on('unhandledRejection', onUnhandled);
});
afterEach(() => {
  process.off('unhandledRejection', onUnhandled);
});

function deferred() {
  let resolve!: (v: string) => void;
  let reject!: (e: Error) => void;
  const promise = new Promise<string>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}

describe('PgStoreContext.serial', () => {
  it("runs a task's writes in call order, each after the last settled, a failure included; another task's beside them; then forgets the task", async () => {
    const ctx = new PgStoreContext({});
    const started: string[] = [];
    const d = [deferred(), deferred(), deferred()];
    const other = deferred();
    const outcomes = d.map((x, i) =>
      ctx
        .serial('a', () => {
          started.push(`a${i}`);
          return x.promise;
        })
        .then(
          (v) => v,
          (e: Error) => `failed: ${e.message}`,
        ),
    );
    const b = ctx.serial('b', () => {
      started.push('b0');
      return other.promise;
    });
    await new Promise((r) => setImmediate(r));
    expect(started).toEqual(['a0', 'b0']);
    d[0]!.reject(new Error('lost'));
    await new Promise((r) => setImmediate(r));
    expect(started).toEqual(['a0', 'b0', 'a1']);
    d[1]!.resolve('one');
    await new Promise((r) => setImmediate(r));
    expect(started).toEqual(['a0', 'b0', 'a1', 'a2']);
    d[2]!.resolve('two');
    other.resolve('b');
    expect(await Promise.all(outcomes)).toEqual(['failed: lost', 'one', 'two']);
    expect(await b).toBe('b');
    await new Promise((r) => setImmediate(r));
    expect(ctx.queues.size).toBe(0);
    expect(unhandled).toEqual([]);
  });

  it('a write queued after the last one settled but before its tail dropped itself still runs after it, and the queue empties after both', async () => {
    const ctx = new PgStoreContext({});
    const order: string[] = [];
    const first = ctx.serial('a', async () => void order.push('first'));
    // In the first's continuation: the tail may still be in the map.
    const second = first.then(() => ctx.serial('a', async () => void order.push('second')));
    await second;
    expect(order).toEqual(['first', 'second']);
    await new Promise((r) => setImmediate(r));
    expect(ctx.queues.size).toBe(0);
  });
});
