// Engine.fork (docs/history.md#forks): a new task from the end of turn N, the original untouched.
import { afterEach, describe, expect, it } from 'vitest';
import { isTurnlogError } from '../../src/errors.js';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';

const engines: Engine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
});

const chat = defineWorkflow({
  name: 'chat',
  kind: 'multi-turn',
  initialState: () => ({ messages: [] as string[] }),
  turn: async (ctx, text: string) => {
    ctx.state.messages.push(text);
    const reply = await ctx.step('model', () => `reply to ${text} `.repeat(8));
    ctx.state.messages.push(reply);
    return reply;
  },
});
const once = defineWorkflow({ name: 'once', turn: async (_ctx, x: number) => x + 1 });

async function open(store = new MemoryHistoryStore()): Promise<{ engine: Engine; store: MemoryHistoryStore }> {
  const engine = await Engine.open({ store, workflows: [chat, once], logger: silentLogger, scanIntervalMs: 0 });
  engines.push(engine);
  return { engine, store };
}

async function codeOf(p: Promise<unknown>): Promise<string | undefined> {
  try {
    await p;
  } catch (err) {
    return isTurnlogError(err) ? err.code : String(err);
  }
  return undefined;
}

async function converse(engine: Engine, taskId: string, inputs: string[]): Promise<void> {
  for (const [i, text] of inputs.entries()) {
    if (i === 0) await (await engine.start(chat, text, { taskId })).nextTurn();
    else await engine.turnResult(taskId, await engine.sendInput(taskId, text));
  }
}

describe('Engine.fork', () => {
  it('forks at the end of turn 2 and the conversation goes on differently; the original is untouched', async () => {
    const { engine, store } = await open();
    await converse(engine, 'orig', ['a', 'b', 'c']);
    const before = await store.readEvents('orig');
    const fork = await engine.fork('orig', { atTurn: 2, newTaskId: 'retry' });
    expect(fork.taskId).toBe('retry');
    const d = await engine.describe('retry');
    expect(d).toMatchObject({ status: 'suspended', turn: 2 });
    expect((d.state as { messages: string[] }).messages).toHaveLength(4);
    await engine.turnResult('retry', await engine.sendInput('retry', 'c2'));
    const after = await engine.describe('retry');
    expect((after.state as { messages: string[] }).messages[4]).toBe('c2');
    expect(after.turn).toBe(3);
    expect(await store.readEvents('orig')).toEqual(before);
    expect(((await engine.describe('orig')).state as { messages: string[] }).messages[4]).toBe('c');
    const created = (await store.readEvents('retry'))[0]!;
    expect(created).toMatchObject({ type: 'TaskCreated', forkedFrom: { taskId: 'orig', turn: 2 } });
  });

  it('a fork reloads in a new engine (snapshot, void lease) and goes on', async () => {
    const { engine, store } = await open();
    await converse(engine, 'orig', ['a', 'b']);
    await engine.fork('orig', { atTurn: 1, newTaskId: 'f' });
    await engine.shutdown({ graceMs: 0 });
    const { engine: b } = await open(store);
    await b.turnResult('f', await b.sendInput('f', 'z'));
    expect(((await b.describe('f')).state as { messages: string[] }).messages).toEqual(['a', 'reply to a '.repeat(8), 'z', 'reply to z '.repeat(8)]);
  });

  it('refuses an unknown task, a turn not ended, a taken id and a one-shot task, writing nothing', async () => {
    const { engine, store } = await open();
    await converse(engine, 'orig', ['a']);
    await (await engine.start(once, 1, { taskId: 'one' })).nextTurn();
    expect(await codeOf(engine.fork('nope', { atTurn: 1, newTaskId: 'x' }))).toBe('TURNLOG_TASK_NOT_FOUND');
    expect(await codeOf(engine.fork('orig', { atTurn: 2, newTaskId: 'x' }))).toBe('TURNLOG_TURN_NOT_ENDED');
    expect(await codeOf(engine.fork('orig', { atTurn: 1, newTaskId: 'one' }))).toBe('TURNLOG_TASK_CONFLICT');
    expect(await codeOf(engine.fork('one', { atTurn: 1, newTaskId: 'x' }))).toBe('TURNLOG_WRONG_KIND');
    expect(await codeOf(engine.fork('orig', { atTurn: 1, newTaskId: '' }))).toBe('TURNLOG_INVALID_ARGUMENT');
    expect(await store.readEvents('x')).toEqual([]);
  });
});
