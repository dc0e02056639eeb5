/**
 * Every turn outcome other than success is logged exactly once, with task id, turn, attempt and
 * code (issue #10 item 15), whichever path wrote it: the handler's outcome, the inline hard cap,
 * a killed or crashed worker, or recovery (exhausted recoveries, non-determinism).
 */
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { Engine, type EngineOptions } from '../../src/runtime/engine.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { silentLogger, type Logger } from '../../src/logger.js';
import { outcomeLogLines } from '../../src/runtime/outcome-log.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { ProcessExecutor } from '../../src/executor/process-executor.js';
import { crash } from '../fixtures/workflows/crash.js';
import { runaway } from '../fixtures/workflows/runaway.js';

interface LogLine {
  level: string;
  message: string;
  fields: Record<string, unknown>;
}

const engines: Engine[] = [];
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
  for (const c of cleanups.splice(0)) await c();
});

function capture(lines: LogLine[]): Logger {
  const at = (level: string) => (message: string, fields: Record<string, unknown> = {}) => void lines.push({ level, message, fields });
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

async function open(logs: LogLine[], options: Partial<EngineOptions> & Pick<EngineOptions, 'workflows'>): Promise<Engine> {
  const engine = await Engine.open({ store: new MemoryHistoryStore(), logger: capture(logs), scanIntervalMs: 0, ...options });
  engines.push(engine);
  return engine;
}

/** The outcome lines (not debug chatter) logged for `taskId`. */
function outcomes(logs: LogLine[], taskId: string): LogLine[] {
  return logs.filter((l) => l.level !== 'debug' && l.fields['taskId'] === taskId && typeof l.fields['code'] === 'string');
}

async function until(cond: () => boolean | Promise<boolean>, what: string, limitMs = 15_000): Promise<void> {
  const end = Date.now() + limitMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('turn outcomes are logged once with task id, turn, attempt and code', () => {
  it('a failed turn: error, with the failure type and message', async () => {
    const logs: LogLine[] = [];
    const boom = defineWorkflow({
      name: 'boom',
      turn: async () => {
        throw new TypeError('bad input');
      },
    });
    const engine = await open(logs, { workflows: [boom] });
    await engine.start(boom, null, { taskId: 'f1' }).then((h) => h.nextTurn());
    expect(outcomes(logs, 'f1')).toEqual([
      {
        level: 'error',
        message: 'turn failed',
        fields: { taskId: 'f1', workflow: 'boom', turn: 1, attempt: 1, code: 'TURNLOG_TURN_FAILED', errorType: 'TypeError', error: 'bad input' },
      },
    ]);
  });

  it('a cooperative timeout and an inline hard cap: warn, with the cause', async () => {
    const logs: LogLine[] = [];
    const clock = new ManualClock();
    const coop = defineWorkflow({
      name: 'coop',
      turnTimeoutMs: 1000,
      graceMs: 500,
      turn: (ctx) => new Promise((_, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason))),
    });
    const stuck = defineWorkflow({ name: 'stuck', turnTimeoutMs: 1000, graceMs: 500, turn: () => new Promise(() => {}) });
    const engine = await open(logs, { workflows: [coop, stuck], clock });
    const a = await engine.start(coop, null, { taskId: 'to1' });
    const b = await engine.start(stuck, null, { taskId: 'to2' });
    await clock.advance(1000);
    await a.nextTurn();
    await clock.advance(500);
    await b.nextTurn();
    expect(outcomes(logs, 'to1')).toEqual([
      { level: 'warn', message: 'turn timed out', fields: { taskId: 'to1', workflow: 'coop', turn: 1, attempt: 1, code: 'TURNLOG_TURN_TIMED_OUT', cause: 'cooperative' } },
    ]);
    expect(outcomes(logs, 'to2')).toEqual([
      { level: 'warn', message: 'turn timed out', fields: { taskId: 'to2', workflow: 'stuck', turn: 1, attempt: 1, code: 'TURNLOG_TURN_TIMED_OUT', cause: 'hard_cap' } },
    ]);
  });

  it('a cancelled turn: info (the caller asked for it)', async () => {
    const logs: LogLine[] = [];
    const wf = defineWorkflow({
      name: 'cancellable',
      turn: (ctx) => new Promise((_, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason))),
    });
    const engine = await open(logs, { workflows: [wf] });
    const h = await engine.start(wf, null, { taskId: 'c1' });
    await h.cancel('user left');
    await h.nextTurn();
    expect(outcomes(logs, 'c1')).toEqual([
      { level: 'info', message: 'turn cancelled', fields: { taskId: 'c1', workflow: 'cancellable', turn: 1, attempt: 1, code: 'TURNLOG_TURN_CANCELLED', reason: 'user left' } },
    ]);
  });

  it('recovery: exhausted recoveries and a NonDeterminismError are errors naming the attempt', async () => {
    const store = new MemoryHistoryStore();
    const hang = new Promise<never>(() => {});
    const v1 = defineWorkflow({
      name: 'nd',
      turn: async (ctx) => {
        await ctx.step('search', () => 1);
        return hang;
      },
    });
    const once = defineWorkflow({ name: 'once', maxRecoveries: 0, turn: () => hang });
    const logs1: LogLine[] = [];
    const e1 = await Engine.open({ store, workflows: [v1, once], logger: capture(logs1), scanIntervalMs: 0 });
    await e1.start(v1, null, { taskId: 'nd' });
    await e1.start(once, null, { taskId: 'rx' });
    await until(async () => (await e1.history('nd')).some((e) => e.type === 'StepCompleted'), 'the step to be recorded');
    await e1.shutdown({ graceMs: 0 }); // both turns are left in progress, like a crash
    expect(logs1.filter((l) => l.level === 'error' || l.level === 'warn')).toEqual([]);

    const logs: LogLine[] = [];
    const v2 = defineWorkflow({ name: 'nd', turn: async (ctx) => ctx.step('lookup', () => 2) });
    const e2 = await open(logs, { store, workflows: [v2, once] });
    await e2.task('nd').nextTurn();
    await e2.task('rx').nextTurn();
    const nd = outcomes(logs, 'nd');
    expect(nd).toHaveLength(1);
    expect(nd[0]).toMatchObject({ level: 'error', message: 'turn failed', fields: { taskId: 'nd', turn: 1, attempt: 2, code: 'TURNLOG_NON_DETERMINISM', errorType: 'NonDeterminismError' } });
    expect(outcomes(logs, 'rx')).toEqual([
      {
        level: 'error',
        message: 'turn failed',
        fields: expect.objectContaining({ taskId: 'rx', workflow: 'once', turn: 1, attempt: 1, code: 'TURNLOG_TURN_FAILED', errorType: 'RecoveriesExhausted' }),
      },
    ]);
  });

  it('process workers: a crash is a warning per attempt, the give-up an error, a kill is logged with its terminal', async () => {
    // Workers import the compiled fixtures: run `npm run build` first.
    const module = fileURLToPath(new URL('../../dist/test/fixtures/workflows/index.js', import.meta.url));
    const exec = new ProcessExecutor({ workflowsModule: module, execArgv: [], logger: silentLogger });
    cleanups.push(() => exec.close());
    const logs: LogLine[] = [];
    const engine = await open(logs, { workflows: [crash, runaway], executors: { process: exec } });
    const crashed = await engine.start(crash, null, { taskId: 'w1' });
    const killed = await engine.start(runaway, null, { taskId: 'w2' });
    expect(await crashed.nextTurn()).toMatchObject({ status: 'failed' });
    expect(await killed.nextTurn()).toMatchObject({ status: 'timed_out' });

    const w1 = outcomes(logs, 'w1');
    const crashes = (await crashed.history()).filter((e) => e.type === 'WorkerCrashed').length;
    expect(w1.filter((l) => l.message.startsWith('worker crashed'))).toHaveLength(crashes);
    expect(w1.filter((l) => l.message.startsWith('worker crashed')).every((l) => l.level === 'warn' && l.fields['code'] === 'TURNLOG_WORKER_CRASHED')).toBe(true);
    expect(w1.filter((l) => l.message === 'turn failed')).toEqual([
      expect.objectContaining({ level: 'error', fields: expect.objectContaining({ taskId: 'w1', turn: 1, code: 'TURNLOG_WORKER_CRASHED' }) }),
    ]);

    const w2 = outcomes(logs, 'w2');
    expect(w2).toHaveLength(1);
    expect(w2[0]).toMatchObject({ level: 'warn', message: 'turn timed out', fields: { taskId: 'w2', turn: 1, attempt: 1, code: 'TURNLOG_TURN_TIMED_OUT', cause: 'hard_cap', signal: 'SIGKILL' } });
    expect(w2[0]!.fields['pid']).toBeGreaterThan(0);
  });

  it('success logs nothing (the pure mapping)', () => {
    expect(outcomeLogLines('t', undefined, [])).toEqual([]);
  });
});
