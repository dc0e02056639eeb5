/**
 * Review probes: engine races around turn ends, cancels, eviction and steering.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Engine, type EngineOptions } from '../../src/runtime/engine.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { silentLogger } from '../../src/logger.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { fold } from '../../src/replay/index.js';
import type { HistoryEvent } from '../../src/history/events.js';

const engines: Engine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
});

async function open(options: Partial<EngineOptions> & Pick<EngineOptions, 'workflows'>): Promise<Engine> {
  const engine = await Engine.open({ store: new MemoryHistoryStore(), logger: silentLogger, scanIntervalMs: 0, ...options });
  engines.push(engine);
  return engine;
}

function gate<T = void>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

async function until(cond: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 2000 && !(await cond()); i++) await new Promise((r) => setTimeout(r, 2));
}

function terminalsPerTurn(events: HistoryEvent[]): Map<number, number> {
  const m = new Map<number, number>();
  for (const e of events) {
    if (e.type === 'TurnCompleted' || e.type === 'TurnFailed' || e.type === 'TurnSuspended' || e.type === 'TurnCancelled' || e.type === 'TurnTimedOut') {
      m.set(e.turn, (m.get(e.turn) ?? 0) + 1);
    }
  }
  return m;
}

describe('review: task cache eviction', () => {
  // Regression (fixed; was src/runtime/engine.ts #load/#evictIdle): an entry is evicted while an operation holds
  // its lock (between #load and t.active being set). The orphaned entry starts the turn; the next
  // #load builds a fresh entry that does not know the turn runs here, so `send` "recovers" it
  // inline and a second attempt of the same turn runs concurrently with the first.
  it('never runs two attempts of one turn at once when the cache is tiny', async () => {
    const release = gate();
    const running: string[] = [];
    let concurrent = 0;
    let maxConcurrent = 0;
    const wf = defineWorkflow({
      name: 'chat',
      kind: 'multi-turn',
      turn: async (ctx, text: string) => {
        running.push(`${ctx.taskId}:${ctx.turn}.${ctx.attempt}`);
        if (ctx.taskId === 'A') {
          concurrent++;
          maxConcurrent = Math.max(maxConcurrent, concurrent);
          await release.promise;
          concurrent--;
        }
        return text;
      },
    });
    const engine = await open({ workflows: [wf], maxCachedTasks: 1 });
    await Promise.all([engine.start(wf, 'a1', { taskId: 'A' }), engine.start(wf, 'b1', { taskId: 'B' })]);
    await until(() => running.includes('A:1.1'));
    // A steering input for A: the engine must queue it, not re-run turn 1.
    await engine.task('A').send('a2').catch(() => undefined);
    await until(() => running.length >= 3);
    release.resolve();
    await new Promise((r) => setTimeout(r, 20));
    expect(running.filter((r) => r.startsWith('A:1.'))).toEqual(['A:1.1']);
    expect(maxConcurrent).toBe(1);
  });
});

describe('review: inputs around a turn end', () => {
  it('an input sent while the turn ends runs exactly once, in the next turn', async () => {
    const seen: string[] = [];
    const release = gate();
    const wf = defineWorkflow({
      name: 'chat2',
      kind: 'multi-turn',
      turn: async (_ctx, text: string) => {
        seen.push(text);
        if (text === 'first') await release.promise;
        return text;
      },
    });
    const engine = await open({ workflows: [wf] });
    const h = await engine.start(wf, 'first', { taskId: 'c' });
    await until(() => seen.length === 1);
    release.resolve();
    const id = await h.send('second'); // races the end of turn 1
    const r = await engine.turnResult('c', id);
    expect(r).toMatchObject({ turn: 2, status: 'completed', output: 'second' });
    expect(seen).toEqual(['first', 'second']);
    const events = await h.history();
    expect([...terminalsPerTurn(events).values()]).toEqual([1, 1]);
  });

  // Regression (fixed; was src/runtime/engine.ts withdraw): after a steerable one-shot completes, its unrun inputs
  // stay in state.queue (fold keeps them; they were settled `cancelled`). withdraw() finds one there
  // and appends InputWithdrawn after TaskCompleted: the fold rejects the batch with a
  // HistoryInvariantError (after-task-completed) instead of TURNLOG_INPUT_NOT_FOUND / a conflict.
  // (describe().queuedInputIds also still lists them for the completed task.)
  it('withdrawing an input of a completed task is TURNLOG_INPUT_NOT_FOUND, not an invariant error', async () => {
    const release = gate();
    let started = false;
    const wf = defineWorkflow({
      name: 'oneshot-steer',
      steering: { maxQueued: 3 },
      turn: async () => {
        started = true;
        await release.promise;
        return 'done';
      },
    });
    const engine = await open({ workflows: [wf] });
    const h = await engine.start(wf, 'a', { taskId: 'o' });
    await until(() => started);
    const queued = await h.send('b');
    release.resolve();
    expect(await engine.turnResult('o', queued)).toMatchObject({ status: 'cancelled' });
    expect((await h.describe()).status).toBe('completed');
    const err = (await h.withdraw(queued).catch((e: unknown) => e)) as { code?: string };
    expect(err.code).toBe('TURNLOG_INPUT_NOT_FOUND');
  });
});

describe('review: cancel, timeout and hard cap at the same moment', () => {
  it('task cancel whose grace ends when the timeout hard cap fires: one terminal, task cancelled or timed out once, never re-run', async () => {
    const clock = new ManualClock();
    let runs = 0;
    const wf = defineWorkflow({
      name: 'runaway',
      kind: 'multi-turn',
      turnTimeoutMs: 1000,
      graceMs: 500,
      turn: async () => {
        runs++;
        await new Promise(() => undefined);
      },
    });
    const engine = await open({ workflows: [wf], clock });
    const h = await engine.start(wf, 'x', { taskId: 'r' });
    await clock.advance(1000); // marker + cooperative cancel; hard cap at 1500
    await h.cancel('stop');     // cancel grace also ends at 1500
    const queued = await h.send('y').catch((e: unknown) => e);
    await clock.advance(500);
    await clock.advance(10_000);
    const events = await h.history();
    expect([...terminalsPerTurn(events).values()]).toEqual([1]);
    expect(events.filter((e) => e.type === 'TaskCompleted')).toHaveLength(1);
    expect(runs).toBe(1);
    expect(fold('r', events).status).toBe('completed');
    void queued;
  });

  it('a zombie inline turn after the hard cap commits nothing, even a checkpoint or takeInputs', async () => {
    const clock = new ManualClock();
    const release = gate();
    const errors: string[] = [];
    const wf = defineWorkflow({
      name: 'zombie',
      kind: 'multi-turn',
      turnTimeoutMs: 1000,
      graceMs: 100,
      turn: async (ctx, text: string) => {
        if (text !== 'z') return text;
        await release.promise;
        for (const f of [() => ctx.step('s', () => 1), () => ctx.checkpoint(1), () => ctx.takeInputs()]) {
          await f().catch((e: { code?: string }) => errors.push(e.code ?? 'x'));
        }
        return 'late';
      },
    });
    const engine = await open({ workflows: [wf], clock });
    const h = await engine.start(wf, 'z', { taskId: 'z' });
    await clock.advance(1000);
    await clock.advance(100);
    const next = await h.send('n'); // next turn runs while the zombie lives
    expect((await engine.turnResult('z', next)).status).toBe('completed');
    const before = (await h.history()).length;
    release.resolve();
    await until(() => errors.length === 3);
    expect(errors).toEqual(['TURNLOG_FENCED', 'TURNLOG_FENCED', 'TURNLOG_FENCED']);
    expect((await h.history()).length).toBe(before);
  });
});
