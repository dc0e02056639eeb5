/**
 * Soak (issue #11, docs/scale-out.md#failures): three engine processes on one PostgreSQL schema
 * serve 300 conversations under seeded random sends, turn cancels and task cancels, while the test
 * SIGKILLs engines at random times and restarts each under a new instance. Once quiet,
 * test/helpers/soak-checker.ts reads every history and the step bodies the processes logged:
 * well-formed, each turn one terminal event, no recorded step run again after its record was
 * durable, no input lost or run twice.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, expect, it } from 'vitest';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import type { SoakInput, StepRun } from '../fixtures/workflows/pg-soak.js';
import { ensureBuilt } from '../cli/run-cli.js';
import { PG_URL, describePg, dropSchema, uniqueSchema } from '../helpers/postgres.js';
import { until } from '../helpers/processes.js';
import { checkSoakHistory } from '../helpers/soak-checker.js';
import { seededRandom } from '../../src/testing/random.js';

const HOST = fileURLToPath(new URL('../../dist/test/fixtures/children/pg-soak-host.js', import.meta.url));
const LEASE_MS = 2_000;
const ENGINES = 3;

type Op = 'start' | 'send' | 'cancelTurn' | 'cancel';

/** An engine process: commands in on stdin, answers out on stdout; a kill answers every pending one `lost`. */
class EngineProcess {
  readonly proc: ChildProcess;
  readonly ready: Promise<void>;
  readonly #pending = new Map<number, (answer: string) => void>();
  #next = 0;
  live = false;
  dead = false;

  constructor(schema: string, instance: string, stepLog: string) {
    this.proc = spawn(process.execPath, [HOST, PG_URL, schema, instance, String(LEASE_MS), stepLog], { stdio: ['pipe', 'pipe', 'inherit'] });
    let ready!: () => void;
    let failed!: (err: Error) => void;
    this.ready = new Promise((resolve, reject) => ((ready = resolve), (failed = reject)));
    createInterface({ input: this.proc.stdout! }).on('line', (l) => {
      const m = JSON.parse(l) as { ready?: boolean; id?: number; ok?: boolean; code?: string };
      if (m.ready) return ((this.live = true), ready());
      const done = this.#pending.get(m.id!);
      this.#pending.delete(m.id!);
      done?.(m.ok ? 'ok' : m.code!);
    });
    this.proc.on('exit', (code, signal) => {
      if (!this.dead) failed(new Error(`engine process ${instance} exited (${code ?? signal}) before it was killed`));
      this.kill();
    });
  }

  run(op: Op, taskId: string, inputId = '', input?: SoakInput): Promise<string> {
    if (!this.live || this.dead) return Promise.resolve('lost');
    const id = this.#next++;
    return new Promise((resolve) => {
      this.#pending.set(id, resolve);
      this.proc.stdin!.write(JSON.stringify({ op, id, taskId, inputId, input }) + '\n');
    });
  }

  kill(): void {
    this.live = false;
    if (!this.dead) {
      this.dead = true;
      this.proc.kill('SIGKILL');
    }
    for (const done of this.#pending.values()) done('lost');
    this.#pending.clear();
  }
}

describePg('soak: three engine processes, SIGKILLed and restarted, on one PostgreSQL schema', () => {
  const cleanups: (() => Promise<unknown> | void)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await Promise.resolve(c()).catch(() => undefined);
  });

  it('every turn ends once, no recorded step runs again, no input lost or run twice', async () => {
    ensureBuilt();
    const schema = uniqueSchema('turnlog_soak');
    cleanups.push(() => dropSchema(schema));
    const dir = mkdtempSync(join(tmpdir(), 'turnlog-soak-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const rnd = seededRandom(20261202);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;

    // Each slot runs one engine process at a time; a restart is a new process and a new instance.
    const generation = Array.from({ length: ENGINES }, () => 1);
    const spawnEngine = (slot: number) => new EngineProcess(schema, `e${slot}-${generation[slot]}`, join(dir, `steps-e${slot}-${generation[slot]}.log`));
    const engines = Array.from({ length: ENGINES }, (_, slot) => spawnEngine(slot));
    cleanups.push(() => engines.forEach((e) => e.kill()));
    await Promise.all(engines.map((e) => e.ready));
    /** A live engine process, at random (some slot is always live: kills restart one at a time). */
    const anyLive = async (): Promise<EngineProcess> => {
      for (;;) {
        const live = engines.filter((e) => e.live);
        if (live.length) return pick(live);
        await new Promise((r) => setTimeout(r, 20));
      }
    };

    const ids = Array.from({ length: 300 }, (_, i) => `c${String(i).padStart(3, '0')}`);
    const accepted = new Map<string, string[]>(ids.map((id) => [id, []]));
    const uncertain = new Map<string, string[]>(ids.map((id) => [id, []]));
    const counts = { sends: 0, rejected: 0, lost: 0, cancelTurn: 0, cancelTask: 0, kills: 0 };
    let seq = 0;

    /**
     * Starts or sends one input through random live engines. An answer lost with a killed engine
     * is sent again, with the same input id, through another (queued once either way).
     */
    const deliver = async (op: 'start' | 'send', taskId: string): Promise<void> => {
      const inputId = `${taskId}-i${seq++}`;
      const input: SoakInput = { n: seq, delayMs: 5 + Math.floor(rnd() * 30) };
      counts.sends++;
      let lost = false;
      for (let tries = 0; tries < 10; tries++) {
        const answer = await (await anyLive()).run(op, taskId, inputId, input);
        if (answer === 'ok') return void accepted.get(taskId)!.push(inputId);
        if (answer === 'lost') (counts.lost++, (lost = true));
        else if (answer === 'TURNLOG_TASK_CONFLICT' || answer === 'TURNLOG_STEERING_QUEUE_FULL') {
          // Refused now; if an earlier try's answer was lost, that one may have been queued.
          if (lost) uncertain.get(taskId)!.push(inputId);
          else counts.rejected++;
          return;
        }
        // Anything else may be transient (a store error while a lease is recovered): try again.
        await new Promise((r) => setTimeout(r, 50));
      }
      uncertain.get(taskId)!.push(inputId);
    };
    const cancel = async (op: 'cancelTurn' | 'cancel', taskId: string): Promise<void> => {
      if ((await (await anyLive()).run(op, taskId)) === 'ok') counts[op === 'cancel' ? 'cancelTask' : 'cancelTurn']++;
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

    /**
     * The killer: while the operations run, every 1.5–3.5 s (seeded) SIGKILL one engine process
     * mid-work and start its slot again. The first three kills take each slot once, in random order.
     */
    let operating = true;
    const order = [...Array(ENGINES).keys()].sort(() => rnd() - 0.5);
    const killed = new Set<number>();
    const killer = (async () => {
      while (operating) {
        await new Promise((r) => setTimeout(r, 1_500 + Math.floor(rnd() * 2_000)));
        if (!operating) return;
        const slot = order[counts.kills] ?? Math.floor(rnd() * ENGINES);
        engines[slot]!.kill();
        counts.kills++;
        killed.add(slot);
        generation[slot]!++;
        engines[slot] = spawnEngine(slot);
        await engines[slot]!.ready;
      }
    })();

    const t0 = Date.now();
    await pool(ids.map((id) => () => deliver('start', id)), 24);
    const OPS = 450;
    const ops: (() => Promise<void>)[] = [];
    for (let i = 0; i < OPS; i++) {
      const r = rnd();
      const id = pick(ids);
      if (r < 0.85) ops.push(() => deliver('send', id));
      else if (r < 0.97) ops.push(() => cancel('cancelTurn', id));
      else ops.push(() => cancel('cancel', id));
    }
    await pool(ops, 40);
    // Every slot killed at least once before the operations stop.
    await until(() => killed.size === ENGINES, 'every engine process to be killed once', 60_000);
    operating = false;
    await killer;
    const opsMs = Date.now() - t0;

    // Quiet: no turn open, nothing queued on a live task (the killed engines' turns recovered). A
    // task cancelled while a steering input waited keeps it queued, never run (its summary counts it).
    const reader = createPostgresStore({ connectionString: PG_URL, schema, max: 2 });
    await reader.open();
    cleanups.push(() => reader.close());
    await until(async () => {
      const page = await reader.listTasks({ limit: 1_000 });
      return page.tasks.length === ids.length && page.tasks.every((s) => s.status === 'completed' || (s.status === 'suspended' && s.queued === 0));
    }, 'every conversation to be quiet', 120_000);
    const quietMs = Date.now() - t0 - opsMs;
    for (const e of engines) e.kill();

    // The step bodies that ran, from every process's log (a killed one's too).
    const runs = new Map<string, StepRun[]>(ids.map((id) => [id, []]));
    for (const f of readdirSync(dir).filter((f) => f.startsWith('steps-'))) {
      for (const line of readFileSync(join(dir, f), 'utf8').split('\n')) {
        if (!line) continue;
        let run: StepRun;
        try {
          run = JSON.parse(line) as StepRun;
        } catch {
          continue; // the last line of a process killed mid-write
        }
        runs.get(run.taskId)?.push(run);
      }
    }

    const problems: string[] = [];
    let turns = 0;
    let recovered = 0;
    for (const id of ids) {
      const h = await reader.readEvents(id);
      problems.push(...checkSoakHistory(id, h, { accepted: accepted.get(id)!, uncertain: uncertain.get(id)!, checkRuns: true }, runs.get(id)!));
      turns += h.filter((e) => e.type === 'TurnStarted' && e.attempt === 1).length;
      recovered += h.filter((e) => e.type === 'TurnStarted' && e.attempt > 1).length;
    }
    const stepRuns = [...runs.values()].reduce((a, r) => a + r.length, 0);
    console.log(
      `soak: ${ids.length} conversations, ${turns} turns (${recovered} re-run attempts), ${stepRuns} step runs, ${JSON.stringify(counts)}, operations ${opsMs} ms, quiet ${quietMs} ms after`,
    );
    expect(problems).toEqual([]);
    expect(killed.size).toBe(ENGINES);
    expect(recovered).toBeGreaterThan(0);
  }, 240_000);
});
