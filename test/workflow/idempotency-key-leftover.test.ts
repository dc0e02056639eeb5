// Work a step's fn starts and leaves running (a fire-and-forget follow-up) keeps that step's
// idempotency key after the fn settled. Review finding (stop 25): 1327a24 turned the step scope
// off whenever no step fn ran (Node 20's hook-based AsyncLocalStorage is costly), and such work
// then read the key as code outside any step does, the key of the turn's NEXT call: step b's.
// A payment API would dedupe b's operation and drop it. Reverted; this test keeps it out.
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

it('work left running by step a never takes step b\'s idempotency key', async () => {
  const keys: Record<string, string> = {};
  const wf = defineWorkflow({
    name: 'leftover-key',
    turn: async (ctx) => {
      let leftover: Promise<void> | undefined;
      keys['a'] = await ctx.step('a', () => {
        // Fire-and-forget follow-up of step a (e.g. a confirmation call), started inside its fn.
        leftover = new Promise<void>((r) =>
          setTimeout(() => {
            keys['a-leftover'] = ctx.idempotencyKey();
            r();
          }, 20),
        );
        return ctx.idempotencyKey();
      });
      await leftover; // the follow-up runs while no step fn runs
      keys['b'] = await ctx.step('b', () => ctx.idempotencyKey());
      return 'ok';
    },
  });
  const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
  cleanups.push(() => engine.shutdown({ graceMs: 0 }));
  expect(await (await engine.start(wf, null)).result()).toBe('ok');
  expect(keys['a']).not.toBe(keys['b']);
  // The leftover of a must not collide with b (it kept a's key before 1327a24).
  expect(keys['a-leftover']).not.toBe(keys['b']);
});
