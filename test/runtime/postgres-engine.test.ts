/**
 * An engine on PostgreSQL: a real child engine process is SIGKILLed mid-turn, and a second
 * engine (another owner) recovers the turn only once the dead engine's lease has expired on the
 * database clock. The store is not exclusive, so nothing proves the first engine dead sooner.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { Engine } from '../../src/runtime/engine.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { silentLogger } from '../../src/logger.js';
import { createPostgresStore, type PostgresHistoryStore } from '../../src/store/postgres-store.js';
import { stepThenStall } from '../fixtures/workflows/pg-recovery.js';
import { ensureBuilt } from '../cli/run-cli.js';
import { PG_URL, describePg, dropSchema, uniqueSchema } from '../helpers/postgres.js';

const HOST = fileURLToPath(new URL('../../dist/test/fixtures/children/pg-engine-host.js', import.meta.url));

async function until(cond: () => Promise<boolean>, what: string, limitMs = 60_000): Promise<void> {
  const end = Date.now() + limitMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const of = <T extends HistoryEvent['type']>(h: HistoryEvent[], type: T) => h.filter((e): e is Extract<HistoryEvent, { type: T }> => e.type === type);

describePg('Engine on PostgreSQL', () => {
  let child: ChildProcess | undefined;
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    if (child && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child!.once('exit', r));
      child.kill('SIGKILL');
      await exited;
    }
    child = undefined;
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it('recovers a turn of a SIGKILLed engine after its lease expires on the database clock; the recorded step is replayed', async () => {
    ensureBuilt();
    const schema = uniqueSchema('turnlog_engine');
    cleanups.push(() => dropSchema(schema));
    const leaseMs = 3_000;
    child = spawn(process.execPath, [HOST, PG_URL, schema, String(leaseMs)], { stdio: ['ignore', 'pipe', 'inherit'] });
    const line = await new Promise<string>((resolve, reject) => {
      createInterface({ input: child!.stdout! }).once('line', resolve);
      child!.once('exit', (code) => reject(new Error(`engine host exited (${code}) before its step`)));
    });
    const { pid } = JSON.parse(line) as { pid: number };
    const exited = new Promise((r) => child!.once('exit', r));
    child.kill('SIGKILL');
    await exited;

    const store: PostgresHistoryStore = createPostgresStore({ connectionString: PG_URL, schema });
    const engine = await Engine.open({ store, workflows: [stepThenStall], logger: silentLogger, owner: 'engine-b', instance: 'host-b', leaseMs: 60_000, scanIntervalMs: 100 });
    cleanups.push(() => store.close());
    cleanups.push(() => engine.shutdown({ graceMs: 100 }));
    const dead = (await store.getLease('t1'))!;
    expect(dead).toMatchObject({ owner: 'engine', instance: 'host-a', generation: 1 });

    // While the dead engine's lease is live on the database clock, nobody takes the turn over.
    const early = await engine.history('t1');
    if ((await store.databaseNow()) < dead.expiresAt) {
      expect(of(early, 'TurnStarted')).toHaveLength(1);
      expect(await store.listRecoverable(Number.MAX_SAFE_INTEGER, 'host-b')).toEqual([]);
    }

    await until(async () => (await engine.history('t1')).some((e) => e.type === 'TaskCompleted'), 'the second engine to recover t1');
    const h = await engine.history('t1');
    const starts = of(h, 'TurnStarted');
    expect(starts.map((s) => [s.instance, s.entryMode])).toEqual([
      ['host-a', 'fresh'],
      ['host-b', 'recovered'],
    ]);
    expect(of(h, 'LeaseClaimed').at(-1)).toMatchObject({ owner: 'engine-b', instance: 'host-b', previousGeneration: 1, reason: 'recovery' });
    expect(starts[1]!.generation).toBe(2);
    // The step ran once, in the killed process; the recovered attempt got its recorded value.
    expect(of(h, 'StepCompleted')).toHaveLength(1);
    const result = await engine.latestTurnResult<{ charged: { by: number; attempt: number }; attempt: number }>('t1');
    expect(result.output).toMatchObject({ charged: { by: pid, attempt: 1 }, attempt: 2 });
    expect(await store.getLease('t1')).toMatchObject({ owner: 'engine-b', generation: 2 });
  });

  it('payload codecs, snapshots and retention work on PostgreSQL as on LevelDB', async () => {
    const schema = uniqueSchema('turnlog_engine');
    cleanups.push(() => dropSchema(schema));
    const store = createPostgresStore({ connectionString: PG_URL, schema });
    cleanups.push(() => store.close());
    const xor = (p: { metadata: Record<string, Uint8Array>; data: Uint8Array }) => ({ ...p, data: p.data.map((b) => b ^ 0x5a) });
    const clock = new ManualClock();
    const secret = defineWorkflow({
      name: 'secret',
      turn: async (ctx, s: string) => {
        let out = s;
        for (let i = 0; i < 5; i++) out = await ctx.step('echo', () => `${out}!`);
        return out;
      },
    });
    const engine = await Engine.open({ store, workflows: [secret], logger: silentLogger, clock, payloadCodecs: [{ encode: xor, decode: xor }], retentionMs: 60_000, snapshotEvery: 4, scanIntervalMs: 0 });
    cleanups.push(() => engine.shutdown({ graceMs: 100 }));
    expect(await (await engine.start(secret, 'classified', { taskId: 'sec' })).result()).toBe('classified!!!!!');
    // Only encoded payloads reach the database.
    const raw = (await store.readEvents('sec')).map((e) => ('input' in e ? Buffer.from(e.input.data).toString() : 'result' in e && e.result ? Buffer.from(e.result.data).toString() : ''));
    expect(raw.join('|')).not.toContain('classified');
    expect((await store.getSnapshot('sec'))?.eventId).toBeGreaterThanOrEqual(4);
    await clock.advance(61_000);
    await engine.recover();
    expect(await store.getSummary('sec')).toBeUndefined();
    expect(await store.readEvents('sec')).toEqual([]);
    expect(await store.getSnapshot('sec')).toBeUndefined();
  });

  it('a postgres:// URL as the store option opens (and on shutdown closes) a PostgreSQL store, not a LevelDB directory', async () => {
    const schema = uniqueSchema('turnlog_engine');
    cleanups.push(() => dropSchema(schema));
    const once = defineWorkflow({ name: 'once', turn: async (_ctx, x: number) => x * 2 });
    const engine = await Engine.open({ store: `${PG_URL}?schema=${schema}`, workflows: [once], logger: silentLogger, scanIntervalMs: 0 });
    expect(engine.store.exclusive).toBe(false);
    expect(await (await engine.start(once, 21, { taskId: 'u1' })).result()).toBe(42);
    await engine.shutdown();
    expect(existsSync('postgres:')).toBe(false);
    const check = createPostgresStore({ connectionString: PG_URL, schema, migrate: false });
    await check.open();
    cleanups.push(() => check.close());
    expect(await check.getSummary('u1')).toMatchObject({ status: 'completed', outcome: 'succeeded' });
  });
});
