// Review: Engine.fork at a kept turn of a compacted history (LevelDB). Inputs queued while turn 1
// ran were still queued at the cut, so they live in HistoryCompacted.state; the fork must not
// inherit them (docs/history.md#forks: they belong to the original's future).
import { afterEach, expect, it } from 'vitest';
import { join } from 'node:path';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { isTurnlogError } from '../../src/errors.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

let gate: Promise<void> = Promise.resolve();
const seen: string[] = [];
const chat = defineWorkflow({
  name: 'chat',
  kind: 'multi-turn',
  compaction: { keepTurns: 2 },
  initialState: () => ({ messages: [] as string[] }),
  turn: async (ctx, text: string) => {
    if (text === 'm1') await gate;
    seen.push(`${ctx.taskId}:${text}`);
    ctx.state.messages.push(text);
    return ctx.step('model', () => `reply to ${text}`);
  },
});

it('a fork at a kept turn of a compacted history does not run the original\'s queued inputs', async () => {
  const d = await makeTmpDir('turnlog-review-fork-');
  const store = new LevelHistoryStore(join(d.path, 'store'));
  const engine = await Engine.open({ store, workflows: [chat], logger: silentLogger, scanIntervalMs: 0 });
  cleanups.push(async () => {
    await engine.shutdown({ graceMs: 0 }).catch(() => undefined);
    await d.remove();
  });
  let open!: () => void;
  gate = new Promise<void>((r) => (open = r));
  await engine.start(chat, 'm1', { taskId: 'c' });
  const ids: string[] = [];
  for (let i = 2; i <= 5; i++) ids.push(await engine.sendInput('c', `m${i}`));
  open();
  await engine.turnResult('c', ids.at(-1)!);
  for (;;) {
    const e = (await store.readEvents('c'))[1];
    if (e?.type === 'HistoryCompacted' && e.turns >= 2) break;
    await new Promise((r) => setTimeout(r, 5));
  }
  const f = await engine.fork('c', { atTurn: 3, newTaskId: 'f' });
  void f;
  const d2 = await engine.describe('f');
  expect(d2.state).toEqual({ messages: ['m1', 'm2', 'm3'] });
  expect(d2.status).toBe('suspended');
  expect((await store.readEvents('f')).filter((e) => e.type === 'TurnStarted').length).toBeLessThanOrEqual(1);
  expect(seen.filter((s) => s.startsWith('f:'))).toEqual([]);
  // Its next turn takes the input sent to it, not m4.
  await engine.turnResult('f', await engine.sendInput('f', 'z'));
  expect(((await engine.describe('f')).state as { messages: string[] }).messages).toEqual(['m1', 'm2', 'm3', 'z']);
});

// docs/history.md#compaction: a dropped turn cannot be forked at; the refusal
// (TURNLOG_TURN_NOT_ENDED, docs/errors.md) says it was compacted away and names the kept turns,
// where it said "turn 1 has not ended (turns 1..5 have)" and offered 1..5.
it('fork at a turn compaction dropped is TURNLOG_TURN_NOT_ENDED naming the kept turns; nothing is written', async () => {
  const store = new MemoryHistoryStore();
  const engine = await Engine.open({ store, workflows: [chat], logger: silentLogger, scanIntervalMs: 0 });
  cleanups.push(() => engine.shutdown({ graceMs: 0 }).catch(() => undefined));
  await (await engine.start(chat, 'a1', { taskId: 'k' })).nextTurn();
  for (let i = 2; i <= 5; i++) await engine.turnResult('k', await engine.sendInput('k', `a${i}`));
  let k = 0;
  for (;;) {
    const e = (await store.readEvents('k'))[1];
    if (e?.type === 'HistoryCompacted' && e.turns >= 2) {
      k = e.turns;
      break;
    }
    await new Promise((r) => setTimeout(r, 5));
  }
  const dropped = await engine.fork('k', { atTurn: 1, newTaskId: 'k1' }).catch((e: unknown) => e);
  expect(isTurnlogError(dropped, 'TURNLOG_TURN_NOT_ENDED')).toBe(true);
  expect((dropped as Error).message).toContain(`turn 1 was compacted away (turns 1..${k} are kept only as their folded state)`);
  expect((dropped as Error).message).toContain(`from ${k + 1} to 5`);
  const future = await engine.fork('k', { atTurn: 9, newTaskId: 'k9' }).catch((e: unknown) => e);
  expect(isTurnlogError(future, 'TURNLOG_TURN_NOT_ENDED')).toBe(true);
  expect((future as Error).message).toContain(`turn 9 has not ended (turns ${k + 1}..5 have; turns 1..${k} were compacted away)`);
  expect(await store.readEvents('k1')).toEqual([]);
  expect(await store.readEvents('k9')).toEqual([]);
  expect((await engine.fork('k', { atTurn: 5, newTaskId: 'k5' })).taskId).toBe('k5');
});
