/**
 * Failures of many engines on one PostgreSQL schema, with real processes and real signals
 * (docs/scale-out.md#failures): a zombie engine (SIGSTOPped past its lease, then SIGCONTed) whose
 * every write is refused while another engine finishes its turn, and the store's connections
 * killed by the server (pg_terminate_backend) under load without losing or doubling anything.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import { isTurnTerminal } from '../../src/history/events.js';
import { isTurnlogError } from '../../src/errors.js';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { zombieWf } from '../fixtures/workflows/pg-zombie.js';
import { ensureBuilt } from '../cli/run-cli.js';
import { PG_URL, describePg, dropSchema, uniqueSchema, withClient } from '../helpers/postgres.js';
import { until } from '../helpers/processes.js';

const HOST = fileURLToPath(new URL('../../dist/test/fixtures/children/pg-zombie-host.js', import.meta.url));
const of = <T extends HistoryEvent['type']>(h: HistoryEvent[], type: T) => h.filter((e): e is Extract<HistoryEvent, { type: T }> => e.type === type);

describePg('PostgreSQL failures across engines (real processes, real signals)', () => {
  const children: ChildProcess[] = [];
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const c of children.splice(0)) {
      if (c.exitCode !== null || c.signalCode !== null) continue;
      const exited = new Promise((r) => c.once('exit', r));
      c.kill('SIGCONT');
      c.kill('SIGKILL');
      await exited;
    }
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
  });

  it('a zombie engine (SIGSTOP past its lease, then SIGCONT): another engine finishes the turn, every write of the zombie is refused, and it drops the task', async () => {
    ensureBuilt();
    const schema = uniqueSchema('turnlog_zombie');
    cleanups.push(() => dropSchema(schema));
    const leaseMs = 1_500;
    const child = spawn(process.execPath, [HOST, PG_URL, schema, String(leaseMs), 'zombie', 'z1'], {
      stdio: ['ignore', 'pipe', 'inherit'],
      env: { ...process.env, ZOMBIE_WAIT_MS: '2500' },
    });
    children.push(child);
    const lines: Record<string, unknown>[] = [];
    const reader = createInterface({ input: child.stdout! });
    reader.on('line', (l) => lines.push(JSON.parse(l) as Record<string, unknown>));
    await until(() => lines.some((l) => l['stepped']), 'the zombie-to-be to record step one', 30_000);
    child.kill('SIGSTOP');

    const store = createPostgresStore({ connectionString: PG_URL, schema });
    cleanups.push(() => store.close());
    const b = await Engine.open({ store, workflows: [zombieWf], logger: silentLogger, owner: 'rescuer', instance: 'rescuer-1', leaseMs: 60_000, scanIntervalMs: 100 });
    cleanups.push(() => b.shutdown({ graceMs: 100 }));
    // The stopped engine cannot renew: once its lease lapses on the database clock, B claims the turn.
    await until(async () => of(await b.history('z1'), 'TurnStarted').length === 2, 'the rescuer to re-run the turn', 30_000);
    const before = (await b.history('z1')).length;
    child.kill('SIGCONT');
    const result = await b.task('z1').result();
    expect(result).toMatchObject({ attempt: 2, one: { pid: child.pid }, two: { pid: process.pid } });
    // It drops the task either way: its lease watch saw the lease lapse when it woke (nothing tried),
    // or a write it sent first was refused as stale (fenced).
    const FENCED = 'task fenced: another instance took it over; the attempt is stopped and not retried';
    const LAPSED = 'lease lapsed: the attempt is stopped; the turn is left for recovery';
    await until(() => lines.some((l) => l['message'] === FENCED || l['message'] === LAPSED), 'the zombie to drop the task', 30_000);

    const h = await b.history('z1');
    const takeover = of(h, 'LeaseClaimed').at(-1)!;
    expect(takeover).toMatchObject({ owner: 'rescuer', previousGeneration: 1, reason: 'recovery' });
    // Nothing the zombie did after the takeover reached the history: every later event is generation 2.
    expect(h.filter((e) => e.eventId > takeover.eventId).every((e) => e.generation === takeover.generation)).toBe(true);
    expect(h.length).toBeGreaterThanOrEqual(before);
    expect(of(h, 'StepCompleted').map((e) => [e.name, e.generation])).toEqual([['one', 1], ['two', 2]]);
    expect(h.filter(isTurnTerminal)).toHaveLength(1);
    expect(await store.getLease('z1')).toMatchObject({ owner: 'rescuer', generation: 2 });
    // Without the lapse first, the zombie learned it was fenced from a refused write (a renewal or its step).
    if (!lines.some((l) => l['message'] === LAPSED)) expect(lines.filter((l) => l['code'] === 'TURNLOG_STALE_GENERATION').length).toBeGreaterThan(0);
  });

  it('the server drops every connection of an engine under load (pg_terminate_backend): turns still end exactly once, no step runs twice, no input is lost', async () => {
    const schema = uniqueSchema('turnlog_terminate');
    cleanups.push(() => dropSchema(schema));
    const runs = new Map<string, number>();
    const chat = defineWorkflow({
      name: 'pg-chat-steps',
      kind: 'multi-turn',
      turn: async (ctx, n: number) => {
        let sum = n;
        for (let i = 0; i < 3; i++) {
          sum = await ctx.step(`s${i}`, () => {
            const key = `${ctx.taskId}/${ctx.turn}/${i}`;
            runs.set(key, (runs.get(key) ?? 0) + 1);
            return sum + 1;
          });
        }
        return sum;
      },
    });
    // The victim's sessions by a name of this run only: a run beside it (another worktree on the
    // same server) must not have its connections terminated too.
    const victim = `turnlog_victim_${schema.slice(-8)}`;
    const store = createPostgresStore({ connectionString: `${PG_URL}${PG_URL.includes('?') ? '&' : '?'}application_name=${victim}`, schema, max: 6 });
    cleanups.push(() => store.close());
    const engine = await Engine.open({ store, workflows: [chat], logger: silentLogger, owner: 'victim', instance: 'victim-1', leaseMs: 5_000, scanIntervalMs: 200 });
    cleanups.push(() => engine.shutdown({ graceMs: 100 }));
    const TASKS = 12;
    const TURNS = 4;
    let terminated = 0;
    const killer = (async () => {
      for (let k = 0; k < 3; k++) {
        await new Promise((r) => setTimeout(r, 150));
        const res = await withClient((c) => c.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, [victim]));
        terminated += res.rowCount ?? 0;
      }
    })();
    const sent = new Map<string, string[]>();
    await Promise.all(
      Array.from({ length: TASKS }, async (_, t) => {
        const id = `k${t}`;
        const ids: string[] = [];
        for (let turn = 0; turn < TURNS; turn++) {
          // A caller sees a clear error while the connection is gone, and sends again with the same
          // input id (idempotent): the input is queued once.
          const inputId = `${id}-in${turn}`;
          for (let tries = 0; ; tries++) {
            try {
              if (turn === 0) await engine.start(chat, turn * 10, { taskId: id, inputId });
              else await engine.task(id).send(turn * 10, { inputId });
              break;
            } catch (err) {
              if (tries > 50) throw err;
              await new Promise((r) => setTimeout(r, 50));
            }
          }
          ids.push(inputId);
          for (let tries = 0; ; tries++) {
            try {
              const r = await engine.task(id).turnResult(inputId);
              if (r.status !== 'completed') throw new Error(`turn of ${inputId} ended ${r.status}`);
              break;
            } catch (err) {
              // TURNLOG_TURN_DEFERRED or a connection error: ask again; the recovered turn answers.
              if (tries > 200) throw err;
              await new Promise((r) => setTimeout(r, 50));
            }
          }
        }
        sent.set(id, ids);
      }),
    );
    await killer;
    expect(terminated).toBeGreaterThan(0);
    for (const [id, ids] of sent) {
      // The killer's last round can land after the turns ended (a quick run), on idle connections
      // whose end the pool has not heard yet: a read on one is TURNLOG_STORE_UNAVAILABLE; read again.
      let h: HistoryEvent[] | undefined;
      for (let tries = 0; h === undefined; tries++) {
        h = await engine.history(id).catch((err: unknown) => {
          if (tries > 20 || !isTurnlogError(err, 'TURNLOG_STORE_UNAVAILABLE')) throw err;
          return new Promise<undefined>((r) => setTimeout(() => r(undefined), 50));
        });
      }
      expect(of(h, 'InputQueued').map((e) => e.inputId)).toEqual(ids);
      const terminals = h.filter(isTurnTerminal);
      expect(terminals.map((e) => e.turn)).toEqual([1, 2, 3, 4]);
      expect(terminals.every((e) => e.type === 'TurnCompleted')).toBe(true);
      // Each recorded step is in the history once per turn.
      for (let turn = 1; turn <= TURNS; turn++) {
        expect(of(h, 'StepCompleted').filter((e) => e.turn === turn).map((e) => e.name)).toEqual(['s0', 's1', 's2']);
      }
    }
    // No step ran twice: a record whose connection died was retried (or found landed), never failed.
    expect(runs.size).toBe(TASKS * TURNS * 3);
    for (const [key, n] of runs) expect([key, n]).toEqual([key, 1]);
  });
});
