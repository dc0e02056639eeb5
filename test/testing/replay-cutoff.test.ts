/**
 * Review probes: replayHistory on turns that the engine (not the handler) ended.
 */
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { silentLogger } from '../../src/logger.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { replayHistory } from '../../src/testing/index.js';

const never = new Promise<never>(() => undefined);

describe('review: replay of turns ended by recovery', () => {
  it('a turn failed with recoveries-exhausted after an engine crash mid-turn is cut off, not a divergence', async () => {
    let block = true;
    const agent = defineWorkflow({
      name: 'agent',
      kind: 'multi-turn',
      maxRecoveries: 0,
      turn: async (ctx, text: string) => {
        const a = await ctx.step('a', () => text);
        if (block) await never; // the engine dies here (shutdown grace 0 = crash)
        return ctx.step('b', () => a + '!');
      },
    });
    const store = new MemoryHistoryStore();
    const clock = new ManualClock();
    const e1 = await Engine.open({ store, workflows: [agent], logger: silentLogger, scanIntervalMs: 0, clock });
    const h = await e1.start(agent, 'hi', { taskId: 'chat' });
    for (let i = 0; i < 50 && !(await h.history()).some((e) => e.type === 'StepCompleted'); i++) await new Promise((r) => setTimeout(r, 2));
    await e1.shutdown({ graceMs: 0 });
    const e2 = await Engine.open({ store, workflows: [agent], logger: silentLogger, scanIntervalMs: 0, clock });
    await e2.recovered(); // open does not wait for the recovery pass
    const events = await e2.history('chat');
    await e2.shutdown({ graceMs: 0 });
    const failed = events.find((e) => e.type === 'TurnFailed');
    expect(failed && failed.type === 'TurnFailed' && failed.failure.type).toBe('RecoveriesExhausted');
    block = false;
    // The engine cut the turn off from outside: the replay must not compare the handler's end
    // (it would complete with "hi!") with a failure the handler never produced.
    const report = await replayHistory({ history: events, workflows: [agent], taskId: 'chat' });
    expect(report.results[0]).toMatchObject({ turn: 1, status: 'cut-off', terminal: 'TurnFailed' });
  });
});
