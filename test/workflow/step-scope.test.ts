import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { stepScopeOn } from '../../src/attempt/context.js';

// Its own file: a step fn that never settles (another test's "crash") keeps the scope on for good.
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

describe('the step scope (ctx.idempotencyKey inside step fns)', () => {
  it('is on only while a step fn runs (its async hooks cost every promise of the engine otherwise)', async () => {
    const seen: Record<string, boolean[]> = {};
    const note = (label: string) => void (seen[label] ??= []).push(stepScopeOn());
    const keys: string[] = [];
    const wf = defineWorkflow({
      name: 'scope-toggle',
      turn: async (ctx) => {
        await ctx.step('sync', () => note('in-sync-fn'));
        note('between');
        await ctx.step('async', async () => {
          await new Promise((r) => setTimeout(r, 1));
          note('in-async-fn');
          keys.push(ctx.idempotencyKey());
        });
        note('between');
        keys.push(ctx.idempotencyKey()); // outside any step: the next call's (p1's)
        await Promise.all([
          ctx.step('p1', async () => {
            await new Promise((r) => setTimeout(r, 2));
            keys.push(ctx.idempotencyKey()); // p2 has ended by now: still p1's
          }),
          ctx.step('p2', () => note('in-parallel-fn')),
        ]);
        note('between');
        return 'done';
      },
    });
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    cleanups.push(() => engine.shutdown({ graceMs: 0 }));
    expect(await (await engine.start(wf, null)).result()).toBe('done');
    expect(seen).toEqual({ 'in-sync-fn': [true], 'in-async-fn': [true], 'in-parallel-fn': [true], between: [false, false, false] });
    expect(stepScopeOn()).toBe(false);
    expect(keys[2]).toBe(keys[1]);
    expect(keys[0]).not.toBe(keys[1]);
  });
});
