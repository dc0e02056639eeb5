/**
 * Flow limits (docs/time.md#flow-limits): a step with `{ limit }` takes a slot and a rate token
 * first, shared by every task of the engine; the wait is recorded on StepCompleted.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/runtime/clock.js';
import { LocalLimiter, gcra, resolveFlowLimits, type LimitGrant } from '../../src/runtime/limits.js';
import { Engine } from '../../src/runtime/engine.js';
import { createTestEngine } from '../../src/testing/test-engine.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { silentLogger } from '../../src/logger.js';
import { isTurnlogError } from '../../src/errors.js';
import { decodeEvent, encodeEvent, encodeEventGeneric } from '../../src/history/codec.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

/** Resolves when `cond` holds, checking after every macrotask (no timing assertions). */
async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 5000; i++) {
    if (cond()) return;
    await new Promise((r) => setTimeout(r, 2));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe('LocalLimiter', () => {
  it('never grants more than `concurrency` at once, first come first served', async () => {
    const clock = new ManualClock();
    const limiter = new LocalLimiter(resolveFlowLimits({ m: { concurrency: 2 } }), clock);
    const order: number[] = [];
    const grants: LimitGrant[] = [];
    const all = [0, 1, 2, 3, 4].map((i) =>
      limiter.acquire('m', new AbortController().signal, 'test').then((g) => {
        order.push(i);
        grants.push(g);
      }),
    );
    await until(() => grants.length === 2, 'two grants');
    expect(limiter.usage('m')).toEqual({ inUse: 2, waiting: 3 });
    grants[0]!.release();
    grants[0]!.release(); // idempotent: frees one slot, not two
    await until(() => grants.length === 3, 'a third grant');
    expect(limiter.usage('m')).toEqual({ inUse: 2, waiting: 2 });
    for (let i = 1; i < 5; i++) {
      grants[i]!.release();
      await until(() => grants.length >= Math.min(5, i + 3), 'the next grant');
    }
    await Promise.all(all);
    expect(order).toEqual([0, 1, 2, 3, 4]);
  });

  it('starts at most burst + perSecond × elapsed, on the injected clock', async () => {
    const clock = new ManualClock();
    const limiter = new LocalLimiter(resolveFlowLimits({ r: { perSecond: 5, burst: 2 } }), clock);
    const t0 = clock.now();
    const starts: number[] = [];
    const waits: number[] = [];
    for (let i = 0; i < 12; i++) {
      void limiter.acquire('r', new AbortController().signal, 'test').then((g) => {
        starts.push(clock.now() - t0);
        waits.push(g.waitedMs);
        g.release();
      });
    }
    await until(() => starts.length === 2, 'the burst');
    for (let ms = 0; ms < 3000 && starts.length < 12; ms += 50) await clock.advance(50);
    expect(starts).toHaveLength(12);
    // Two at once (the burst), then one every 200 ms.
    expect(starts).toEqual([0, 0, 200, 400, 600, 800, 1000, 1200, 1400, 1600, 1800, 2000]);
    expect(waits).toEqual(starts);
    for (const [i, at] of starts.entries()) expect(i + 1).toBeLessThanOrEqual(2 + (5 * at) / 1000);
  });

  it('gcra: a quiet spell refills up to the burst, never more', () => {
    const l = resolveFlowLimits({ r: { perSecond: 10, burst: 3 } }).get('r')!;
    let tat = -Infinity;
    const take = (now: number) => {
      const r = gcra(l, tat, now);
      if ('tat' in r) tat = r.tat;
      return 'tat' in r;
    };
    expect([take(0), take(0), take(0), take(0)]).toEqual([true, true, true, false]);
    expect(gcra(l, tat, 0)).toEqual({ waitMs: 100 });
    expect([take(10_000), take(10_000), take(10_000), take(10_000)]).toEqual([true, true, true, false]);
  });

  it('an aborted waiter leaves the queue; an unknown name is TURNLOG_LIMIT_UNKNOWN', async () => {
    const clock = new ManualClock();
    const limiter = new LocalLimiter(resolveFlowLimits({ m: { concurrency: 1 } }), clock);
    const first = await limiter.acquire('m', new AbortController().signal, 'test');
    const c = new AbortController();
    const waiting = limiter.acquire('m', c.signal, 'test');
    expect(limiter.usage('m')).toEqual({ inUse: 1, waiting: 1 });
    c.abort(new Error('cancelled'));
    await expect(waiting).rejects.toThrow('cancelled');
    expect(limiter.usage('m')).toEqual({ inUse: 1, waiting: 0 });
    first.release();
    expect(limiter.usage('m')).toEqual({ inUse: 0, waiting: 0 });
    const err = await limiter.acquire('nope', new AbortController().signal, 'Task a, turn 1, step 1').catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_LIMIT_UNKNOWN')).toBe(true);
    expect((err as Error).message).toMatch(/Task a, turn 1, step 1: flow limit "nope" is not configured on this engine \(it has: m\)/);
  });

  it('refuses bad options with TURNLOG_INVALID_ARGUMENT', () => {
    for (const bad of [{ x: {} }, { x: { concurrency: 0 } }, { x: { perSecond: -1 } }, { x: { concurrency: 1.5 } }, { x: { burst: 2 } }, { x: { concurrency: 1, nope: 1 } }]) {
      expect(() => resolveFlowLimits(bad as never), JSON.stringify(bad)).toThrow(expect.objectContaining({ code: 'TURNLOG_INVALID_ARGUMENT' }));
    }
  });
});

describe('flow limits in the engine', () => {
  it('steps of many tasks never exceed the concurrency (LevelDB store); StepCompleted records limit and wait', async () => {
    const dir = await makeTmpDir();
    let running = 0;
    let peak = 0;
    const gates: (() => void)[] = [];
    const wf = defineWorkflow({
      name: 'caller',
      turn: async (ctx, i: number) => {
        const a = await ctx.step(
          'model',
          async () => {
            running++;
            peak = Math.max(peak, running);
            await new Promise<void>((r) => gates.push(r));
            running--;
            return i * 2;
          },
          { limit: 'openai' },
        );
        return ctx.step('unlimited', () => a + 1);
      },
    });
    const engine = await Engine.open({ store: dir.path, workflows: [wf], logger: silentLogger, scanIntervalMs: 0, inspect: false, flowLimits: { openai: { concurrency: 3 } } });
    try {
      const handles = await Promise.all(Array.from({ length: 10 }, (_, i) => engine.start(wf, i, { taskId: `c-${i}` })));
      let opened = 0;
      while (opened < 10) {
        await until(() => gates.length > 0, 'a step holding a slot');
        expect(running).toBeLessThanOrEqual(3);
        gates.shift()!();
        opened++;
      }
      const results = await Promise.all(handles.map((h) => h.result()));
      expect(results).toEqual(Array.from({ length: 10 }, (_, i) => i * 2 + 1));
      expect(peak).toBe(3);
      const steps = (await engine.history('c-9')).filter((e) => e.type === 'StepCompleted');
      expect(steps[0]).toMatchObject({ name: 'model', limit: 'openai' });
      expect(typeof (steps[0] as { waitedMs?: number }).waitedMs).toBe('number');
      expect(steps[1]).not.toHaveProperty('limit');
      // The recorded fields survive the store's codec both ways (fast path and generic).
      const back = decodeEvent(encodeEvent(steps[0]!), 'k') as { limit?: string; waitedMs?: number };
      const step = steps[0] as { limit?: string; waitedMs?: number };
      expect([back.limit, back.waitedMs]).toEqual([step.limit, step.waitedMs]);
      const generic = decodeEvent(encodeEventGeneric(steps[0]!), 'k') as { limit?: string; waitedMs?: number };
      expect([generic.limit, generic.waitedMs]).toEqual([step.limit, step.waitedMs]);
    } finally {
      await engine.shutdown({ graceMs: 0 });
      await dir.remove();
    }
  });

  it('the rate holds across tasks on the manual clock, and waitedMs is the recorded wait', async () => {
    const wf = defineWorkflow({
      name: 'rated',
      turn: async (ctx, i: number) => ctx.step('model', () => i, { limit: 'openai' }),
    });
    const t = await createTestEngine({ workflows: [wf], flowLimits: { openai: { perSecond: 5, burst: 1 } } });
    try {
      const handles = await Promise.all(Array.from({ length: 5 }, (_, i) => t.engine.start(wf, i, { taskId: `r-${i}` })));
      for (let i = 0; i < 5; i++) await t.advance(200);
      expect(await Promise.all(handles.map((h) => h.result()))).toEqual([0, 1, 2, 3, 4]);
      const waited = await Promise.all(handles.map(async (_, i) => (await t.history(`r-${i}`)).find((e) => e.type === 'StepCompleted') as { waitedMs: number }));
      expect(waited.map((w) => w.waitedMs).sort((a, b) => a - b)).toEqual([0, 200, 400, 600, 800]);
      // Replay testing does not wait for the limit and accepts the recorded step.
      expect((await t.replay('r-4')).turns).toBe(1);
    } finally {
      await t.close();
    }
  });

  it('an unknown limit fails the step (and the turn) with TURNLOG_LIMIT_UNKNOWN before fn runs', async () => {
    let ran = false;
    const wf = defineWorkflow({
      name: 'typo',
      turn: async (ctx, _: null) =>
        ctx.step(
          'model',
          () => {
            ran = true;
            return 1;
          },
          { limit: 'opneai' },
        ),
    });
    const t = await createTestEngine({ workflows: [wf], flowLimits: { openai: { concurrency: 1 } } });
    try {
      const h = await t.engine.start(wf, null, { taskId: 'typo' });
      const r = await h.nextTurn();
      expect(r.status).toBe('failed');
      expect(r.failure?.code).toBe('TURNLOG_LIMIT_UNKNOWN');
      expect(ran).toBe(false);
      const step = (await t.history('typo')).find((e) => e.type === 'StepCompleted');
      expect(step).toMatchObject({ limit: 'opneai', failure: { code: 'TURNLOG_LIMIT_UNKNOWN' } });
    } finally {
      await t.close();
    }
  });

  it('a cancelled turn waiting for a slot leaves the queue; the slot holder finishing frees it for the next task', async () => {
    const gates: (() => void)[] = [];
    const wf = defineWorkflow({
      name: 'holder',
      turn: async (ctx, _: string) =>
        ctx.step('model', () => new Promise<string>((r) => gates.push(() => r(ctx.taskId))), { limit: 'm' }),
    });
    const t = await createTestEngine({ workflows: [wf], flowLimits: { m: { concurrency: 1 } } });
    try {
      const a = await t.engine.start(wf, 'a', { taskId: 'a' });
      await until(() => gates.length === 1, 'a holds the slot');
      const b = await t.engine.start(wf, 'b', { taskId: 'b' });
      const c = await t.engine.start(wf, 'c', { taskId: 'c' });
      await t.engine.cancel('b');
      expect((await b.nextTurn()).status).toBe('cancelled');
      gates.shift()!();
      expect(await a.result()).toBe('a');
      await until(() => gates.length === 1, 'c takes the slot');
      gates.shift()!();
      expect(await c.result()).toBe('c');
    } finally {
      await t.close();
    }
  });
});
