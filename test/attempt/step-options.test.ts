/**
 * A step's options that throw when read (a getter, a proxy) fail that step and nothing else: no
 * seq and record slot is left taken, so the handler's next step is recorded and the turn ends
 * (before: the slot stayed unrecorded and every later record waited for it until the turn timed out).
 */
import { afterEach, expect, it } from 'vitest';
import { silentLogger } from '../../src/logger.js';
import { Engine } from '../../src/runtime/engine.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import type { StepOptions } from '../../src/workflow/context.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

const throwingGetter = (): StepOptions =>
  ({
    get retry(): never {
      throw new Error('bad retry option');
    },
  }) as StepOptions;
// Read fine, but spreading it (where a try may be retried) throws.
const throwingSpread = (): StepOptions => ({ retry: new Proxy({}, { ownKeys: () => { throw new Error('bad retry option'); } }) }) as StepOptions;

for (const [label, options, fn] of [
  ['a getter of the options', throwingGetter, () => 'plain'],
  ['the retry options when spread (an async fn)', throwingSpread, async () => 'async'],
] as const) {
  it(`${label} throws: that step fails, the next one is recorded and the turn ends`, async () => {
    const wf = defineWorkflow({
      name: 'opts',
      turn: async (ctx) => {
        const first = await ctx.step('first', fn, options()).then(
          () => 'ran',
          (e: Error) => e.message,
        );
        const second = await ctx.step('second', () => 2);
        return `${first}, ${second}`;
      },
    });
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    cleanups.push(() => engine.shutdown({ graceMs: 0 }));
    const h = await engine.start(wf, null, { taskId: 'o' });
    expect(await h.result()).toBe('bad retry option, 2');
    const steps = (await h.history()).filter((e) => e.type === 'StepCompleted');
    expect(steps.map((e) => (e as { name: string }).name)).toEqual(label.startsWith('a getter') ? ['second'] : ['first', 'second']);
  });
}

// A step's own retry options take the workflow's ranges: `maxAttempts: NaN` used to retry a
// failing fn until the turn's signal aborted (`attempt >= NaN` is never true).
for (const [label, retry] of [
  ['maxAttempts NaN', { maxAttempts: Number.NaN }],
  ['maxAttempts 0', { maxAttempts: 0 }],
  ['maxAttempts above 1,000', { maxAttempts: 1001 }],
  ['jitter 2', { jitter: 2 }],
  // A count is an integer: 2.5 ran the fn three times; a type list is an array, not a string
  // ('Error' matched every type that 'Error'.includes, such as 'Err').
  ['maxAttempts 2.5', { maxAttempts: 2.5 }],
  ['nonRetryableTypes a string', { nonRetryableTypes: 'Error' as unknown as string[] }],
] as const) {
  it(`a step's retry ${label} is refused before fn runs, with the step's name; the next step is recorded`, async () => {
    let calls = 0;
    const wf = defineWorkflow({
      name: 'opts-range',
      turn: async (ctx) => {
        const first = await ctx
          .step('charge', () => {
            calls++;
            throw new Error('down');
          }, { retry })
          .then(
            () => 'ran',
            (e: { code?: string; message: string }) => `${e.code}: ${e.message}`,
          );
        const second = await ctx.step('second', () => 2);
        return `${first} | ${second}`;
      },
    });
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    cleanups.push(() => engine.shutdown({ graceMs: 0 }));
    const h = await engine.start(wf, null, { taskId: 'r' });
    const out = String(await h.result());
    expect(out).toMatch(/^TURNLOG_INVALID_ARGUMENT: Task r, turn 1: step "charge" retry\.(maxAttempts|jitter|nonRetryableTypes) must be (a number|an integer|an array)/);
    expect(out.endsWith(' | 2')).toBe(true);
    expect(calls).toBe(0);
  });
}
