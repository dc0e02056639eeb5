/**
 * Durable time (docs/time.md): ctx.sleep is recorded before it waits, a re-run sleeps only the
 * remainder, and the manual clock of createTestEngine skips it.
 */
import { describe, expect, it } from 'vitest';
import { createTestEngine } from '../../src/testing/test-engine.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { HistoryBuilder } from '../../src/testing/history-builder.js';
import { replayHistory } from '../../src/testing/replay-history.js';
import { fold } from '../../src/replay/fold.js';
import { isTurnlogError } from '../../src/errors.js';

const HOUR = 3_600_000;

describe('ctx.sleep', () => {
  it('records TimerStarted, waits on the engine clock, and replays without waiting', async () => {
    const woke: number[] = [];
    const wf = defineWorkflow({
      name: 'napper',
      turnTimeoutMs: 2 * HOUR,
      turn: async (ctx, _: null) => {
        await ctx.sleep(HOUR);
        woke.push(Date.now());
        return ctx.step('after', () => 'done');
      },
    });
    const t = await createTestEngine({ workflows: [wf] });
    try {
      const start = t.clock.now();
      const h = await t.engine.start(wf, null, { taskId: 'nap' });
      await t.advance(HOUR - 1);
      expect(woke).toHaveLength(0);
      await t.advance(1);
      expect(await h.result()).toBe('done');
      const timer = (await t.history('nap')).find((e) => e.type === 'TimerStarted');
      expect(timer).toMatchObject({ type: 'TimerStarted', turn: 1, seq: 1, durationMs: HOUR, fireAt: start + HOUR });
      const report = await t.replay('nap');
      expect(report.turns).toBe(1);
    } finally {
      await t.close();
    }
  });

  it('a re-run after a crash sleeps only the remainder (the recorded fire time)', async () => {
    const seen: { attempt: number; at: number }[] = [];
    const wf = defineWorkflow({
      name: 'napper2',
      turnTimeoutMs: 2 * HOUR,
      turn: async (ctx, _: null) => {
        await ctx.sleep(HOUR);
        seen.push({ attempt: ctx.attempt, at: -1 });
        return 'up';
      },
    });
    const t1 = await createTestEngine({ workflows: [wf] });
    const start = t1.clock.now();
    await t1.engine.start(wf, null, { taskId: 'crashy' });
    await t1.advance(HOUR / 2);
    // The engine dies mid-sleep: nothing after TimerStarted is written.
    await t1.close();
    expect(seen).toHaveLength(0);
    expect((await t1.store.readEvents('crashy')).map((e) => e.type)).toContain('TimerStarted');
    const t2 = await createTestEngine({ workflows: [wf], store: t1.store, clock: t1.clock });
    try {
      await t2.engine.recover();
      await t2.advance(HOUR / 2 - 1);
      expect(seen).toHaveLength(0);
      await t2.advance(1);
      expect(await t2.engine.task('crashy').result()).toBe('up');
      expect(t2.clock.now()).toBe(start + HOUR);
      expect(seen.map((s) => s.attempt)).toEqual([2]);
    } finally {
      await t2.close();
    }
  });

  it('refuses a negative or non-finite duration with TURNLOG_INVALID_ARGUMENT', async () => {
    const wf = defineWorkflow({ name: 'bad-nap', turn: async (ctx, ms: number) => ctx.sleep(ms).then(() => 'x') });
    const t = await createTestEngine({ workflows: [wf] });
    try {
      const r = await (await t.engine.start(wf, -5, { taskId: 'bad' })).nextTurn();
      expect(r.status).toBe('failed');
      expect(r.failure?.message).toMatch(/ctx\.sleep\(\) needs a finite number/);
      expect((await t.history('bad')).some((e) => e.type === 'TimerStarted')).toBe(false);
    } finally {
      await t.close();
    }
  });

  it('replay testing returns the recorded timer and flags a sleep where a step was recorded', async () => {
    const wf = defineWorkflow({ name: 'r', turn: async (ctx, _: null) => { await ctx.sleep(1000); return 1; } });
    const b = new HistoryBuilder('r1', {}).created({ workflow: 'r' }).input(null).turnStarted().sleep(1000).completed(1);
    const ok = await replayHistory({ history: [...b.events], workflows: [wf] });
    expect(ok.turns).toBe(1);
    expect(fold('r1', [...b.events]).lastTurn?.terminal).toBe('TurnCompleted');
    const other = new HistoryBuilder('r1', {}).created({ workflow: 'r' }).input(null).turnStarted().step('s', 1).completed(1);
    const bad = await replayHistory({ history: [...other.events], workflows: [wf] }).catch((e: unknown) => e);
    expect(isTurnlogError(bad, 'TURNLOG_NON_DETERMINISM')).toBe(true);
    expect((bad as Error).message).toMatch(/sleep\(1000 ms\)/);
  });
});

const DAY = 24 * HOUR;

describe('send(input, { deliverAt })', () => {
  const reminder = defineWorkflow({
    name: 'reminder',
    kind: 'multi-turn',
    turn: async (ctx, input: string) => {
      const taken = await ctx.takeInputs<string>();
      return ctx.suspend('waiting', { heard: input, taken, turn: ctx.turn, at: ctx.entryMode });
    },
  });

  it('a one-day reminder: no turn before deliverAt, rule waiting-for-timer, then timer-due (ms of test time)', async () => {
    const t = await createTestEngine({ workflows: [reminder] });
    try {
      const h = await t.engine.start(reminder, 'hello', { taskId: 'rem' });
      expect(await h.result()).toMatchObject({ heard: 'hello', turn: 1 });
      const due = t.clock.now() + DAY;
      const inputId = await h.send('standup in 5 minutes', { deliverAt: new Date(due) });
      // Sent now but not due: takeInputs of a running turn would not take it either.
      const before = await t.engine.describe('rem');
      expect(before.decision).toMatchObject({ kind: 'none', rule: 'waiting-for-timer', wakeAt: due });
      expect(before.queuedInputIds).toEqual([inputId]);
      await t.advance(DAY - 1);
      expect((await t.engine.describe('rem')).turn).toBe(1);
      await t.advance(1);
      const r = await t.engine.turnResult('rem', inputId);
      expect(r).toMatchObject({ status: 'suspended', output: { heard: 'standup in 5 minutes', turn: 2, taken: [] } });
      const events = await t.history('rem');
      const started = events.filter((e) => e.type === 'TurnStarted');
      expect(started[1]!.time).toBe(due);
      expect(events.find((e) => e.type === 'InputQueued' && e.inputId === inputId)).toMatchObject({ deliverAt: due, steering: false });
      expect((await t.replay('rem')).turns).toBe(2);
    } finally {
      await t.close();
    }
  });

  it('a running turn does not take a scheduled input early (takeInputs, pendingInputCount)', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const seen: { pending: number; taken: string[] }[] = [];
    const wf = defineWorkflow({
      name: 'steady',
      kind: 'multi-turn',
      turn: async (ctx, input: string) => {
        if (input === 'first') await gate;
        seen.push({ pending: ctx.pendingInputCount, taken: await ctx.takeInputs<string>() });
        return ctx.suspend('idle');
      },
    });
    const t = await createTestEngine({ workflows: [wf] });
    try {
      const h = await t.engine.start(wf, 'first', { taskId: 's', inputId: 'in-first' });
      const later = await h.send('later', { deliverAt: t.clock.now() + HOUR });
      release();
      await t.engine.turnResult('s', 'in-first');
      expect(seen[0]).toEqual({ pending: 0, taken: [] });
      await t.advance(HOUR);
      expect(await t.engine.turnResult('s', later)).toMatchObject({ status: 'suspended' });
      expect(seen[1]).toEqual({ pending: 0, taken: [] });
    } finally {
      await t.close();
    }
  });

  it('a scheduled first input delays the start of a new task (pending until due)', async () => {
    const t = await createTestEngine({ workflows: [reminder] });
    try {
      const at = t.clock.now() + 10 * 60_000;
      const h = await t.engine.start(reminder, 'later', { taskId: 'delayed', deliverAt: at });
      expect((await t.engine.describe('delayed')).status).toBe('pending');
      await t.advance(10 * 60_000);
      expect(await h.result()).toMatchObject({ heard: 'later', turn: 1 });
    } finally {
      await t.close();
    }
  });

  it('due inputs fire after a restart: the first scan arms the wake-up', async () => {
    const t1 = await createTestEngine({ workflows: [reminder] });
    const h = await t1.engine.start(reminder, 'a', { taskId: 'restart' });
    await h.result();
    const inputId = await h.send('b', { deliverAt: t1.clock.now() + DAY });
    await t1.close();
    const t2 = await createTestEngine({ workflows: [reminder], store: t1.store, clock: t1.clock });
    try {
      await t2.engine.recover();
      await t2.advance(DAY);
      expect(await t2.engine.turnResult('restart', inputId)).toMatchObject({ status: 'suspended', output: { heard: 'b', turn: 2 } });
    } finally {
      await t2.close();
    }
  });

  it('refuses a deliverAt that is not a time with TURNLOG_INVALID_ARGUMENT, writing nothing', async () => {
    const t = await createTestEngine({ workflows: [reminder] });
    try {
      const err = await t.engine.start(reminder, 'x', { taskId: 'bad-at', deliverAt: Number.NaN }).catch((e: unknown) => e);
      expect(isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT')).toBe(true);
      expect((err as Error).message).toMatch(/Task bad-at: deliverAt/);
      expect(await t.store.readEvents('bad-at')).toEqual([]);
    } finally {
      await t.close();
    }
  });
});

describe('takeInputs({ wait: true, timeoutMs })', () => {
  const asker = defineWorkflow({
    name: 'asker',
    kind: 'multi-turn',
    turnTimeoutMs: HOUR,
    turn: async (ctx, _q: string) => {
      const answers = await ctx.takeInputs<string>({ wait: true, timeoutMs: 60_000 });
      return ctx.suspend('idle', answers.length === 0 ? 'no answer' : `got ${answers.join(',')}`);
    },
  });

  it('gives up after timeoutMs on the engine clock and records an empty take (replay returns it)', async () => {
    const t = await createTestEngine({ workflows: [asker] });
    try {
      const h = await t.engine.start(asker, 'confirm?', { taskId: 'ask' });
      await t.advance(59_000);
      expect((await t.engine.describe('ask')).openTurn?.running).toBe(true);
      await t.advance(1_000);
      expect(await h.result()).toBe('no answer');
      expect((await t.history('ask')).find((e) => e.type === 'InputsTaken')).toMatchObject({ inputIds: [] });
      expect((await t.replay('ask')).turns).toBe(1);
    } finally {
      await t.close();
    }
  });

  it('returns the input that arrives before the timeout', async () => {
    const t = await createTestEngine({ workflows: [asker] });
    try {
      const h = await t.engine.start(asker, 'confirm?', { taskId: 'ask2' });
      await t.advance(10_000);
      await h.send('yes');
      await t.advance(1_000);
      expect(await t.engine.turnResult('ask2', (await t.engine.describe('ask2')).lastInputId!)).toMatchObject({ status: 'suspended', output: 'got yes' });
    } finally {
      await t.close();
    }
  });
});

describe('step timeoutMs and RetryAfterError', () => {
  it('a try that outlives timeoutMs fails with TURNLOG_STEP_TIMED_OUT and its signal aborts; the retry succeeds', async () => {
    const aborted: unknown[] = [];
    const wf = defineWorkflow({
      name: 'slow-step',
      retry: { maxAttempts: 2, initialIntervalMs: 100 },
      turn: async (ctx, _: null) =>
        ctx.step(
          'call',
          (signal) =>
            new Promise<string>((resolve) => {
              if (ctx.attempt === 1 && aborted.length === 0) signal.addEventListener('abort', () => aborted.push(signal.reason));
              else resolve('second try');
            }),
          { timeoutMs: 5_000 },
        ),
    });
    const t = await createTestEngine({ workflows: [wf] });
    try {
      const h = await t.engine.start(wf, null, { taskId: 'slow' });
      await t.advance(5_000);
      expect(aborted).toHaveLength(1);
      expect(isTurnlogError(aborted[0], 'TURNLOG_STEP_TIMED_OUT')).toBe(true);
      // The 100 ms backoff carries the default ±20% jitter: at most 120 ms.
      await t.advance(120);
      expect(await h.result()).toBe('second try');
    } finally {
      await t.close();
    }
  });

  it('RetryAfterError waits the suggested delay instead of the backoff', async () => {
    const tries: number[] = [];
    const { RetryAfterError } = await import('../../src/errors.js');
    const wf = defineWorkflow({
      name: 'rate-limited',
      retry: { maxAttempts: 3, initialIntervalMs: 100 },
      turn: async (ctx, _: null) =>
        ctx.step('model', () => {
          tries.push(Date.now());
          if (tries.length === 1) throw new RetryAfterError(30_000, '429');
          return 'ok';
        }),
    });
    const t = await createTestEngine({ workflows: [wf] });
    try {
      const h = await t.engine.start(wf, null, { taskId: 'rl' });
      await t.advance(29_999);
      expect(tries).toHaveLength(1);
      await t.advance(1);
      expect(await h.result()).toBe('ok');
      expect(tries).toHaveLength(2);
    } finally {
      await t.close();
    }
  });

  it('refuses a timeoutMs that is not a positive finite number before anything is recorded', async () => {
    const wf = defineWorkflow({ name: 'bad-timeout', turn: async (ctx, _: null) => ctx.step('s', () => 1, { timeoutMs: -1 }) });
    const t = await createTestEngine({ workflows: [wf] });
    try {
      const r = await (await t.engine.start(wf, null, { taskId: 'bt' })).nextTurn();
      expect(r.failure?.message).toMatch(/timeoutMs must be a finite number/);
      expect((await t.history('bt')).some((e) => e.type === 'StepCompleted')).toBe(false);
    } finally {
      await t.close();
    }
  });
});
