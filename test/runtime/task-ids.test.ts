import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { newTaskId, taskIdTime } from '../../src/runtime/task-ids.js';
import { silentLogger } from '../../src/logger.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const FORMAT = /^task-[0-9a-z]{9}[A-Za-z0-9_-]{16}$/;
const engines: Engine[] = [];
const dirs: { remove: () => Promise<void> }[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown();
  for (const d of dirs.splice(0)) await d.remove();
});

it('an engine-named id is the time in 9 base-36 digits, then 16 random characters', () => {
  const at = Date.UTC(2026, 11, 3, 13, 45);
  const id = newTaskId(at);
  expect(id).toMatch(FORMAT);
  expect(taskIdTime(id)).toBe(at);
  expect(newTaskId(0).slice(5, 14)).toBe('000000000');
  // A clock below 0 or not a number counts as 0: the time part keeps its width.
  for (const bad of [-5, Number.NaN, Number.NEGATIVE_INFINITY]) expect(taskIdTime(newTaskId(bad))).toBe(0);
  expect(taskIdTime('given')).toBeUndefined();
});

it('ids sort by the time they were named, whatever their random part', () => {
  const times = [0, 1, 35, 36, 1_000, Date.UTC(2001, 0, 1), Date.UTC(2026, 0, 1), Date.UTC(2026, 0, 1) + 1, 36 ** 9 - 1];
  for (let round = 0; round < 50; round++) {
    const ids = times.map(newTaskId);
    expect([...ids].sort()).toEqual(ids);
  }
});

it('ids named in one millisecond differ (96 random bits)', () => {
  const ids = new Set(Array.from({ length: 20_000 }, () => newTaskId(1_000)));
  expect(ids.size).toBe(20_000);
});

it('the engine names tasks and forks by its clock, so a LevelDB listing is in the order they were started', async () => {
  const clock = new ManualClock();
  const dir = await makeTmpDir('turnlog-task-ids-');
  dirs.push(dir);
  const store = new LevelHistoryStore(dir.path);
  const chat = defineWorkflow({ name: 'chat', kind: 'multi-turn', turn: (_ctx, x: number) => x });
  const engine = await Engine.open({ store, workflows: [chat], logger: silentLogger, scanIntervalMs: 0, clock });
  engines.push(engine);
  const ids: string[] = [];
  for (let i = 0; i < 5; i++) {
    const h = await engine.start(chat, i);
    await h.nextTurn();
    expect(taskIdTime(h.taskId)).toBe(clock.now());
    ids.push(h.taskId);
    await clock.advance(1 + i * 997);
  }
  const fork = (await engine.fork(ids[0]!, { atTurn: 1 })).taskId;
  expect(fork).toMatch(FORMAT);
  expect(taskIdTime(fork)).toBe(clock.now());
  expect((await store.listTasks()).tasks.map((t) => t.taskId)).toEqual([...ids, fork]);
});
