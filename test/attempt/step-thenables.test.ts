/**
 * Odd thenables a step's fn may return, on the first try's fast path (no options) and on the
 * tries path (timeoutMs, retry): each settles as `await` of it would, its first outcome wins, and
 * what is recorded is what the handler got.
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

type Then = (ok: (v: unknown) => void, no: (e: unknown) => void) => unknown;
const thenable = (then: Then): Promise<string> => ({ then }) as unknown as Promise<string>;

// Each case: the fn's thenable, and what the handler gets ('!' + message: the step failed).
const cases: [string, () => Promise<string>, string][] = [
  ['resolves twice, then rejects: the first wins', () => thenable((ok, no) => (ok('first'), ok('second'), no(new Error('late')))), 'first'],
  ['rejects at once', () => thenable((_ok, no) => no(new Error('refused'))), '!refused'],
  ['throws after resolving: ignored', () => thenable((ok) => { ok('kept'); throw new Error('after'); }), 'kept'],
  ['throws from then before settling', () => thenable(() => { throw new Error('then threw'); }), '!then threw'],
  ['resolves with another thenable', () => thenable((ok) => ok(thenable((ok2) => ok2('nested')))), 'nested'],
  ['resolves later (a macrotask)', () => thenable((ok) => void setImmediate(() => ok('later'))), 'later'],
  ['is a function with a then', () => Object.assign(() => 'no', { then: (ok: (v: string) => void) => ok('callable') }) as unknown as Promise<string>, 'callable'],
];

for (const [label, options] of [
  ['no options (the fast path)', {}],
  ['timeoutMs (the tries path)', { timeoutMs: 60_000 }],
  ['retry maxAttempts 1 (the tries path)', { retry: { maxAttempts: 1 } }],
] as [string, StepOptions][]) {
  it(`a step fn's odd thenables, ${label}: each settles as await would, recorded as the handler got it`, async () => {
    const wf = defineWorkflow({
      name: 'thenables',
      retry: { maxAttempts: 2, initialIntervalMs: 1 },
      turn: async (ctx) => {
        const got: string[] = [];
        for (const [name, fn] of cases) {
          got.push(await ctx.step(name, fn, options).then(String, (e: Error) => `!${e.message}`));
        }
        return got;
      },
    });
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    cleanups.push(() => engine.shutdown({ graceMs: 0 }));
    const h = await engine.start(wf, null, { taskId: 't' });
    expect(await h.result()).toEqual(cases.map((c) => c[2]));
    const steps = (await h.history()).flatMap((e) => (e.type === 'StepCompleted' ? [e.failure ? `!${e.failure.message}` : 'ok'] : []));
    expect(steps).toEqual(cases.map((c) => (c[2].startsWith('!') ? c[2] : 'ok')));
  });
}

it("a step fn's thenable has its then called exactly once, on every path (a second call would run a lazy thenable's work twice)", async () => {
  let calls = 0;
  const lazy = (): Promise<string> => thenable((ok) => void (calls++, ok(`run ${calls}`)));
  const wf = defineWorkflow({
    name: 'lazy-thenables',
    turn: async (ctx) => [await ctx.step('plain', lazy), await ctx.step('timeout', lazy, { timeoutMs: 60_000 }), await ctx.step('retry', lazy, { retry: { maxAttempts: 2 } })],
  });
  const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
  cleanups.push(() => engine.shutdown({ graceMs: 0 }));
  expect(await (await engine.start(wf, null, { taskId: 'lazy' })).result()).toEqual(['run 1', 'run 2', 'run 3']);
  expect(calls).toBe(3);
});
