// Type-level tests of the public API: inference a user relies on without writing annotations.
import { describe, expectTypeOf, it } from 'vitest';
import { defineWorkflow, Engine, type JsonValue, type TaskHandle, type TurnContext, type TurnResult, type Workflow } from '../src/index.js';

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

// Payload types (issue #10 item 6): JSON data only, checked at compile time; `payloads: 'custom'` opts out.
describe('payload types', () => {
  interface Reply {
    text: string;
    score?: number;
    tags: string[];
  }

  it('accepts interfaces without index signatures, optional fields, arrays in state, void and bytes', () => {
    const wf = defineWorkflow({
      name: 'json-ok',
      kind: 'multi-turn',
      initialState: () => ({ history: [] as Reply[], seen: [] as unknown[] }),
      turn: async (ctx, input: Reply) => {
        const reply = await ctx.step('model', async (): Promise<Reply> => ({ text: input.text, tags: [] }));
        expectTypeOf(reply).toEqualTypeOf<Reply>();
        await ctx.step('side-effect', async () => {});
        const bytes = await ctx.step('bytes', () => new Uint8Array(2));
        expectTypeOf(bytes).toExtend<Uint8Array>();
        const parsed = await ctx.step('untyped', () => JSON.parse('{}') as unknown);
        expectTypeOf(parsed).toEqualTypeOf<unknown>();
        await ctx.checkpoint({ partial: reply });
        ctx.state.history.push(reply);
        return ctx.suspend('more', reply);
      },
    });
    expectTypeOf(wf).toEqualTypeOf<Workflow<Reply, Reply, { history: Reply[]; seen: unknown[] }>>();
  });

  it('takes JsonValue, and generic helpers bounded by JsonValue', () => {
    async function tool<T extends JsonValue>(ctx: TurnContext, name: string, value: T): Promise<T> {
      const r = await ctx.step(name, () => ({ value, at: 1 }));
      return r.value;
    }
    defineWorkflow({ name: 'generic', turn: async (ctx, v: JsonValue) => tool(ctx, 't', v) });
  });

  it('rejects non-JSON step results, checkpoints, inputs, outputs and state', () => {
    defineWorkflow({
      name: 'json-bad',
      turn: async (ctx) => {
        // @ts-expect-error a Map is not JSON (it would be stored as {})
        await ctx.step('map', () => new Map<string, number>());
        // @ts-expect-error a Date inside a result is not JSON (it would come back a string)
        await ctx.step('date', () => ({ at: new Date() }));
        // @ts-expect-error BigInt
        await ctx.step('big', () => ({ n: 1n }));
        // @ts-expect-error undefined inside an array (it would come back null)
        await ctx.step('holes', () => [1, undefined]);
        // @ts-expect-error a Set deep inside
        await ctx.checkpoint({ a: [{ b: new Set<number>() }] });
        return 1;
      },
    });
    // @ts-expect-error the input type is not JSON
    defineWorkflow({ name: 'bad-input', turn: (_ctx, m: Map<string, string>) => m.size });
    // @ts-expect-error the output type is not JSON
    defineWorkflow({ name: 'bad-output', turn: () => ({ at: new Date() }) });
    // @ts-expect-error the state type is not JSON
    defineWorkflow({ name: 'bad-state', initialState: () => ({ seen: new Set<string>() }), turn: () => 1 });
    // engine.start takes the workflow's (checked) input type.
    const typed = defineWorkflow({ name: 'typed-input', turn: (_ctx, s: { at: string }) => s.at });
    // @ts-expect-error a Date where the workflow takes a string
    const start = (e: Engine) => e.start(typed, { at: new Date() });
    void start;
    expectTypeOf(typed).toEqualTypeOf<Workflow<{ at: string }, string, unknown>>();
  });

  it("lifts every check with payloads: 'custom' (for an engine with a payloadConverter)", () => {
    const wf = defineWorkflow({
      name: 'custom',
      payloads: 'custom',
      initialState: () => ({ seen: new Set<string>() }),
      turn: async (ctx, m: Map<string, number>) => {
        const prices = await ctx.step('prices', () => new Map([['eur', 1]]));
        await ctx.checkpoint(new Date());
        expectTypeOf(prices).toEqualTypeOf<Map<string, number>>();
        return { total: m.size + prices.size, at: new Date() };
      },
    });
    expectTypeOf(wf).toEqualTypeOf<Workflow<Map<string, number>, { total: number; at: Date }, { seen: Set<string> }, 'custom'>>();
  });
});
