/**
 * src/attempt/context.ts step: a step's fn gets the turn's AbortSignal whenever it could read an
 * argument. Only `() => …` and `async () => …` go without (an arrow has no `arguments` of its
 * own): a fn of length 0 that takes rest or default parameters, or reads `arguments`, still gets
 * it, and it is the signal that aborts when the turn is cancelled.
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

it('a fn of no declared parameters that can still read one gets the signal; () => … runs without it', async () => {
  let kept: AbortSignal | undefined;
  const wf = defineWorkflow({
    name: 'signals',
    kind: 'multi-turn',
    turn: async (ctx) => {
      const rest = await ctx.step('rest', (...args: unknown[]) => args[0] instanceof AbortSignal);
      const byDefault = await ctx.step('default', (s: unknown = 'none') => s instanceof AbortSignal);
      const viaArguments = await ctx.step('arguments', function (this: unknown) {
        // eslint-disable-next-line prefer-rest-params
        return arguments[0] instanceof AbortSignal;
      });
      const named = await ctx.step('named', (signal) => {
        kept = signal;
        return signal instanceof AbortSignal && !signal.aborted;
      });
      const none = await ctx.step('none', () => 1);
      const noneAsync = await ctx.step('none-async', async () => 2);
      return [rest, byDefault, viaArguments, named, none, noneAsync];
    },
  });
  const engine = await Engine.open({ store: new MemoryHistoryStore(), logger: silentLogger, scanIntervalMs: 0, workflows: [wf] });
  engines.push(engine);
  const h = await engine.start(wf, null);
  const r = await h.nextTurn();
  expect(r.status).toBe('completed');
  expect(r.output).toEqual([true, true, true, true, 1, 2]);
  expect(kept).toBeInstanceOf(AbortSignal);
});

it('a rest-parameter fn is handed the signal the turn\'s cancel aborts', async () => {
  let release!: () => void;
  const started = new Promise<void>((r) => (release = r));
  const wf = defineWorkflow({
    name: 'cancel-rest',
    turn: async (ctx) =>
      ctx.step('wait', (...args: unknown[]) => {
        const signal = args[0] as AbortSignal;
        release();
        return new Promise<string>((resolve) => signal.addEventListener('abort', () => resolve('aborted'), { once: true }));
      }),
  });
  const engine = await Engine.open({ store: new MemoryHistoryStore(), logger: silentLogger, scanIntervalMs: 0, workflows: [wf] });
  engines.push(engine);
  const h = await engine.start(wf, null);
  await started;
  await engine.cancel(h.taskId, 'stop');
  const r = await h.nextTurn();
  // The fn saw the abort and returned: the turn ends with what it returned.
  expect(r.output).toBe('aborted');
});
