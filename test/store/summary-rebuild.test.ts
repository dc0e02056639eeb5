/**
 * Review probe (invariant 1): after every kind of append, the stored summary and status index
 * equal what a rebuild from the history gives, and agree with the fold.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { silentLogger } from '../../src/logger.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { summarize } from '../../src/history/summary.js';
import { fold } from '../../src/replay/index.js';
import type { TaskStatus } from '../../src/history/events.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function gate() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

describe('review: summaries are rebuildable from history', () => {
  it('matches summarize(history) and the fold after steering, take, withdraw, cancel, timeout and completion', async () => {
    const dir = await makeTmpDir('turnlog-review-sum-');
    cleanups.push(dir.remove);
    const clock = new ManualClock();
    const gates = new Map<string, ReturnType<typeof gate>>();
    const started = new Set<string>();
    const chat = defineWorkflow({
      name: 'chat',
      kind: 'multi-turn',
      turnTimeoutMs: 1000,
      graceMs: 100,
      turn: async (ctx, text: string) => {
        started.add(`${ctx.taskId}:${text}`);
        const g = gates.get(`${ctx.taskId}:${text}`);
        if (g) await g.promise;
        if (text === 'take') return (await ctx.takeInputs()).length;
        if (text === 'hang') await new Promise(() => undefined);
        return ctx.step('echo', () => text);
      },
    });
    const once = defineWorkflow({ name: 'once', steering: { maxQueued: 2 }, turn: async (ctx, x: string) => ctx.step('s', () => x) });
    const store = new LevelHistoryStore(dir.path);
    const engine = await Engine.open({ store, workflows: [chat, once], logger: silentLogger, scanIntervalMs: 0, clock });
    cleanups.push(async () => {
      await engine.shutdown({ graceMs: 0 });
      await store.close();
    });
    const wait = async (key: string) => {
      for (let i = 0; i < 2000 && !started.has(key); i++) await new Promise((r) => setTimeout(r, 2));
    };

    // steering + withdraw + take
    gates.set('a:take', gate());
    const a = await engine.start(chat, 'take', { taskId: 'a' });
    await wait('a:take');
    const w = await a.send('w');
    await a.send('t1');
    await a.withdraw(w);
    gates.get('a:take')!.resolve();
    await a.nextTurn();
    // steering drained into the next turn
    gates.set('b:one', gate());
    const b = await engine.start(chat, 'one', { taskId: 'b' });
    await wait('b:one');
    const two = await b.send('two');
    gates.get('b:one')!.resolve();
    await engine.turnResult('b', two);
    // task cancel with a queued input
    gates.set('c:one', gate());
    const c = await engine.start(chat, 'one', { taskId: 'c' });
    await wait('c:one');
    await c.send('queued');
    await c.cancel('bye');
    gates.get('c:one')!.resolve();
    await c.nextTurn();
    // timeout through the hard cap
    const d = await engine.start(chat, 'hang', { taskId: 'd' });
    await wait('d:hang');
    await clock.advance(1000);
    for (let i = 0; i < 2000 && !(await d.history()).some((x) => x.type === 'TimeoutCancelRequested'); i++) await new Promise((r) => setTimeout(r, 2));
    await new Promise((r) => setTimeout(r, 10));
    await clock.advance(100);
    await d.nextTurn();
    // one-shot with a queued input when it completes
    gates.set('e:x', gate());
    const e = await engine.start(once, 'x', { taskId: 'e' });
    await e.send('y').catch(() => undefined);
    gates.get('e:x')?.resolve();
    await e.nextTurn();

    for (const id of ['a', 'b', 'c', 'd', 'e']) {
      const events = await store.readEvents(id);
      const stored = await store.getSummary(id);
      expect(stored, id).toEqual(summarize(id, undefined, events));
      const s = fold(id, events);
      expect(stored!.status, id).toBe(s.status);
      expect(stored!.lastInputId, id).toBe(s.lastInputId);
      expect(stored!.queued, id).toBe(s.queue.length);
      expect(stored!.turn, id).toBe(s.turn);
    }
    for (const status of ['pending', 'in_progress', 'suspended', 'completed'] as TaskStatus[]) {
      const listed = (await store.listTasks({ status })).tasks.map((t) => t.taskId).sort();
      const expected: string[] = [];
      for (const id of ['a', 'b', 'c', 'd', 'e']) if (fold(id, await store.readEvents(id)).status === status) expected.push(id);
      expect(listed, status).toEqual(expected);
    }
  });
});
