// A turn of an older workflow version cut short by an engine crash, re-run by the new version
// (docs/versioning.md#state-migrations): the migration comes before the re-run's TurnStarted.
import { describe, expect, it } from 'vitest';
import { fold } from '../../src/replay/fold.js';
import { createTestEngine } from '../../src/testing/test-engine.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';

describe('state migration on a re-run', () => {
  it('a turn of version 1 cut short by an engine crash is re-run by version 2, migrating first', async () => {
    let hang!: () => void;
    const hung = new Promise<void>((r) => (hang = r));
    const v1 = defineWorkflow({
      name: 'chat',
      kind: 'multi-turn',
      version: 1,
      initialState: () => ({ messages: [] as string[] }),
      turn: async (ctx, text: string) => {
        ctx.state.messages.push(text);
        if (text === 'hang') {
          hang();
          await new Promise(() => undefined); // runs until the engine dies
        }
        return ctx.state.messages.length;
      },
    });
    const hookCalls: number[] = [];
    const v2 = defineWorkflow({
      name: 'chat',
      kind: 'multi-turn',
      version: 2,
      initialState: () => ({ log: [] as string[] }),
      migrateState: (state, from) => {
        hookCalls.push(from);
        return { log: (state as { messages: string[] }).messages };
      },
      turn: async (ctx, text: string) => {
        ctx.state.log.push(text);
        return ctx.state.log.join(' | ');
      },
    });
    const t1 = await createTestEngine({ workflows: [v1] });
    await (await t1.engine.start(v1, 'hello', { taskId: 'm' })).nextTurn();
    const inputId = await t1.engine.sendInput('m', 'hang');
    await hung;
    await t1.close(); // dies mid-turn: nothing after TurnStarted
    const t2 = await createTestEngine({ workflows: [v2], store: t1.store, clock: t1.clock });
    try {
      await t2.engine.recover();
      await t2.advance(10 * 60_000); // the dead engine's lease expires (the memory store is not exclusive)
      await t2.engine.recover();
      const types = (await t2.history('m')).map((e) => e.type);
      expect(types.slice(types.indexOf('StateMigrated'))).toEqual(['StateMigrated', 'TurnStarted', 'TurnCompleted']);
      const r = await t2.engine.turnResult('m', inputId);
      expect(r).toMatchObject({ status: 'completed', output: 'hello | hang' });
      expect(hookCalls).toEqual([1]);
      expect(fold('m', await t2.history('m')).stateVersion).toBe(2);
    } finally {
      await t2.close();
    }
  });
});
