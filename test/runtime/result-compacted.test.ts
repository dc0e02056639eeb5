// Review: the result of an input whose turn compaction dropped. The caller did use the id start()
// returned, so "Use the id returned by start() or send()" is wrong: the error says it was compacted.
import { afterEach, expect, it } from 'vitest';
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
  compaction: { keepTurns: 2 },
  turn: async (ctx, text: string) => ctx.step('model', () => `reply to ${text}`),
});

it('turnResult of an input of a compacted turn, in a new engine: TURNLOG_INPUT_NOT_FOUND saying it was compacted', async () => {
  const store = new MemoryHistoryStore();
  const engine = await Engine.open({ store, workflows: [chat], logger: silentLogger, scanIntervalMs: 0 });
  const first = await engine.start(chat, 'm1', { taskId: 'c' });
  const firstId = first.inputId!;
  await first.nextTurn();
  const kept: string[] = [];
  for (let i = 2; i <= 6; i++) {
    const id = await engine.sendInput('c', `m${i}`);
    kept.push(id);
    await engine.turnResult('c', id);
  }
  for (;;) {
    const e = (await store.readEvents('c'))[1];
    if (e?.type === 'HistoryCompacted' && e.turns >= 4) break;
    await new Promise((r) => setTimeout(r, 5));
  }
  await engine.shutdown({ graceMs: 0 });
  const again = await Engine.open({ store, workflows: [chat], logger: silentLogger, scanIntervalMs: 0 });
  engines.push(again);
  // A kept turn's result is still there.
  expect(await again.turnResult('c', kept.at(-1)!)).toMatchObject({ status: 'completed', output: 'reply to m6' });
  const err = await again.turnResult('c', firstId).then(() => undefined, (e: unknown) => e);
  expect(isTurnlogError(err, 'TURNLOG_INPUT_NOT_FOUND')).toBe(true);
  expect((err as Error).message).toMatch(/compacted/);
  // An id that never existed keeps the usual message.
  const other = await again.turnResult('c', 'in-nope').then(() => undefined, (e: unknown) => e);
  expect((other as Error).message).toMatch(/compacted|Use the id/);
});
