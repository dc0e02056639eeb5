import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { replayHistory } from '../../src/testing/index.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import type { TurnContext } from '../../src/workflow/context.js';
import { ProcessExecutor } from '../../src/executor/process-executor.js';
import type { Logger } from '../../src/logger.js';
import * as fixtures from '../fixtures/workflows/index.js';
import { ensureBuilt, ROOT } from '../cli/run-cli.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

/** Records every key a handler sees, labelled by where it asked. */
function keyLog() {
  const keys: Record<string, string[]> = {};
  return {
    keys,
    note(label: string, ctx: Pick<TurnContext, 'idempotencyKey'>, name?: string): string {
      const k = name === undefined ? ctx.idempotencyKey() : ctx.idempotencyKey(name);
      (keys[label] ??= []).push(k);
      return k;
    },
  };
}

describe('ctx.idempotencyKey(name?)', () => {
  it('is the same across retries of one step, distinct per step, name, turn and task', async () => {
    const log = keyLog();
    let failOnce = true;
    const wf = defineWorkflow({
      name: 'keys',
      kind: 'multi-turn',
      retry: { initialIntervalMs: 1, maxIntervalMs: 1 },
      turn: async (ctx, _msg: string) => {
        log.note(`${ctx.taskId}/t${ctx.turn}:before-a`, ctx);
        await ctx.step('a', () => void log.note(`${ctx.taskId}/t${ctx.turn}:a`, ctx));
        log.note(`${ctx.taskId}/t${ctx.turn}:before-b`, ctx, 'refund');
        await ctx.step('b', async () => {
          log.note(`${ctx.taskId}/t${ctx.turn}:b`, ctx, 'refund');
          log.note(`${ctx.taskId}/t${ctx.turn}:b-other`, ctx, 'email');
          await new Promise((r) => setTimeout(r, 1)); // the key survives awaits inside the step
          log.note(`${ctx.taskId}/t${ctx.turn}:b-late`, ctx, 'refund');
          if (failOnce) {
            failOnce = false;
            throw new Error('transient'); // retried: same step, so the same key
          }
        });
        // Parallel steps each see their own key, whatever order their fns interleave in.
        await Promise.all([
          ctx.step('p1', async () => {
            await new Promise((r) => setTimeout(r, 2));
            log.note(`${ctx.taskId}/t${ctx.turn}:p1`, ctx);
          }),
          ctx.step('p2', () => void log.note(`${ctx.taskId}/t${ctx.turn}:p2`, ctx)),
        ]);
        return ctx.suspend('waiting');
      },
    });
    // The system clock: the step retry's backoff sleeps 1 ms for real.
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    cleanups.push(() => engine.shutdown({ graceMs: 0 }));
    const h = await engine.start(wf, 'one', { taskId: 'k1' });
    expect((await h.nextTurn()).status).toBe('suspended');
    await h.send('two');
    expect((await h.nextTurn()).status).toBe('suspended');
    const other = await engine.start(wf, 'one', { taskId: 'k2' });
    expect((await other.nextTurn()).status).toBe('suspended');

    const k = log.keys;
    expect(k['k1/t1:b']).toHaveLength(2); // one failed try, one retry
    expect(new Set([...k['k1/t1:b']!, ...k['k1/t1:b-late']!, ...k['k1/t1:before-b']!]).size).toBe(1);
    expect(k['k1/t1:before-a']).toEqual(k['k1/t1:a']); // before a step: that (next) step's key
    for (const key of Object.values(k).flat()) expect(key).toMatch(/^tl_[A-Za-z0-9_-]{32}$/);
    // Distinct per step (a, b, p1, p2), per name within a step, per turn and per task.
    const keysOf = (prefix: string) => ['a', 'b', 'b-other', 'p1', 'p2'].map((l) => k[`${prefix}:${l}`]![0]!);
    const all = [...keysOf('k1/t1'), ...keysOf('k1/t2'), ...keysOf('k2/t1')];
    expect(new Set(all).size).toBe(15);
  });

  it('a recovered attempt (after the engine died mid-step) gets the same key; so does the replay tester', async () => {
    const dir = await makeTmpDir();
    cleanups.push(dir.remove);
    const log = keyLog();
    let entered!: () => void;
    const inRefund = new Promise<void>((r) => (entered = r));
    const wf = defineWorkflow({
      name: 'refunder',
      turn: async (ctx) => {
        const order = await ctx.step('lookup', () => 'order-1042');
        log.note('outside', ctx, 'refund');
        return ctx.step('refund', async () => {
          const key = log.note('inside', ctx, 'refund');
          if (ctx.attempt === 1) {
            entered();
            await new Promise(() => {}); // "the payment API call" never returns: the process dies here
          }
          return `${order} refunded with ${key}`;
        });
      },
    });
    const e1 = await Engine.open({ store: dir.path, workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    const h1 = await e1.start(wf, null, { taskId: 'chat-1042' });
    await inRefund;
    const deferred = h1.result().catch((e: unknown) => e);
    await e1.shutdown({ graceMs: 0 }); // leaves the turn in progress, like a crash
    await deferred;

    const e2 = await Engine.open({ store: dir.path, workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    try {
      const result = await e2.turnResult<string>('chat-1042', h1.inputId!);
      expect(result).toMatchObject({ status: 'completed' });
      expect(log.keys['inside']).toHaveLength(2); // attempt 1 (died) and attempt 2 (recovered)
      expect(log.keys['inside']![1]).toBe(log.keys['inside']![0]);
      expect(log.keys['outside']).toEqual([log.keys['inside']![0], log.keys['inside']![0]]);
      expect(result.output).toBe(`order-1042 refunded with ${log.keys['inside']![0]}`);

      // The replay tester's context derives the same key (the refund fn is not run there).
      await replayHistory({ history: await e2.history('chat-1042'), taskId: 'chat-1042', workflows: [wf] });
      expect(log.keys['outside']).toHaveLength(3);
      expect(log.keys['outside']![2]).toBe(log.keys['inside']![0]);
    } finally {
      await e2.shutdown({ graceMs: 0 });
    }
  });

  it('a process worker derives the same key: a worker that died mid-step and its successor agree', async () => {
    ensureBuilt(); // workers import the compiled fixtures
    const printed: string[] = [];
    const logger: Logger = {
      info: (_m, f) => {
        const line = String(f?.['line'] ?? '');
        if (line.startsWith('refund-key ')) printed.push(line.slice('refund-key '.length));
      },
      warn: () => {},
      error: () => {},
    };
    const exec = new ProcessExecutor({ workflowsModule: `${ROOT}/dist/test/fixtures/workflows/index.js`, execArgv: [], logger });
    const engine = await Engine.open({
      store: new MemoryHistoryStore(),
      workflows: Object.values(fixtures),
      executors: { process: exec },
      logger: silentLogger,
      scanIntervalMs: 0,
    });
    cleanups.push(async () => {
      await engine.shutdown({ graceMs: 100 });
      await exec.close();
    });
    const h = await engine.start(fixtures.keyThenCrash, null, { taskId: 'chat-1042' });
    const out = (await h.result()) as { key: string; before: string; attempt: number; pid: number };
    expect(out.attempt).toBe(2);
    expect(printed).toHaveLength(1); // attempt 1's worker printed its key, then died
    expect(out.key).toBe(printed[0]);
    expect(out.before).toBe(printed[0]);
    expect((await h.history()).filter((e) => e.type === 'WorkerCrashed')).toHaveLength(1);
  });
  it('a step fn that returns a plain value (recorded at once) keeps its own key in work it leaves running, after later steps started', async () => {
    const log = keyLog();
    let leftDone!: () => void;
    const left = new Promise<void>((r) => (leftDone = r));
    const wf = defineWorkflow({
      name: 'left-running',
      turn: async (ctx) => {
        log.note('before-a', ctx);
        await ctx.step('a', () => {
          log.note('a', ctx);
          // Work the fn leaves running past its plain return: still step a's scope.
          setTimeout(() => {
            log.note('a-left', ctx);
            void Promise.resolve().then(() => log.note('a-left-later', ctx));
            setTimeout(leftDone, 1);
          }, 5);
          return 'plain';
        });
        await ctx.step('b', async () => {
          log.note('b', ctx);
          await left; // a's leftover work runs while b is the running step
          log.note('b-after', ctx);
        });
        log.note('after', ctx);
        return 'done';
      },
    });
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    cleanups.push(() => engine.shutdown({ graceMs: 0 }));
    const h = await engine.start(wf, null, { taskId: 'left' });
    expect(await h.result()).toBe('done');
    const k = log.keys;
    expect(k['before-a']).toEqual(k['a']);
    expect(k['a-left']).toEqual(k['a']);
    expect(k['a-left-later']).toEqual(k['a']);
    expect(k['b-after']).toEqual(k['b']);
    expect(k['b']![0]).not.toBe(k['a']![0]);
    expect(new Set([k['a']![0], k['b']![0], k['after']![0]]).size).toBe(3);
  });
});
