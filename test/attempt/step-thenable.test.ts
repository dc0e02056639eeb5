/**
 * A step's fn that returns a thenable (not a native promise): its `then` is read once, as the
 * Promises/A+ resolution procedure does (2.3.3.1), on the first try and on a retry. A getter with
 * side effects runs once; one whose value changes cannot make the step take another `then` than
 * the one it first saw.
 */
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';

const engines: Engine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
});

/** A thenable whose `then` getter counts its reads: the first read settles with 'first', any later one with 'later'. */
function thenable(): { value: Promise<string>; reads: () => number } {
  let reads = 0;
  const value = {
    get then() {
      const n = ++reads;
      return (resolve: (v: string) => void) => resolve(n === 1 ? 'first' : 'later');
    },
  } as unknown as Promise<string>; // a bare thenable, typed as StepFn's Promise<T>
  return { value, reads: () => reads };
}

it("a thenable a step returns has its then read once, on the first try and on a retry's", async () => {
  const once = thenable();
  const retried = thenable();
  const inTimeout = thenable();
  let tries = 0;
  const wf = defineWorkflow({
    name: 'thenables',
    turn: async (ctx) => {
      const a = await ctx.step('first-try', () => once.value);
      const b = await ctx.step(
        'retried',
        () => {
          if (++tries === 1) throw new Error('transient');
          return retried.value;
        },
        { retry: { maxAttempts: 2, initialIntervalMs: 1, maxIntervalMs: 1 } },
      );
      const c = await ctx.step('timeout', () => inTimeout.value, { timeoutMs: 60_000 });
      return [a, b, c];
    },
  });
  const engine = await Engine.open({ store: new MemoryHistoryStore(), logger: silentLogger, scanIntervalMs: 0, workflows: [wf] });
  engines.push(engine);
  expect(await (await engine.start(wf, null)).result()).toEqual(['first', 'first', 'first']);
  expect([once.reads(), retried.reads(), inTimeout.reads()]).toEqual([1, 1, 1]);
  expect(tries).toBe(2);
});
