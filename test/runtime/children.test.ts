/**
 * Child tasks (docs/children.md) on a LevelDB store: a parent starts children, awaits them inside
 * its turn, and the outcome is recorded in the parent's history; a re-run after a crash finds the
 * same child; failures surface as ChildFailedError; a cancel reaches attached children.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { silentLogger } from '../../src/logger.js';
import { isTurnlogError, type ChildFailedError } from '../../src/errors.js';
import { replayHistory } from '../../src/testing/replay-history.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const dirs: { remove: () => Promise<void> }[] = [];
const engines: Engine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
  for (const d of dirs.splice(0)) await d.remove();
});

async function open(workflows: Parameters<typeof Engine.open>[0]['workflows'], dir?: string): Promise<{ engine: Engine; dir: string }> {
  let path = dir;
  if (!path) {
    const d = await makeTmpDir('turnlog-children-');
    dirs.push(d);
    path = d.path;
  }
  const engine = await Engine.open({ store: path, workflows, logger: silentLogger, scanIntervalMs: 0 });
  engines.push(engine);
  return { engine, dir: path };
}

const researcher = defineWorkflow({
  name: 'researcher',
  turn: async (ctx, topic: string) => ctx.step('search', () => `notes on ${topic}`),
});

const failing = defineWorkflow({
  name: 'failing-child',
  retry: { maxAttempts: 1 },
  turn: async (_ctx, why: string): Promise<string> => {
    throw new Error(`child gave up: ${why}`);
  },
});

describe('ctx.startChild / child.result()', () => {
  it('starts children, awaits them in the turn, records ChildStarted and ChildEnded, and replays', async () => {
    const lead = defineWorkflow({
      name: 'lead',
      turn: async (ctx, topics: string[]) => {
        const children = [];
        for (const t of topics) children.push(await ctx.startChild(researcher, t));
        const notes: string[] = [];
        for (const c of children) notes.push(await c.result());
        return notes.join(' | ');
      },
    });
    const { engine } = await open([lead, researcher]);
    const h = await engine.start(lead, ['wind', 'solar'], { taskId: 'lead-1' });
    expect(await h.result()).toBe('notes on wind | notes on solar');

    const events = await engine.history('lead-1');
    const started = events.filter((e) => e.type === 'ChildStarted');
    expect(started).toMatchObject([
      { turn: 1, seq: 1, childId: 'lead-1/c1.1', workflow: 'researcher', detached: false },
      { turn: 1, seq: 2, childId: 'lead-1/c1.2', workflow: 'researcher', detached: false },
    ]);
    const ended = events.filter((e) => e.type === 'ChildEnded');
    expect(ended).toMatchObject([
      { seq: 3, childId: 'lead-1/c1.1', status: 'completed' },
      { seq: 4, childId: 'lead-1/c1.2', status: 'completed' },
    ]);
    // The child's TaskCreated names its parent call.
    const childCreated = (await engine.history('lead-1/c1.2'))[0];
    expect(childCreated).toMatchObject({ type: 'TaskCreated', workflow: 'researcher', parent: { taskId: 'lead-1', turn: 1, seq: 2, detached: false } });
    // Lineage both ways.
    const parent = await engine.describe('lead-1');
    expect(parent.children).toEqual([
      { childId: 'lead-1/c1.1', workflow: 'researcher', turn: 1, seq: 1, detached: false, status: 'completed' },
      { childId: 'lead-1/c1.2', workflow: 'researcher', turn: 1, seq: 2, detached: false, status: 'completed' },
    ]);
    expect((await engine.describe('lead-1/c1.1')).parent).toEqual({ taskId: 'lead-1', turn: 1, seq: 1, detached: false });
    // Replay testing gets the recorded outcomes back without running the children.
    const report = await replayHistory({ history: events, taskId: 'lead-1', workflows: [lead, researcher] });
    expect(report.turns).toBe(1);
  });

  it('a failed child throws ChildFailedError naming parent, child and the failure; caught, the parent carries on', async () => {
    const caught: unknown[] = [];
    const lead = defineWorkflow({
      name: 'lead-catch',
      turn: async (ctx, _: null) => {
        const c = await ctx.startChild(failing, 'no data', { childId: 'kid-7' });
        try {
          return await c.result();
        } catch (err) {
          caught.push(err);
          return 'fallback';
        }
      },
    });
    const { engine } = await open([lead, failing]);
    expect(await (await engine.start(lead, null, { taskId: 'p-fail' })).result()).toBe('fallback');
    const err = caught[0] as ChildFailedError;
    expect(isTurnlogError(err, 'TURNLOG_CHILD_FAILED')).toBe(true);
    expect(err).toMatchObject({ parentId: 'p-fail', childId: 'kid-7', status: 'failed' });
    expect(err.message).toContain('p-fail');
    expect(err.message).toContain('kid-7');
    expect(err.message).toContain('child gave up: no data');
    expect((err.cause as Error).message).toBe('child gave up: no data');
    const ended = (await engine.history('p-fail')).find((e) => e.type === 'ChildEnded');
    expect(ended).toMatchObject({ childId: 'kid-7', status: 'failed', failure: { message: 'child gave up: no data' } });
  });

  it('an uncaught child failure fails the parent turn with TURNLOG_CHILD_FAILED', async () => {
    const lead = defineWorkflow({
      name: 'lead-uncaught',
      retry: { maxAttempts: 1 },
      turn: async (ctx, _: null) => (await ctx.startChild(failing, 'x')).result(),
    });
    const { engine } = await open([lead, failing]);
    const r = await engine.turnResult('p-unc', await (await engine.start(lead, null, { taskId: 'p-unc' })).inputId!);
    expect(r.status).toBe('failed');
    expect(r.failure?.code).toBe('TURNLOG_CHILD_FAILED');
  });

  it('a child id used by another task is TURNLOG_CHILD_CONFLICT, and nothing is recorded in the parent', async () => {
    const lead = defineWorkflow({
      name: 'lead-conflict',
      turn: async (ctx, _: null) => {
        try {
          await ctx.startChild(researcher, 'x', { childId: 'taken' });
          return 'started';
        } catch (err) {
          return isTurnlogError(err, 'TURNLOG_CHILD_CONFLICT') ? `conflict: ${(err as Error).message}` : 'other';
        }
      },
    });
    const { engine } = await open([lead, researcher]);
    await (await engine.start(researcher, 'y', { taskId: 'taken' })).result();
    const out = (await (await engine.start(lead, null, { taskId: 'p-c' })).result()) as string;
    expect(out).toMatch(/^conflict: Task p-c: cannot start child taken: task taken already exists and it was not started as a child task/);
    expect((await engine.history('p-c')).some((e) => e.type === 'ChildStarted')).toBe(false);
  });

  it('ctx.awaitChild of a task this parent did not start is TURNLOG_INVALID_ARGUMENT, not a wait on that task, and records nothing', async () => {
    const chat = defineWorkflow({ name: 'chat-other', kind: 'multi-turn', turn: async (ctx, x: string) => ctx.suspend('idle', x) });
    const own = defineWorkflow({
      name: 'lead-own',
      kind: 'multi-turn',
      turn: async (ctx, _: null) => ctx.suspend('idle', await ctx.startChild(chat, 'mine', { childId: 'other-kid' }).then((c) => c.childId)),
    });
    const lead = defineWorkflow({
      name: 'lead-await-other',
      turn: async (ctx, id: string) => {
        try {
          return `awaited: ${String(await ctx.awaitChild(id))}`;
        } catch (err) {
          return isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT') ? `refused: ${(err as Error).message}` : `other: ${(err as Error).message}`;
        }
      },
    });
    const { engine } = await open([lead, chat, own]);
    await (await engine.start(chat, 'hi', { taskId: 'plain' })).nextTurn(); // started with engine.start
    await (await engine.start(own, null, { taskId: 'other-parent' })).nextTurn(); // another parent's child
    for (const id of ['plain', 'other-kid', 'nobody']) {
      const out = (await (await engine.start(lead, id, { taskId: `p-await-${id}` })).result()) as string;
      expect(out, id).toMatch(new RegExp(`^refused: Task p-await-${id}, turn 1: ctx.awaitChild\\("${id}"\\): task ${id} is not a child this task started`));
      expect((await engine.history(`p-await-${id}`)).some((e) => e.type === 'ChildEnded'), id).toBe(false);
    }
  });

  it('a re-run of the parent turn after a crash finds the same child (started once) and records its result once', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const slow = defineWorkflow({
      name: 'slow-child',
      turn: async (ctx, n: number) => {
        await gate;
        return ctx.step('work', () => n * 2);
      },
    });
    const lead = defineWorkflow({
      name: 'lead-crash',
      turn: async (ctx, n: number) => (await ctx.startChild(slow, n)).result(),
    });
    const first = await open([lead, slow]);
    await first.engine.start(lead, 21, { taskId: 'p-crash' });
    // The parent is waiting for its child; the engine goes away (nothing more is appended).
    await waitFor(async () => (await first.engine.history('p-crash')).some((e) => e.type === 'ChildStarted'));
    await first.engine.shutdown({ graceMs: 0 });
    engines.splice(engines.indexOf(first.engine), 1);
    release();
    const second = await open([lead, slow], first.dir);
    await second.engine.recovered();
    expect(await second.engine.task('p-crash').result()).toBe(42);
    const events = await second.engine.history('p-crash');
    expect(events.filter((e) => e.type === 'ChildStarted')).toHaveLength(1);
    expect(events.filter((e) => e.type === 'ChildEnded')).toHaveLength(1);
    expect((await second.engine.list()).tasks.map((t) => t.taskId).sort()).toEqual(['p-crash', 'p-crash/c1.1']);
  });

  it('cancelling the parent cancels attached children, not those started with cancelWithParent: false', async () => {
    const forever = defineWorkflow({
      name: 'forever',
      turnTimeoutMs: 60_000,
      turn: async (ctx, _: string) => {
        await new Promise((_r, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true }));
        return 'never';
      },
    });
    const lead = defineWorkflow({
      name: 'lead-cancel',
      turnTimeoutMs: 60_000,
      turn: async (ctx, _: null) => {
        const a = await ctx.startChild(forever, 'a', { childId: 'attached' });
        await ctx.startChild(forever, 'b', { childId: 'detached', cancelWithParent: false });
        return a.result();
      },
    });
    const { engine } = await open([lead, forever]);
    const h = await engine.start(lead, null, { taskId: 'p-cancel' });
    await waitFor(async () => (await engine.history('p-cancel')).filter((e) => e.type === 'ChildStarted').length === 2);
    expect((await engine.history('detached'))[0]).toMatchObject({ parent: { taskId: 'p-cancel', detached: true } });
    await engine.cancel('p-cancel', 'user stopped');
    expect((await h.nextTurn()).status).toBe('cancelled');
    await waitFor(async () => (await engine.describe('attached')).status === 'completed');
    expect((await engine.describe('attached')).outcome).toBe('cancelled');
    expect((await engine.describe('detached')).status).toBe('in_progress');
    await engine.cancel('detached');
  });
});

async function waitFor(cond: () => Promise<boolean>, ms = 10_000): Promise<void> {
  const until = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > until) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}
