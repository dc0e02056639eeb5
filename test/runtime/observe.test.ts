import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { engineOpener } from '../helpers/engines.js';
import type { AttemptEndedEvent, AttemptStartedEvent, EngineObserver, EventsAppendedEvent, OutputEvent } from '../../src/runtime/observe.js';
import { ManualClock } from '../../src/runtime/clock.js';
import type { Logger } from '../../src/logger.js';
import { silentLogger } from '../../src/logger.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { isTurnlogError } from '../../src/errors.js';

const open = engineOpener();

function recorder() {
  const log: string[] = [];
  const appended: EventsAppendedEvent[] = [];
  const started: AttemptStartedEvent[] = [];
  const ended: AttemptEndedEvent[] = [];
  const observer: EngineObserver = {
    eventsAppended: (e) => {
      appended.push(e);
      for (const ev of e.events) log.push(ev.type);
    },
    attemptStarted: (e) => {
      started.push(e);
      log.push(`started ${e.turn}.${e.attempt} ${e.entryMode}`);
    },
    attemptEnded: (e) => {
      ended.push(e);
      log.push(`ended ${e.turn}.${e.attempt} ${e.outcome.kind}`);
    },
  };
  return { log, appended, started, ended, observer };
}

const double = defineWorkflow({ name: 'double', turn: async (ctx, x: number) => ctx.step('mul', () => x * 2) });

describe('engine observers', () => {
  it('sees every appended event, in order and once, with the attempt start and end around the handler', async () => {
    const r = recorder();
    const engine = await open({ workflows: [double], observers: [r.observer] });
    const h = await engine.start(double, 21, { taskId: 'o1' });
    expect(await h.result()).toBe(42);
    const history = await h.history();
    // Exactly the stored history, event ids contiguous: nothing skipped, nothing twice.
    expect(r.appended.flatMap((a) => a.events.map((e) => e.eventId))).toEqual(history.map((e) => e.eventId));
    expect(r.appended.every((a) => a.taskId === 'o1' && a.origin === 'engine' && a.generation === 1)).toBe(true);
    expect(r.log).toEqual([
      'TaskCreated',
      'InputQueued',
      'LeaseClaimed',
      'TurnStarted',
      'started 1.1 fresh',
      'StepCompleted',
      'ended 1.1 completed',
      'TurnCompleted',
      'TaskCompleted',
    ]);
    expect(r.started[0]).toMatchObject({ taskId: 'o1', workflow: 'double', executor: 'inline', replayedCalls: 0 });
    expect(r.ended[0]!.outcome).toMatchObject({ kind: 'completed' });
  });

  it('engine.observe() adds a listener and its unsubscribe stops it', async () => {
    const engine = await open({ workflows: [double] });
    const r = recorder();
    const stop = engine.observe(r.observer);
    await (await engine.start(double, 1, { taskId: 'o2' })).result();
    const seen = r.log.length;
    expect(seen).toBeGreaterThan(0);
    // Added after open, it is still asked for (the engine builds attemptStarted only for a listener).
    expect(r.started.map((e) => e.taskId)).toEqual(['o2']);
    stop();
    stop(); // idempotent
    await (await engine.start(double, 2, { taskId: 'o3' })).result();
    expect(r.log.length).toBe(seen);
  });

  it('a throwing observer is logged and breaks neither the turn nor the other observers', async () => {
    const warnings: { message: string; fields?: Record<string, unknown> }[] = [];
    const logger: Logger = { ...silentLogger, warn: (message, fields) => warnings.push({ message, ...(fields ? { fields } : {}) }) };
    const r = recorder();
    const bad: EngineObserver = {
      eventsAppended: () => {
        throw new Error('boom');
      },
      attemptStarted: () => {
        throw new Error('boom');
      },
      attemptEnded: () => {
        throw new Error('boom');
      },
    };
    const engine = await open({ workflows: [double], observers: [bad, r.observer], logger });
    const h = await engine.start(double, 4, { taskId: 'o4' });
    expect(await h.result()).toBe(8);
    expect(r.ended).toHaveLength(1);
    expect(warnings.some((w) => w.message.startsWith('observer failed') && w.fields?.['taskId'] === 'o4' && w.fields?.['hook'] === 'attemptStarted')).toBe(true);
    expect((await h.history()).some((e) => e.type === 'TaskCompleted')).toBe(true);
  });

  it('a hard-capped inline attempt is reported ended once, as timed out', async () => {
    const clock = new ManualClock(1_000);
    const r = recorder();
    let release!: () => void;
    const hang = defineWorkflow({
      name: 'hang',
      turnTimeoutMs: 1_000,
      graceMs: 100,
      turn: async () => {
        await new Promise<void>((res) => (release = res));
        return 'late';
      },
    });
    const engine = await open({ workflows: [hang], observers: [r.observer], clock });
    const h = await engine.start(hang, null, { taskId: 'o5' });
    await clock.advance(2_000);
    const res = await h.nextTurn();
    expect(res.status).toBe('timed_out');
    release();
    await new Promise((res) => setTimeout(res, 20));
    expect(r.ended.map((e) => e.outcome.kind)).toEqual(['timed-out']);
  });

  it('output: every chunk (decoded) and step start of a running attempt, after the event it follows; a throwing output hook breaks nothing', async () => {
    const outputs: OutputEvent[] = [];
    const talk = defineWorkflow({
      name: 'talk',
      turn: async (ctx) => {
        ctx.emit({ token: 'hi' });
        await ctx.step('lookup', () => 1);
        ctx.emit('bye');
        return 'ok';
      },
    });
    const boom: EngineObserver = {
      output: () => {
        throw new Error('boom');
      },
    };
    const engine = await open({ workflows: [talk], observers: [boom, { output: (e) => outputs.push(e) }] });
    const h = await engine.start(talk, null, { taskId: 'o6' });
    expect(await h.result()).toBe('ok');
    const started = (await h.history()).find((e) => e.type === 'TurnStarted')!;
    const step = (await h.history()).find((e) => e.type === 'StepCompleted')!;
    expect(outputs.map((e) => [e.output, e.afterEventId, e.turn, e.attempt, e.dropped])).toEqual([
      [{ kind: 'chunk', data: { token: 'hi' } }, started.eventId, 1, 1, 0],
      [{ kind: 'step-started', seq: 1, name: 'lookup' }, started.eventId, 1, 1, 0],
      [{ kind: 'chunk', data: 'bye' }, step.eventId, 1, 1, 0],
    ]);
  });

  it('refuses an observer that is not an object', async () => {
    expect(() => Engine.create({ workflows: [double], observers: [null as unknown as EngineObserver] })).toThrow(/observers must be a list/);
    const engine = await open({ workflows: [double] });
    try {
      engine.observe(undefined as unknown as EngineObserver);
      expect.unreachable();
    } catch (err) {
      expect(isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT')).toBe(true);
    }
  });
});
