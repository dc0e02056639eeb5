import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';

// docs/errors.md#turnlog_task_not_found: every task API names a task the store does not have
// with TURNLOG_TASK_NOT_FOUND, not an empty answer or another task's error.
const echo = defineWorkflow({ name: 'echo', kind: 'multi-turn', turn: async (_ctx, text: string) => text });

const engines: Engine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
});

async function open(): Promise<Engine> {
  const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [echo], logger: silentLogger, scanIntervalMs: 0 });
  engines.push(engine);
  return engine;
}

describe('a task id the store does not have', () => {
  it('history() rejects with TURNLOG_TASK_NOT_FOUND naming the task, on the engine and on a handle', async () => {
    const engine = await open();
    await expect(engine.history('nope')).rejects.toMatchObject({ code: 'TURNLOG_TASK_NOT_FOUND', message: expect.stringContaining('nope') });
    await expect(engine.task('nope').history()).rejects.toMatchObject({ code: 'TURNLOG_TASK_NOT_FOUND' });
    await (await engine.start(echo, 'hi', { taskId: 'there' })).nextTurn();
    expect((await engine.history('there')).map((e) => e.type)).toContain('TurnCompleted');
  });

  it('withdraw() rejects with TURNLOG_TASK_NOT_FOUND, not TURNLOG_INPUT_NOT_FOUND', async () => {
    const engine = await open();
    await expect(engine.withdraw('nope', 'in-1')).rejects.toMatchObject({ code: 'TURNLOG_TASK_NOT_FOUND', message: expect.stringContaining('nope') });
    await expect(engine.task('nope').withdraw('in-1')).rejects.toMatchObject({ code: 'TURNLOG_TASK_NOT_FOUND' });
    await (await engine.start(echo, 'hi', { taskId: 'there' })).nextTurn();
    await expect(engine.withdraw('there', 'in-1')).rejects.toMatchObject({ code: 'TURNLOG_INPUT_NOT_FOUND' });
    expect((await engine.describe('there')).status).toBe('suspended');
  });
});
