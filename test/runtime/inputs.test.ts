/**
 * 3e970f1 made engine.sendInput, turnResult, latestTurnResult, handle.nextTurn, Inputs.send and
 * queue and TurnResults.turnResult plain functions returning a promise. What a caller sees must not
 * change: every refusal is a rejection of the returned promise (never a synchronous throw, never an
 * unhandled rejection), and sends in one tick are queued in call order.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';

const engines: Engine[] = [];
const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
beforeEach(() => {
  unhandled.length = 0;
  process.on('unhandledRejection', onUnhandled);
});
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
  process.off('unhandledRejection', onUnhandled);
});

const chat = defineWorkflow({ name: 'chat', kind: 'multi-turn', turn: async (ctx, x: string) => ctx.step('say', () => `got ${x}`) });

async function open(): Promise<Engine> {
  const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [chat], logger: silentLogger, scanIntervalMs: 0 });
  engines.push(engine);
  return engine;
}

/** Calls `f` and reports how it failed: 'threw' synchronously, or the rejection's code. */
async function failure(f: () => Promise<unknown>): Promise<string> {
  let p: Promise<unknown>;
  try {
    p = f();
  } catch {
    return 'threw';
  }
  return p.then(
    () => 'resolved',
    (err: { code?: string }) => err.code ?? 'no code',
  );
}

describe('inputs and results: refusals are rejections', () => {
  it('a cached task: a bad input id, a value with no payload, a scheduled time that is not one', async () => {
    const engine = await open();
    const h = await engine.start(chat, 'hi', { taskId: 'c1' });
    await h.nextTurn();
    expect(await failure(() => h.send('x', { inputId: '' }))).toBe('TURNLOG_INVALID_ARGUMENT');
    expect(await failure(() => h.send((() => 1) as unknown as string))).toMatch(/^TURNLOG_/);
    expect(await failure(() => h.send('x', { deliverAt: Number.NaN as unknown as Date }))).toMatch(/^TURNLOG_/);
    await new Promise((r) => setImmediate(r));
    expect(unhandled).toEqual([]);
  });

  it('an unknown task: send, nextTurn and turnResult reject with TURNLOG_TASK_NOT_FOUND', async () => {
    const engine = await open();
    const h = engine.task('nobody');
    expect(await failure(() => h.send('x'))).toBe('TURNLOG_TASK_NOT_FOUND');
    expect(await failure(() => h.nextTurn())).toBe('TURNLOG_TASK_NOT_FOUND');
    expect(await failure(() => engine.turnResult('nobody', 'in-1'))).toBe('TURNLOG_TASK_NOT_FOUND');
    expect(await failure(() => engine.latestTurnResult('nobody'))).toBe('TURNLOG_TASK_NOT_FOUND');
    await new Promise((r) => setImmediate(r));
    expect(unhandled).toEqual([]);
  });

  it('a shut-down engine: send rejects (TURNLOG_ENGINE_*), not a synchronous throw', async () => {
    const engine = await open();
    const h = await engine.start(chat, 'hi', { taskId: 'c2' });
    await h.nextTurn();
    await engine.shutdown({ graceMs: 0 });
    expect(await failure(() => h.send('late'))).toMatch(/^TURNLOG_/);
    expect(await failure(() => h.send('late'))).not.toBe('threw');
  });

  it('sends to a cached task made in one tick are queued, and answered, in call order', async () => {
    const engine = await open();
    const h = await engine.start(chat, 'first', { taskId: 'c3' });
    await h.nextTurn();
    const ids = await Promise.all(['a', 'b', 'c', 'd'].map((x, i) => h.send(x, { inputId: `in-${i}` })));
    expect(ids).toEqual(['in-0', 'in-1', 'in-2', 'in-3']);
    const queued = (await h.history()).filter((e) => e.type === 'InputQueued').map((e) => (e.type === 'InputQueued' ? e.inputId : ''));
    expect(queued.slice(1)).toEqual(ids);
    const outputs = await Promise.all(ids.map((id) => h.turnResult(id)));
    expect(outputs.map((r) => (r.status === 'completed' ? r.output : r.status))).toEqual(['got a', 'got b', 'got c', 'got d']);
  });
});
