/**
 * src/runtime/task-cache.ts #evictIdle: completed tasks go first, then the least recently used.
 * First in, first out dropped a conversation in use every ~maxCachedTasks new tasks, and its next
 * turn reloaded the whole history (bench:peers, turns rounds: docs/performance.md).
 */
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';

const chat = defineWorkflow({ name: 'chat', kind: 'multi-turn', turn: (ctx, x: number) => ctx.step('s', () => x + 1) });
const one = defineWorkflow({ name: 'one', turn: (ctx, x: number) => ctx.step('s', () => x + 1) });
const engines: Engine[] = [];
// A memory store answers in microtasks: let the cache's pins (one immediate) lapse between tasks.
const immediate = () => new Promise((r) => setImmediate(r));
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
});

/** An engine over a memory store that counts the snapshot reads (one per task load) by task. */
async function open(maxCachedTasks: number) {
  const store = new MemoryHistoryStore();
  const loads = new Map<string, number>();
  const getSnapshot = store.getSnapshot.bind(store);
  store.getSnapshot = (taskId) => {
    loads.set(taskId, (loads.get(taskId) ?? 0) + 1);
    return getSnapshot(taskId);
  };
  const engine = await Engine.open({ store, workflows: [chat, one], logger: silentLogger, scanIntervalMs: 0, maxCachedTasks });
  engines.push(engine);
  return { engine, loads };
}

it('evicts completed tasks before an idle conversation, however old the conversation', async () => {
  const { engine, loads } = await open(10);
  const c = await engine.start(chat, 0, { taskId: 'conv' });
  await c.nextTurn();
  expect((await c.turnResult(await c.send(7))).output).toBe(8);
  const before = loads.get('conv'); // its start read the id (caller-chosen)
  for (let i = 0; i < 40; i++) {
    await (await engine.start(one, i)).result();
    await immediate();
  }
  expect((await c.turnResult(await c.send(1))).output).toBe(2);
  expect(loads.get('conv')).toBe(before);
});

it('evicts the least recently used idle conversation, not the first one cached', async () => {
  const { engine, loads } = await open(10);
  const first = await engine.start(chat, 0, { taskId: 'first' });
  await first.nextTurn();
  const before = loads.get('first');
  for (let i = 0; i < 40; i++) {
    await (await engine.start(chat, i, { taskId: `other-${i}` })).nextTurn();
    await immediate();
    if (i % 4 === 3) expect((await first.turnResult(await first.send(i))).output).toBe(i + 1);
  }
  expect(loads.get('first')).toBe(before);
  // The conversations not used since the cache filled were dropped and load again when used.
  const loaded = loads.get('other-0')!;
  const old = engine.task<number, number>('other-0');
  expect((await old.turnResult(await old.send(5))).output).toBe(6);
  expect(loads.get('other-0')).toBe(loaded + 1);
});
