/**
 * Issue #10 items 1–2 through the engine on a real LevelDB store: text cut inside an emoji
 * (model output cut to a length) in an error message, a step failure or a suspend reason is
 * stored well-formed and the task stays readable after a restart; ill-formed ids are refused
 * at the call, before anything is written.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { isTurnlogError } from '../../src/errors.js';
import type { HistoryEvent } from '../../src/history/events.js';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const HALF = 'Sure 😀'.slice(0, 6);
const REPLACED = 'Sure \uFFFD';

const engines: Engine[] = [];
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
  for (const c of cleanups.splice(0)) await c();
});

const failing = defineWorkflow({
  name: 'failing',
  turn: async (ctx) => {
    await ctx.step('fetch', () => {
      throw new Error(HALF);
    }).catch(() => undefined);
    throw new Error(HALF);
  },
});
const chat = defineWorkflow({
  name: 'chat',
  kind: 'multi-turn',
  turn: async (ctx, msg: string) => ctx.suspend(msg.slice(0, 6), msg.slice(0, 6)),
});
const badStep = defineWorkflow({ name: 'bad-step', turn: async (ctx) => ctx.step(HALF, () => 1) });

async function openAt(dir: string): Promise<Engine> {
  const engine = await Engine.open({ store: dir, workflows: [failing, chat, badStep], logger: silentLogger, scanIntervalMs: 0 });
  engines.push(engine);
  return engine;
}

async function tmp(): Promise<string> {
  const d = await makeTmpDir('turnlog-strings-');
  cleanups.push(d.remove);
  return d.path;
}

describe('engine: lone surrogates in free text', () => {
  it('a handler error, a step failure and a suspend reason cut inside an emoji stay readable after a restart', async () => {
    const dir = await tmp();
    const first = await openAt(dir);
    const f = await first.start(failing, null, { taskId: 'f1' });
    const r = await f.nextTurn();
    expect(r.status).toBe('failed');
    // What the live engine reports is what a reload reads back.
    expect(r.failure?.message).toBe(REPLACED);
    const c = await first.start(chat, 'Sure 😀 and more', { taskId: 'c1' });
    expect(await c.nextTurn()).toMatchObject({ status: 'suspended', reason: REPLACED });
    await first.shutdown({ graceMs: 0 });

    const second = await openAt(dir);
    const events: HistoryEvent[] = await second.history('f1');
    const step = events.find((e) => e.type === 'StepCompleted');
    expect(step).toMatchObject({ failure: { message: REPLACED } });
    expect(events.find((e) => e.type === 'TurnFailed')).toMatchObject({ failure: { message: REPLACED } });
    expect((await second.describe('f1')).status).toBe('completed');
    expect(await second.task('f1').turnResult(f.inputId!)).toMatchObject({ status: 'failed', failure: { message: REPLACED } });
    // Payloads are bytes (JSON escapes the surrogate): the output round-trips exactly.
    expect((await second.describe('c1')).lastOutput).toBe(HALF);
    expect((await second.history('c1')).find((e) => e.type === 'TurnSuspended')).toMatchObject({ reason: REPLACED });
    // Later turns still run: the task is not stuck behind an unreadable event.
    const c2 = second.task<string>('c1');
    await c2.send('next');
    expect(await c2.nextTurn()).toMatchObject({ status: 'suspended', reason: 'next' });
  });
});

describe('engine: ill-formed ids are refused before anything is written', () => {
  it('a withdraw reason cut inside an emoji: the waiting caller reads what a reload reads', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const slow = defineWorkflow({
      name: 'slow',
      kind: 'multi-turn',
      turn: async (ctx, msg: string) => {
        if (msg === 'first') await gate;
        return ctx.suspend('waiting', msg);
      },
    });
    const dir = await tmp();
    const engine = await Engine.open({ store: dir, workflows: [slow], logger: silentLogger, scanIntervalMs: 0 });
    engines.push(engine);
    const h = await engine.start(slow, 'first', { taskId: 'w1' });
    const queued = await h.send('second', { inputId: 'in-2' });
    const waiting = engine.turnResult('w1', queued);
    await engine.withdraw('w1', queued, HALF);
    expect(await waiting).toMatchObject({ status: 'withdrawn', reason: REPLACED });
    release();
    await h.nextTurn();
    await engine.shutdown({ graceMs: 0 });
    const again = await openAt(dir);
    expect(await again.turnResult('w1', queued)).toMatchObject({ status: 'withdrawn', reason: REPLACED });
  });

  it('task ids and input ids', async () => {
    const dir = await tmp();
    const engine = await openAt(dir);
    for (const taskId of [`chat-${HALF}`, 'chat-\ud800', 'chat-\ud801']) {
      const err = await engine.start(chat, 'hi', { taskId }).catch((e: unknown) => e);
      expect(isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT'), taskId).toBe(true);
    }
    const err = await engine.start(chat, 'hi', { taskId: 'ok', inputId: HALF }).catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT')).toBe(true);
    expect((err as Error).message).toContain('inputId "Sure \\ud83d"');
    expect((await engine.list()).tasks).toEqual([]);
    // Two ids that differ only in a lone surrogate must not share a history (they were one key).
    const a = await engine.start(chat, 'a', { taskId: 'chat-a' });
    await a.nextTurn();
    const sendErr = await a.send('b', { inputId: 'in-\udc00' }).catch((e: unknown) => e);
    expect(isTurnlogError(sendErr, 'TURNLOG_INVALID_ARGUMENT')).toBe(true);
    expect((await a.history()).filter((e) => e.type === 'InputQueued')).toHaveLength(1);
  });

  it('a step name with a lone surrogate fails the call, and nothing is recorded for it', async () => {
    const engine = await openAt(await tmp());
    const h = await engine.start(badStep, null, { taskId: 's1' });
    const r = await h.nextTurn();
    expect(r).toMatchObject({ status: 'failed', failure: { code: 'TURNLOG_INVALID_ARGUMENT' } });
    expect((await h.history()).some((e) => e.type === 'StepCompleted')).toBe(false);
  });

  it('an engine owner or instance with a lone surrogate is refused at open', async () => {
    const dir = await tmp();
    for (const o of [{ owner: HALF }, { instance: HALF }]) {
      const err = await Engine.open({ store: dir, workflows: [chat], logger: silentLogger, scanIntervalMs: 0, ...o }).catch((e: unknown) => e);
      expect(isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT')).toBe(true);
    }
  });
});
