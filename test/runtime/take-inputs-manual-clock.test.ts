import { expect, it } from 'vitest';
import { createTestEngine } from '../../src/testing/index.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';

// docs/steering.md: `takeInputs({ wait: true })` waits for one input. On the test engine
// (docs/testing.md#the-test-engine) only the engine's timers follow the manual clock: an input
// sent while the handler waits is taken without advancing it. Before, the wait polled on the
// manual clock and never saw the input until the test advanced time.
const asker = defineWorkflow({
  name: 'asker',
  kind: 'multi-turn',
  turn: async (ctx, _q: string) => {
    const answers = await ctx.takeInputs<string>({ wait: true });
    return ctx.suspend('idle', answers);
  },
});

it('takeInputs({ wait: true }) on the test engine takes an input sent while it waits, with no advance', async () => {
  const t = await createTestEngine({ workflows: [asker] });
  try {
    const h = await t.engine.start(asker, 'confirm?', { taskId: 'ask' });
    for (let i = 0; i < 200 && !(await t.engine.describe('ask')).openTurn?.running; i++) await new Promise((r) => setTimeout(r, 5));
    const answer = await h.send('yes');
    const timeout = new Promise((r) => setTimeout(() => r('not taken within 5 s'), 5_000).unref());
    expect(await Promise.race([t.engine.turnResult('ask', answer), timeout])).toMatchObject({ turn: 1, status: 'suspended', output: ['yes'] });
    expect((await t.history('ask')).find((e) => e.type === 'InputsTaken')).toMatchObject({ inputIds: [answer] });
    expect((await t.replay('ask')).turns).toBe(1);
  } finally {
    await t.close();
  }
});

// docs/time.md#testing-with-the-manual-clock: `advance` fires the bounded takeInputs of inline
// turns, so the timed-out take is recorded by the time `advance` resolves (the poll is not real
// time only).
const bounded = defineWorkflow({
  name: 'bounded',
  kind: 'multi-turn',
  turnTimeoutMs: 3_600_000,
  turn: async (ctx, _q: string) => ctx.suspend('idle', await ctx.takeInputs<string>({ wait: true, timeoutMs: 60_000 })),
});

it('advance past a bounded takeInputs timeout records the empty take before advance resolves', async () => {
  const t = await createTestEngine({ workflows: [bounded] });
  try {
    await t.engine.start(bounded, 'confirm?', { taskId: 'b' });
    await t.advance(59_999);
    expect((await t.history('b')).some((e) => e.type === 'InputsTaken')).toBe(false);
    await t.advance(1);
    expect((await t.history('b')).find((e) => e.type === 'InputsTaken')).toMatchObject({ inputIds: [] });
  } finally {
    await t.close();
  }
});
