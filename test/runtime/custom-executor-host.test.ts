/**
 * A user's own `Executor` (docs/architecture.md, "A new executor") gets a host it may spread,
 * copy or detach methods from, as a plain object of functions: the engine's own executors take
 * its class instance as is (attempt/host.ts, hostFor), any other executor a bound copy.
 */
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { InlineExecutor } from '../../src/executor/inline-executor.js';
import type { Executor } from '../../src/executor/executor.js';
import type { EmitItem, TurnHost } from '../../src/attempt/host.js';
import { defaultPayloadConverter as defaultConverter } from '../../src/history/payload.js';

const engines: Engine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
});

const wf = defineWorkflow({
  name: 'wrapped',
  turn: async (ctx, n: number) => {
    const a = await ctx.step('one', () => n + 1);
    ctx.emit(`token ${a}`);
    const b = await ctx.step('two', () => a * 2);
    return { a, b };
  },
});

it("a user's executor that spreads the host and detaches its methods runs the turn", async () => {
  const inner = new InlineExecutor(new Map([[wf.name, wf]]), defaultConverter);
  const emitted: EmitItem[] = [];
  let recorded = 0;
  const wrapping: Executor = {
    kind: 'inline',
    start: (spec, host) => {
      const { record, now } = host; // detached: called without `this`
      const wrapped: TurnHost = {
        ...host,
        now: () => now(),
        record: (call) => {
          recorded++;
          return record(call);
        },
        emit: (item, dropped) => {
          emitted.push(item);
          host.emit?.(item, dropped);
        },
      };
      return inner.start(spec, wrapped);
    },
    close: () => inner.close(),
  };
  const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [wf], executors: { inline: wrapping }, logger: silentLogger, scanIntervalMs: 0 });
  engines.push(engine);
  const h = await engine.start(wf, 4);
  expect(await h.result()).toEqual({ a: 5, b: 10 });
  expect(recorded).toBe(2);
  expect(emitted.map((i) => i.kind)).toEqual(['step-started', 'chunk', 'step-started']);
});

it('the engine hands its own executors the host as is and a copy to any other', async () => {
  const { hostFor } = await import('../../src/attempt/host.js');
  class Host {
    #n = 7;
    now(): number {
      return this.#n;
    }
  }
  const host = new Host() as unknown as TurnHost;
  expect(hostFor(new InlineExecutor(new Map([[wf.name, wf]]), defaultConverter), host)).toBe(host);
  const copy = hostFor({ kind: 'inline' }, host);
  expect(copy).not.toBe(host);
  const { now } = { ...copy };
  expect(now()).toBe(7);
  // A subclass of a built-in executor may override start() and copy the host: it gets the copy.
  class Sub extends InlineExecutor {}
  expect(hostFor(new Sub(new Map([[wf.name, wf]]), defaultConverter), host)).not.toBe(host);
});
