// Type-level tests of the public API: inference a user relies on without writing annotations.
import { describe, expectTypeOf, it } from 'vitest';
import { defineWorkflow, Engine, type TaskHandle, type TurnContext, type TurnResult, type Workflow } from '../src/index.js';

describe('public types', () => {
  it('defineWorkflow infers input, output and state; suspend() does not leak into the output type', () => {
    const wf = defineWorkflow({
      name: 'typed',
      kind: 'multi-turn',
      initialState: () => ({ count: 0 }),
      turn: async (ctx, text: string) => {
        expectTypeOf(ctx).toEqualTypeOf<TurnContext<string, { count: number }>>();
        ctx.state.count++;
        return text.length > 3 ? ctx.suspend('long', { n: text.length }) : { n: 0 };
      },
    });
    expectTypeOf(wf).toEqualTypeOf<Workflow<string, { n: number }, { count: number }>>();
  });

  it('engine.start returns a handle typed by the workflow', () => {
    const wf = defineWorkflow({ name: 'n', turn: (_ctx, x: number) => x * 2 });
    type Start = ReturnType<typeof Engine.prototype.start<number, number, unknown>>;
    expectTypeOf<Start>().toEqualTypeOf<Promise<TaskHandle<number, number>>>();
    expectTypeOf<Awaited<ReturnType<TaskHandle<number, number>['nextTurn']>>>().toEqualTypeOf<TurnResult<number>>();
    expectTypeOf<Awaited<ReturnType<TaskHandle<number, number>['result']>>>().toEqualTypeOf<number>();
    expectTypeOf(wf.kind).toEqualTypeOf<'one-shot' | 'multi-turn'>();
  });

  it('ctx.idempotencyKey takes an optional name and returns a string', () => {
    expectTypeOf<TurnContext['idempotencyKey']>().toEqualTypeOf<(name?: string) => string>();
  });

  it('step results keep the type of the function', () => {
    defineWorkflow({
      name: 's',
      turn: async (ctx) => {
        const r = await ctx.step('a', () => ({ ok: true as const }));
        expectTypeOf(r).toEqualTypeOf<{ ok: true }>();
        const taken = await ctx.takeInputs<string>();
        expectTypeOf(taken).toEqualTypeOf<string[]>();
      },
    });
  });
});
