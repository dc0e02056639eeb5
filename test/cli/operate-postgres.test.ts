/**
 * Operator actions on a shared PostgreSQL store (docs/cli.md#operator-actions): the real
 * `turnlog` binary appends cancel/withdraw/resend/resume under the task's generation without
 * claiming it, recorded with `--by`; the engine running the task (here, in the test process, its
 * periodic scan off) hears the append over LISTEN/NOTIFY and acts on it.
 */
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { silentLogger } from '../../src/logger.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import type { HistoryEvent } from '../../src/history/events.js';
import { PG_URL, describePg, dropSchema, uniqueSchema, withClient } from '../helpers/postgres.js';
import { until } from '../helpers/processes.js';
import { cli, cliJSON, ensureBuilt } from './run-cli.js';

/** Whether each turn's handler saw its signal abort (a cancel reached the running turn). */
const aborted = new Map<string, boolean>();
/** Inputs whose first run fails (the "bug" a resend or resume runs again after). */
const failOnce = new Set<string>();

const chat = defineWorkflow({
  name: 'op-chat',
  kind: 'multi-turn',
  turn: async (ctx, input: string) => {
    if (failOnce.delete(input)) throw new Error(`bug on ${input}`);
    // A first attempt that ignores every cancel (its engine stops mid-turn), then like `wait`.
    if (input.startsWith('hold') && ctx.attempt === 1) await new Promise(() => undefined);
    if (input.startsWith('wait') || input.startsWith('hold')) {
      // Runs until cancelled: the operator's cancel must reach this handler.
      await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
      aborted.set(`${ctx.taskId}/${ctx.turn}`, true);
      return 'stopped';
    }
    return `done ${input}`;
  },
});

describePg('operator actions from the CLI on a shared PostgreSQL store', () => {
  let schema: string;
  let url: string;
  const cleanups: (() => Promise<unknown>)[] = [];

  beforeAll(async () => {
    ensureBuilt();
    schema = uniqueSchema('turnlog_operate');
    url = `${PG_URL}?schema=${schema}`;
  });
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
  });
  afterAll(async () => {
    await dropSchema(schema);
  });

  async function engine(instance = 'runner-1'): Promise<Engine> {
    const store = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
    cleanups.push(() => store.close());
    const e = await Engine.open({ store, workflows: [chat], logger: silentLogger, owner: 'runner', instance, scanIntervalMs: 0, leaseMs: 60_000 });
    cleanups.push(() => e.shutdown({ graceMs: 200 }));
    expect(await store.listening()).toBe(true);
    return e;
  }

  const history = (e: Engine, id: string) => e.history(id);
  const types = (h: HistoryEvent[]) => h.map((x) => x.type);
  const op = (...args: string[]) => cliJSON(['--store', url, ...args, '--yes']);

  it('refuses without --yes and without a terminal, writing nothing; an unmigrated schema is exit 3 and stays absent', async () => {
    const none = uniqueSchema('turnlog_operate_none');
    const r = await cli(['--store', `${PG_URL}?schema=${none}`, 'cancel', 'x', '--yes']);
    expect(r.code, r.stderr).toBe(3);
    expect(r.stderr).toContain('turnlog migrate');
    const exists = await withClient((c) => c.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [none]));
    expect(exists.rowCount).toBe(0);

    const a = await engine();
    await a.start(chat, 'wait-0', { taskId: 'ask-1' });
    await until(async () => (await a.describe('ask-1')).openTurn?.running === true, 'the turn to run');
    const noYes = await cli(['--store', url, 'cancel', 'ask-1']);
    expect(noYes.code).toBe(2);
    expect(noYes.stderr).toContain('Pass --yes');
    expect(types(await history(a, 'ask-1'))).not.toContain('OperatorAction');
  });

  it('cancel --turn reaches the turn another engine runs: recorded with who did it, the handler aborted, the task takes its next input', async () => {
    const a = await engine();
    await a.start(chat, 'wait-1', { taskId: 'c-1' });
    await until(async () => (await a.describe('c-1')).openTurn?.running === true, 'the turn to run');
    const r = await op('cancel', 'c-1', '--turn', '--by', 'alice', '--reason', 'stuck on a tool call');
    expect(r.code, r.stderr).toBe(0);
    expect(r.json).toMatchObject({ action: 'cancel-turn', taskId: 'c-1', done: true });
    // The running engine heard it (no scan runs) and stopped the handler.
    await until(() => aborted.get('c-1/1') === true, 'the handler to see the cancel');
    const h = await history(a, 'c-1');
    const action = h.find((e) => e.type === 'OperatorAction');
    expect(action).toMatchObject({ action: 'cancel-turn', by: 'alice', reason: 'stuck on a tool call', turn: 1 });
    // Written under the running engine's generation, and no lease was claimed by the CLI.
    const started = h.find((e) => e.type === 'TurnStarted')!;
    expect(action!.generation).toBe(started.generation);
    expect(h.filter((e) => e.type === 'LeaseClaimed').map((e) => (e as { instance: string }).instance)).toEqual(['runner-1']);
    expect(types(h).slice(types(h).indexOf('OperatorAction'))).toEqual(['OperatorAction', 'CancelRequested', 'TurnCancelled']);
    expect((await a.store.getLease('c-1'))?.instance).toBe('runner-1');
    // The multi-turn task stays open and runs its next input on the running engine.
    const next = await a.task('c-1').send('hello');
    expect(await a.turnResult('c-1', next)).toMatchObject({ status: 'completed', output: 'done hello' });
  });

  it('cancel (the task) completes it as cancelled; a second cancel finds nothing to cancel and records nothing', async () => {
    const a = await engine();
    await a.start(chat, 'wait-2', { taskId: 'c-2' });
    await until(async () => (await a.describe('c-2')).openTurn?.running === true, 'the turn to run');
    const r = await op('cancel', 'c-2', '--by', 'bob');
    expect(r.code, r.stderr).toBe(0);
    await until(() => aborted.get('c-2/1') === true, 'the handler to see the cancel');
    await expect(a.task('c-2').result()).rejects.toMatchObject({ code: 'TURNLOG_TURN_CANCELLED' });
    const again = await op('cancel', 'c-2', '--by', 'bob');
    expect(again.code, again.stderr).toBe(0);
    expect(again.json).toMatchObject({ done: false });
    const h = await history(a, 'c-2');
    expect(h.filter((e) => e.type === 'OperatorAction')).toEqual([expect.objectContaining({ action: 'cancel-task', by: 'bob' })]);
    expect(h.at(-1)).toMatchObject({ type: 'TaskCompleted', outcome: 'cancelled' });
  });

  it('withdraw a queued input while the turn runs; an input not queued is TURNLOG_INPUT_NOT_FOUND (exit 1)', async () => {
    const a = await engine();
    await a.start(chat, 'wait-3', { taskId: 'w-1' });
    await until(async () => (await a.describe('w-1')).openTurn?.running === true, 'the turn to run');
    const q = await a.task('w-1').send('later', { inputId: 'q-1' });
    const r = await op('withdraw', 'w-1', q, '--by', 'carol');
    expect(r.code, r.stderr).toBe(0);
    await until(async () => (await a.describe('w-1')).queuedInputIds.length === 0, 'the running engine to hear the withdrawal');
    const h = await history(a, 'w-1');
    expect(h.find((e) => e.type === 'OperatorAction')).toMatchObject({ action: 'withdraw', by: 'carol', inputId: 'q-1' });
    expect(h.find((e) => e.type === 'InputWithdrawn')).toMatchObject({ inputId: 'q-1' });
    const missing = await op('withdraw', 'w-1', 'q-1');
    expect(missing.code).toBe(1);
    expect(missing.json).toMatchObject({ error: { code: 'TURNLOG_INPUT_NOT_FOUND' } });
    await a.cancel('w-1');
  });

  it('resend and resume a failed turn: the running engine starts the new turn at once (no scan), recorded with who did it', async () => {
    const a = await engine();
    failOnce.add('first');
    await a.start(chat, 'first', { taskId: 'r-1' });
    expect(await a.task('r-1').nextTurn()).toMatchObject({ status: 'failed' });
    const rs = await op('resend', 'r-1', '1', '--by', 'dave');
    expect(rs.code, rs.stderr).toBe(0);
    expect(rs.json).toMatchObject({ action: 'resend', turn: 1, inputIds: [expect.any(String)] });
    const newId = (rs.json as { inputIds: string[] }).inputIds[0]!;
    expect(await a.turnResult('r-1', newId)).toMatchObject({ status: 'completed', output: 'done first' });

    failOnce.add('second');
    const sent = await a.task('r-1').send('second');
    expect(await a.turnResult('r-1', sent)).toMatchObject({ status: 'failed' });
    const rm = await op('resume', 'r-1', '--by', 'erin');
    expect(rm.code, rm.stderr).toBe(0);
    const resumed = (rm.json as { inputIds: string[] }).inputIds[0]!;
    expect(await a.turnResult('r-1', resumed)).toMatchObject({ status: 'completed', output: 'done second' });
    const h = await history(a, 'r-1');
    expect(h.filter((e) => e.type === 'OperatorAction').map((e) => ({ ...e }))).toEqual([
      expect.objectContaining({ action: 'resend', by: 'dave', turn: 1, newInputId: newId }),
      expect.objectContaining({ action: 'resume', by: 'erin', turn: 3, newInputId: resumed }),
    ]);
    // A turn that did not fail is refused (exit 2), and nothing is written.
    const before = h.length;
    const bad = await op('resend', 'r-1', '2');
    expect(bad.code).toBe(2);
    expect((await history(a, 'r-1')).length).toBe(before);
  });

  it('race: another engine claims the task between the operator’s read and its append; the action is fenced, then retried on the new lease', async () => {
    const store = createPostgresStore({ connectionString: PG_URL, schema, max: 2 });
    cleanups.push(() => store.close());
    const operator = await Engine.openForOperator({ store, logger: silentLogger });
    cleanups.push(() => operator.shutdown());
    const first = createPostgresStore({ connectionString: PG_URL, schema, max: 2 });
    cleanups.push(() => first.close());
    const a = await Engine.open({ store: first, workflows: [chat], logger: silentLogger, owner: 'runner', instance: 'dies', scanIntervalMs: 0, leaseMs: 300 });
    cleanups.push(() => a.shutdown({ graceMs: 0 }));
    await a.start(chat, 'hold-5', { taskId: 'stale-1' });
    await until(async () => (await a.describe('stale-1')).openTurn?.running === true, 'the turn to run');
    await a.shutdown({ graceMs: 0 }); // the turn is left in progress under generation g
    // The operator reads the task (and its lease, generation g)…
    expect((await operator.describe('stale-1')).openTurn).toBeDefined();
    const g = (await store.getLease('stale-1'))!.generation;
    // …then another engine recovers it once the lease expired: generation g + 1.
    const b = await engine('recoverer');
    await until(
      async () => {
        await b.recover();
        return (await b.describe('stale-1')).openTurn?.running === true;
      },
      'the other engine to recover the turn',
    );
    expect((await store.getLease('stale-1'))!.generation).toBe(g + 1);
    const r = await operator.operatorAction('cancel', { taskId: 'stale-1', by: 'gina' }, { scope: 'task' });
    expect(r).toMatchObject({ done: true });
    const h = await history(b, 'stale-1');
    expect(h.find((e) => e.type === 'OperatorAction')).toMatchObject({ by: 'gina', generation: g + 1 });
    await until(() => aborted.get('stale-1/1') === true, 'the recovered handler to see the cancel');
    expect((await history(b, 'stale-1')).at(-1)).toMatchObject({ type: 'TaskCompleted', outcome: 'cancelled' });
  });

  it('race: a cancel decided on a turn that ends before the append re-reads and finds nothing to cancel', async () => {
    const a = await engine();
    const store = createPostgresStore({ connectionString: PG_URL, schema, max: 2 });
    cleanups.push(() => store.close());
    const operator = await Engine.openForOperator({ store, logger: silentLogger });
    cleanups.push(() => operator.shutdown());
    await a.start(chat, 'wait-4', { taskId: 'race-1' });
    await until(async () => (await a.describe('race-1')).openTurn?.running === true, 'the turn to run');
    // The operator reads the task while the turn is open…
    expect((await operator.describe('race-1')).openTurn).toBeDefined();
    // …then the turn ends (a cancel through the running engine) before the operator appends.
    await a.cancel('race-1', 'ended first', 'turn');
    await until(async () => (await a.describe('race-1')).openTurn === undefined, 'the turn to end');
    const r = await operator.operatorAction('cancel', { taskId: 'race-1', by: 'frank' }, { scope: 'turn' });
    expect(r).toMatchObject({ done: false });
    const h = await history(a, 'race-1');
    expect(types(h)).not.toContain('OperatorAction');
    // One terminal for the turn: the running engine's (the handler ended within the grace).
    expect(types(h).filter((t) => t.startsWith('Turn') && t !== 'TurnStarted')).toHaveLength(1);
    // The operator claimed nothing and ran nothing.
    expect((await a.store.getLease('race-1'))?.instance).toBe('runner-1');
  });
});
