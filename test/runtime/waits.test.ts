/**
 * Named waits (docs/time.md#waiting-for-an-event-approvals): ctx.waitFor is recorded
 * (WaitStarted, WaitEnded), task.signal is an event (SignalReceived) buffered until a wait takes
 * it, the timeout runs on the engine clock (skipped by the manual clock), a re-run waits only the
 * remainder, and replay gets the recorded outcome back.
 */
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { createTestEngine } from '../../src/testing/test-engine.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { isTurnlogError } from '../../src/errors.js';
import { fold } from '../../src/replay/fold.js';
import type { EventType, HistoryEvent } from '../../src/history/events.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { silentLogger } from '../../src/logger.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const HOUR = 3_600_000;

/** Resolves once an event of `type` was appended to `taskId` (a wait for a condition, not a sleep). */
function appended(engine: Engine, taskId: string, type: EventType, count = 1): Promise<HistoryEvent> {
  return new Promise((resolve) => {
    let seen = 0;
    const stop = engine.observe({
      eventsAppended: (e) => {
        if (e.taskId !== taskId) return;
        for (const ev of e.events) {
          if (ev.type === type && ++seen === count) {
            stop();
            resolve(ev);
          }
        }
      },
    });
  });
}

const approval = defineWorkflow({
  name: 'approval',
  turnTimeoutMs: 2 * HOUR,
  turn: async (ctx, amount: number) => {
    const r = await ctx.waitFor<{ approved: boolean }>('approval', { timeoutMs: HOUR });
    if (!r.ok) return `timed out on ${amount}`;
    return r.value.approved ? `refunded ${amount}` : `refused ${amount}`;
  },
});

describe('ctx.waitFor and task.signal', () => {
  it('a signal sent while the turn waits ends the wait with its value; the history replays', async () => {
    const t = await createTestEngine({ workflows: [approval] });
    try {
      const started = appended(t.engine, 'r1', 'WaitStarted');
      const h = await t.engine.start(approval, 40, { taskId: 'r1' });
      const ws = await started;
      expect(ws).toMatchObject({ type: 'WaitStarted', turn: 1, seq: 1, name: 'approval', timeoutMs: HOUR, deadline: t.clock.now() + HOUR });
      const id = await h.signal('approval', { approved: true });
      expect(await h.result()).toBe('refunded 40');
      const events = await t.history('r1');
      expect(events.map((e) => e.type).filter((x) => x !== 'LeaseClaimed')).toEqual(['TaskCreated', 'InputQueued', 'TurnStarted', 'WaitStarted', 'SignalReceived', 'WaitEnded', 'TurnCompleted', 'TaskCompleted']);
      expect(events.find((e) => e.type === 'WaitEnded')).toMatchObject({ seq: 1, signalId: id, timedOut: false });
      expect(fold('r1', events).signals).toBeUndefined(); // taken, no longer buffered
      expect((await t.replay('r1')).turns).toBe(1);
    } finally {
      await t.close();
    }
  });

  it('a signal sent before the wait is buffered durably and taken at once', async () => {
    const wf = defineWorkflow({
      name: 'late-waiter',
      kind: 'multi-turn',
      turn: async (ctx, text: string) => {
        if (text === 'first') return ctx.suspend('idle', 'no wait yet');
        const r = await ctx.waitFor<string>('go', { timeoutMs: HOUR });
        return ctx.suspend('done', r.ok ? r.value : 'timeout');
      },
    });
    const t = await createTestEngine({ workflows: [wf] });
    try {
      const h = await t.engine.start(wf, 'first', { taskId: 'b1' });
      await h.result();
      await t.engine.signal('b1', 'go', 'early bird');
      expect((await t.history('b1')).at(-1)).toMatchObject({ type: 'SignalReceived', name: 'go' });
      await h.send('second');
      expect(await h.result()).toBe('early bird');
      expect((await t.replay('b1')).turns).toBe(2);
    } finally {
      await t.close();
    }
  });

  it('times out on the engine clock (the manual clock skips the hour); the timeout is recorded', async () => {
    const t = await createTestEngine({ workflows: [approval] });
    try {
      const started = appended(t.engine, 'r2', 'WaitStarted');
      const h = await t.engine.start(approval, 7, { taskId: 'r2' });
      await started;
      await t.advance(HOUR - 1);
      expect((await t.history('r2')).some((e) => e.type === 'WaitEnded')).toBe(false);
      await t.advance(1);
      expect(await h.result()).toBe('timed out on 7');
      expect((await t.history('r2')).find((e) => e.type === 'WaitEnded')).toMatchObject({ seq: 1, signalId: '', timedOut: true });
      // A signal after the timeout is buffered for a later wait; it changes nothing here.
      await expect(t.engine.signal('r2', 'approval', { approved: true })).rejects.toSatisfy((e: unknown) => isTurnlogError(e, 'TURNLOG_TASK_CONFLICT'));
      expect((await t.replay('r2')).turns).toBe(1);
    } finally {
      await t.close();
    }
  });

  it('a re-run after a crash waits only the remainder of the recorded deadline', async () => {
    const t1 = await createTestEngine({ workflows: [approval] });
    const start = t1.clock.now();
    const started = appended(t1.engine, 'r3', 'WaitStarted');
    await t1.engine.start(approval, 9, { taskId: 'r3' });
    await started;
    await t1.advance(HOUR / 2);
    await t1.close(); // dies mid-wait: nothing after WaitStarted
    const t2 = await createTestEngine({ workflows: [approval], store: t1.store, clock: t1.clock });
    try {
      const restarted = appended(t2.engine, 'r3', 'TurnStarted');
      await t2.engine.recover();
      await restarted;
      await t2.advance(HOUR / 2 - 1);
      expect((await t2.history('r3')).some((e) => e.type === 'WaitEnded')).toBe(false);
      await t2.advance(1);
      expect(await t2.engine.task('r3').result()).toBe('timed out on 9');
      const ended = (await t2.history('r3')).find((e) => e.type === 'WaitEnded')!;
      expect(ended.time).toBe(start + HOUR);
      expect((await t2.history('r3')).filter((e) => e.type === 'WaitStarted')).toHaveLength(1);
    } finally {
      await t2.close();
    }
  });

  it('a re-run of a turn whose wait ended gets the recorded value back without waiting', async () => {
    const seen: { attempt: number; value: unknown }[] = [];
    const wf = defineWorkflow({
      name: 'wait-then-crash',
      turnTimeoutMs: 2 * HOUR,
      turn: async (ctx, _: null) => {
        const r = await ctx.waitFor<number>('n');
        seen.push({ attempt: ctx.attempt, value: r.ok ? r.value : 'timeout' });
        // The first attempt waits here until its engine shuts down (exit for recovery); the re-run goes on.
        return ctx.step('double', (signal) =>
          ctx.attempt === 1 ? new Promise<number>((_, reject) => signal.addEventListener('abort', () => reject(signal.reason))) : r.ok ? r.value * 2 : -1,
        );
      },
    });
    const t1 = await createTestEngine({ workflows: [wf] });
    const ended = appended(t1.engine, 'r4', 'WaitEnded');
    const started = appended(t1.engine, 'r4', 'WaitStarted');
    await t1.engine.start(wf, null, { taskId: 'r4' });
    await started;
    await t1.engine.signal('r4', 'n', 21);
    await ended;
    await t1.close();
    const t2 = await createTestEngine({ workflows: [wf], store: t1.store, clock: t1.clock });
    try {
      await t2.advance(61_000); // the dead attempt's lease (60 s) expires: the memory store honours it until then
      await t2.engine.recover();
      expect(await t2.engine.task('r4').result()).toBe(42);
      const h = await t2.history('r4');
      expect(h.filter((e) => e.type === 'WaitStarted' || e.type === 'WaitEnded' || e.type === 'SignalReceived')).toHaveLength(3);
      expect(seen).toEqual([
        { attempt: 1, value: 21 },
        { attempt: 2, value: 21 },
      ]);
    } finally {
      await t2.close();
    }
  });

  it('two waits for one name take two signals in order', async () => {
    const wf = defineWorkflow({
      name: 'two-waits',
      turn: async (ctx, _: null) => {
        const a = await ctx.waitFor<string>('msg');
        const b = await ctx.waitFor<string>('msg');
        return [a.ok && a.value, b.ok && b.value];
      },
    });
    const t = await createTestEngine({ workflows: [wf] });
    try {
      await t.engine.signal('missing-task', 'msg', 1).then(
        () => expect.unreachable(),
        (e: unknown) => expect(isTurnlogError(e, 'TURNLOG_TASK_NOT_FOUND')).toBe(true),
      );
      const started = appended(t.engine, 'w2', 'WaitStarted');
      const h = await t.engine.start(wf, null, { taskId: 'w2' });
      await started;
      await h.signal('msg', 'one');
      await h.signal('msg', 'two');
      expect(await h.result()).toEqual(['one', 'two']);
      expect((await t.replay('w2')).turns).toBe(1);
    } finally {
      await t.close();
    }
  });

  it('a cancel while waiting ends the turn as cancelled', async () => {
    const t = await createTestEngine({ workflows: [approval] });
    try {
      const started = appended(t.engine, 'c1', 'WaitStarted');
      const h = await t.engine.start(approval, 1, { taskId: 'c1' });
      await started;
      await h.cancel('no longer needed');
      const r = await t.engine.turnResult('c1', h.inputId!);
      expect(r.status).toBe('cancelled');
    } finally {
      await t.close();
    }
  });

  it('refuses a bad name or timeout with TURNLOG_INVALID_ARGUMENT and records nothing', async () => {
    const wf = defineWorkflow({
      name: 'bad-wait',
      turn: async (ctx, which: string) => {
        try {
          await (which === 'name' ? ctx.waitFor('') : ctx.waitFor('x', { timeoutMs: -1 }));
          return 'no error';
        } catch (e) {
          return isTurnlogError(e, 'TURNLOG_INVALID_ARGUMENT') ? 'refused' : String(e);
        }
      },
    });
    const t = await createTestEngine({ workflows: [wf] });
    try {
      expect(await (await t.engine.start(wf, 'name')).result()).toBe('refused');
      expect(await (await t.engine.start(wf, 'timeout', { taskId: 'bt' })).result()).toBe('refused');
      expect((await t.history('bt')).some((e) => e.type === 'WaitStarted')).toBe(false);
      await expect(t.engine.signal('bt', '', 1)).rejects.toSatisfy((e: unknown) => isTurnlogError(e, 'TURNLOG_INVALID_ARGUMENT'));
    } finally {
      await t.close();
    }
  });
});

describe('waits on LevelDB', () => {
  it('a signal buffered before a restart is taken by the wait of the next engine', async () => {
    const dir = await makeTmpDir('turnlog-waits-');
    const clock = new ManualClock();
    const open = () => Engine.open({ store: dir.path, workflows: [approval], clock, logger: silentLogger, scanIntervalMs: 0, inspect: false });
    try {
      const e1 = await open();
      const started = appended(e1, 'lv', 'WaitStarted');
      await e1.start(approval, 5, { taskId: 'lv' });
      await started;
      await e1.shutdown({ graceMs: 0 }); // mid-wait
      const e2 = await open();
      try {
        // The turn is re-run (recovered); the signal arrives before or after it waits again.
        await e2.signal('lv', 'approval', { approved: false });
        await e2.recovered();
        expect(await e2.task('lv').result()).toBe('refused 5');
        const types = (await e2.history('lv')).map((e) => e.type);
        expect(types.filter((x) => x === 'WaitStarted')).toHaveLength(1);
        expect(types.filter((x) => x === 'WaitEnded')).toHaveLength(1);
      } finally {
        await e2.shutdown({ graceMs: 0 });
      }
    } finally {
      await dir.remove();
    }
  });
});

describe('a wait the handler gave up on', () => {
  it('a signal arriving in the timeout grace, after the handler stopped waiting, stays buffered for the next turn', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const wf = defineWorkflow({
      name: 'grace-waiter',
      kind: 'multi-turn',
      turnTimeoutMs: HOUR,
      graceMs: HOUR,
      turn: async (ctx, text: string) => {
        if (text === 'first') {
          try {
            await ctx.waitFor('go');
            return ctx.suspend('took it', 'took it');
          } catch {
            await gate; // in the grace: the handler no longer waits
            return ctx.suspend('gave up', 'gave up');
          }
        }
        const r = await ctx.waitFor<string>('go', { timeoutMs: HOUR });
        return ctx.suspend('done', r.ok ? r.value : 'timeout');
      },
    });
    const t = await createTestEngine({ workflows: [wf] });
    try {
      const started = appended(t.engine, 'g1', 'WaitStarted');
      const marker = appended(t.engine, 'g1', 'TimeoutCancelRequested');
      const h = await t.engine.start(wf, 'first', { taskId: 'g1' });
      await started;
      await t.advance(HOUR);
      await marker;
      await t.engine.signal('g1', 'go', 'approved late');
      release();
      expect(await h.result()).toBe('gave up');
      expect((await t.history('g1')).some((e) => e.type === 'WaitEnded')).toBe(false);
      expect(fold('g1', await t.history('g1')).signals?.map((s) => s.name)).toEqual(['go']);
      await h.send('second');
      expect(await h.result()).toBe('approved late');
    } finally {
      await t.close();
    }
  });
});
