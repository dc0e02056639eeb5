/**
 * Soak (docs/scale-out.md#failures): three engines on one PostgreSQL schema — two in this
 * process, one a child process SIGKILLed twice and restarted — serve 300 conversations under
 * random sends, turn cancels and task cancels (seeded). Once quiet, test/helpers/soak-checker.ts
 * proves every history well-formed, each turn one terminal event, no input lost or run twice.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { soakChat, type SoakInput } from '../fixtures/workflows/pg-soak.js';
import { ensureBuilt } from '../cli/run-cli.js';
import { PG_URL, describePg, dropSchema, uniqueSchema } from '../helpers/postgres.js';
import { until } from '../helpers/processes.js';
import { checkSoakHistory } from '../helpers/soak-checker.js';
import { seededRandom } from '../../src/testing/random.js';

const HOST = fileURLToPath(new URL('../../dist/test/fixtures/children/pg-soak-host.js', import.meta.url));
const LEASE_MS = 2_000;


/** The child engine: commands in on stdin, answers out on stdout; a kill answers every pending one `lost`. */
class ChildEngine {
  readonly proc: ChildProcess;
  readonly ready: Promise<void>;
  readonly #pending = new Map<number, (answer: string) => void>();
  #next = 0;
  dead = false;

  constructor(schema: string, instance: string) {
    this.proc = spawn(process.execPath, [HOST, PG_URL, schema, instance, String(LEASE_MS)], { stdio: ['pipe', 'pipe', 'inherit'] });
    let ready!: () => void;
    this.ready = new Promise((r) => (ready = r));
    createInterface({ input: this.proc.stdout! }).on('line', (l) => {
      const m = JSON.parse(l) as { ready?: boolean; id?: number; ok?: boolean; code?: string };
      if (m.ready) return ready();
      const done = this.#pending.get(m.id!);
      this.#pending.delete(m.id!);
      done?.(m.ok ? 'ok' : m.code!);
    });
    this.proc.on('exit', () => this.kill());
  }

  run(op: 'start' | 'send', taskId: string, inputId: string, input: SoakInput): Promise<string> {
    if (this.dead) return Promise.resolve('lost');
    const id = this.#next++;
    return new Promise((resolve) => {
      this.#pending.set(id, resolve);
      this.proc.stdin!.write(JSON.stringify({ op, id, taskId, inputId, input }) + '\n');
    });
  }

  kill(): void {
    if (!this.dead) {
      this.dead = true;
      this.proc.kill('SIGKILL');
    }
    for (const done of this.#pending.values()) done('lost');
    this.#pending.clear();
  }
}

describePg('soak: three engines, kills, cancels and sends on one PostgreSQL schema', () => {
  const cleanups: (() => Promise<unknown> | void)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await Promise.resolve(c()).catch(() => undefined);
  });

  it('every history well-formed, each turn one terminal event, no input lost or run twice', async () => {
    ensureBuilt();
    const schema = uniqueSchema('turnlog_soak');
    cleanups.push(() => dropSchema(schema));
    const rnd = seededRandom(20261202);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;

    const engines: Engine[] = [];
    for (const name of ['e0', 'e1']) {
      const store = createPostgresStore({ connectionString: PG_URL, schema, max: 6 });
      cleanups.push(() => store.close());
      const e = await Engine.open({ store, workflows: [soakChat], logger: silentLogger, owner: name, instance: name, leaseMs: LEASE_MS, scanIntervalMs: 300 });
      cleanups.push(() => e.shutdown({ graceMs: 0 }));
      engines.push(e);
    }
    let child = new ChildEngine(schema, 'child-1');
    cleanups.push(() => child.kill());
    await child.ready;

    const ids = Array.from({ length: 300 }, (_, i) => `c${String(i).padStart(3, '0')}`);
    const accepted = new Map<string, string[]>(ids.map((id) => [id, []]));
    const uncertain = new Map<string, string[]>(ids.map((id) => [id, []]));
    const counts = { sends: 0, rejected: 0, lost: 0, cancelTurn: 0, cancelTask: 0, kills: 0 };
    let seq = 0;

    /** Starts or sends one input through a random engine; records whether it was accepted. */
    const deliver = async (op: 'start' | 'send', taskId: string): Promise<void> => {
      const inputId = `${taskId}-i${seq++}`;
      const input: SoakInput = { n: seq, delayMs: 5 + Math.floor(rnd() * 30) };
      counts.sends++;
      const viaChild = rnd() < 1 / 3 && !child.dead;
      if (viaChild) {
        const answer = await child.run(op, taskId, inputId, input);
        if (answer === 'ok') accepted.get(taskId)!.push(inputId);
        else if (answer === 'lost') (counts.lost++, uncertain.get(taskId)!.push(inputId));
        else if (answer === 'TURNLOG_TASK_CONFLICT') counts.rejected++;
        else uncertain.get(taskId)!.push(inputId);
        return;
      }
      const e = pick(engines);
      for (let tries = 0; ; tries++) {
        try {
          if (op === 'start') await e.start(soakChat, input, { taskId, inputId });
          else await e.task(taskId).send(input, { inputId });
          accepted.get(taskId)!.push(inputId);
          return;
        } catch (err) {
          if ((err as { code?: string }).code === 'TURNLOG_TASK_CONFLICT') {
            counts.rejected++;
            return;
          }
          // Anything else may be transient (the same input id is queued once): try again.
          if (tries >= 10) {
            uncertain.get(taskId)!.push(inputId);
            return;
          }
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    };

    /** Runs `ops` with at most `limit` in flight. */
    const pool = async (ops: (() => Promise<void>)[], limit: number) => {
      const running = new Set<Promise<void>>();
      for (const op of ops) {
        while (running.size >= limit) await Promise.race(running);
        const p: Promise<void> = op().finally(() => running.delete(p));
        running.add(p);
      }
      await Promise.all(running);
    };

    await pool(ids.map((id) => () => deliver('start', id)), 24);
    const OPS = 450;
    const ops: (() => Promise<void>)[] = [];
    for (let i = 0; i < OPS; i++) {
      const r = rnd();
      const id = pick(ids);
      if (i === 150 || i === 300) {
        ops.push(async () => {
          counts.kills++;
          child.kill();
          child = new ChildEngine(schema, `child-${counts.kills + 1}`);
          await child.ready;
        });
      } else if (r < 0.85) ops.push(() => deliver('send', id));
      else if (r < 0.97) ops.push(async () => void (await pick(engines).task(id).cancelTurn('soak').then(() => counts.cancelTurn++, () => undefined)));
      else ops.push(async () => void (await pick(engines).task(id).cancel('soak').then(() => counts.cancelTask++, () => undefined)));
    }
    const t0 = Date.now();
    await pool(ops, 24);

    // Quiet: no turn open, nothing queued or pending anywhere (the killed child's turns recovered).
    const reader = createPostgresStore({ connectionString: PG_URL, schema, max: 2 });
    await reader.open();
    cleanups.push(() => reader.close());
    await until(async () => {
      const page = await reader.listTasks({ limit: 1_000 });
      return page.tasks.length === ids.length && page.tasks.every((s) => (s.status === 'suspended' || s.status === 'completed') && s.queued === 0);
    }, 'every conversation to be quiet', 120_000);
    const quietAfterMs = Date.now() - t0;
    child.kill();
    for (const e of engines) await e.shutdown({ graceMs: 0 });

    const problems: string[] = [];
    let turns = 0;
    let recovered = 0;
    for (const id of ids) {
      const h = await reader.readEvents(id);
      problems.push(...checkSoakHistory(id, h, { accepted: accepted.get(id)!, uncertain: uncertain.get(id)! }));
      turns += h.filter((e) => e.type === 'TurnStarted' && e.attempt === 1).length;
      recovered += h.filter((e) => e.type === 'TurnStarted' && e.attempt > 1).length;
    }
    console.log(`soak: ${ids.length} conversations, ${turns} turns (${recovered} re-run attempts), ${JSON.stringify(counts)}, quiet ${quietAfterMs} ms after the last op batch began`);
    expect(problems).toEqual([]);
    expect(counts.kills).toBe(2);
    expect(recovered).toBeGreaterThan(0);
  }, 240_000);
});
