/**
 * A handle from `engine.task(id)` has no input id; its `result()` / `nextTurn()` report the task's
 * latest turn (issue #10 item 18): after a restart, a caller that started a one-shot task gets its
 * result by task id alone, like Temporal's `getHandle(id).result()`. Real LevelDB in a temp dir.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { isTurnlogError } from '../../src/errors.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const engines: Engine[] = [];
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
  for (const c of cleanups.splice(0)) await c();
});

function gate<T = void>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

async function tmpStore(): Promise<string> {
  const dir = await makeTmpDir('turnlog-handle-');
  cleanups.push(dir.remove);
  return dir.path;
}

async function open(store: string, workflows: Parameters<typeof Engine.open>[0]['workflows']): Promise<Engine> {
  const engine = await Engine.open({ store, workflows, logger: silentLogger, scanIntervalMs: 0 });
  engines.push(engine);
  return engine;
}

async function until(cond: () => Promise<boolean>, what: string): Promise<void> {
  const end = Date.now() + 15_000;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('engine.task(id).result() without an input id', () => {
  it('one-shot, engine restarted mid-turn: waits for the recovered turn and returns its result', async () => {
    const store = await tmpStore();
    const parked = gate();
    const recovered = gate();
    const release = gate();
    const report = defineWorkflow({
      name: 'report',
      turn: async (ctx, topic: string) => {
        const draft = await ctx.step('draft', () => `draft of ${topic}`);
        if (ctx.attempt === 1) {
          parked.resolve();
          return new Promise<never>(() => {}); // the first engine goes away under it
        }
        recovered.resolve();
        await release.promise;
        return `${draft} (final)`;
      },
    });
    const e1 = await open(store, [report]);
    await e1.start(report, 'sales', { taskId: 'r1' });
    await parked.promise;
    await e1.shutdown({ graceMs: 0 }); // the turn stays in progress, like a crash

    const e2 = await open(store, [report]);
    await recovered.promise; // the turn is running again in e2
    const handle = e2.task<string, string>('r1');
    expect(handle.inputId).toBeUndefined();
    const result = handle.result();
    release.resolve();
    expect(await result).toBe('draft of sales (final)');
  });

  it('one-shot, engine restarted after the task ended: reads the result from the history; a failure throws', async () => {
    const store = await tmpStore();
    const echo = defineWorkflow({ name: 'echo', turn: async (ctx, x: string) => ctx.step('echo', () => x.toUpperCase()) });
    const boom = defineWorkflow({
      name: 'boom',
      turn: async () => {
        throw new RangeError('no budget');
      },
    });
    const e1 = await open(store, [echo, boom]);
    expect(await (await e1.start(echo, 'hi', { taskId: 'e1' })).result()).toBe('HI');
    await (await e1.start(boom, null, { taskId: 'b1' })).nextTurn();
    await e1.shutdown();

    const e2 = await open(store, [echo, boom]);
    expect(await e2.task('e1').result()).toBe('HI');
    expect(await e2.task('e1').nextTurn()).toMatchObject({ taskId: 'e1', turn: 1, status: 'completed', output: 'HI', inputIds: [expect.any(String)] });
    const err = await e2.task('b1').result().catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_TURN_FAILED')).toBe(true);
    expect((err as Error).message).toContain('no budget');
  });

  it('multi-turn: the last ended turn while suspended, the running turn’s end while one runs', async () => {
    const store = await tmpStore();
    const release = gate();
    const running = gate();
    const chat = defineWorkflow({
      name: 'chat',
      kind: 'multi-turn',
      turn: async (ctx, text: string) => {
        if (text === 'slow') {
          running.resolve();
          await release.promise;
        }
        return ctx.suspend('waiting', `echo ${text}`);
      },
    });
    const e1 = await open(store, [chat]);
    await (await e1.start(chat, 'one', { taskId: 'c1' })).nextTurn();
    await e1.shutdown();

    const e2 = await open(store, [chat]);
    const byId = e2.task<string, string>('c1');
    expect(await byId.nextTurn()).toMatchObject({ turn: 1, status: 'suspended', output: 'echo one' });
    const started = e2.task<string, string>('c1');
    await started.send('slow'); // this handle now has an input id; `byId` still has none
    await running.promise;
    const latest = byId.result();
    release.resolve();
    expect(await latest).toBe('echo slow');
    expect(await started.nextTurn()).toMatchObject({ turn: 2, status: 'suspended' });
  });

  it('an unknown task is TURNLOG_TASK_NOT_FOUND; a shut-down engine defers a running turn', async () => {
    const store = await tmpStore();
    const parked = gate();
    const wf = defineWorkflow({
      name: 'hang',
      turn: async () => {
        parked.resolve();
        return new Promise<never>(() => {});
      },
    });
    const e1 = await open(store, [wf]);
    const err = await e1.task('nope').result().catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_TASK_NOT_FOUND')).toBe(true);
    await e1.start(wf, null, { taskId: 'h1' });
    await parked.promise;
    const waiting = e1.task('h1').result().catch((e: unknown) => e);
    await until(async () => (await e1.history('h1')).some((e) => e.type === 'TurnStarted'), 'the turn to start');
    await e1.shutdown({ graceMs: 0 });
    expect(isTurnlogError(await waiting, 'TURNLOG_TURN_DEFERRED')).toBe(true);
  });
});
