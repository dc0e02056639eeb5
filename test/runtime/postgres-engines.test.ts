/**
 * Many engines on one PostgreSQL schema (docs/scale-out.md): appends are notified (LISTEN/NOTIFY),
 * so an input sent through engine B reaches the turn engine A runs, B's waiters learn the turn's
 * end, and B's cancel stops A's turn — with the periodic scan off, so nothing here is polling.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { silentLogger } from '../../src/logger.js';
import { createPostgresStore, type PostgresHistoryStore } from '../../src/store/postgres-store.js';
import type { HistoryEvent } from '../../src/history/events.js';
import { PG_URL, describePg, dropSchema, uniqueSchema, withClient } from '../helpers/postgres.js';
import { until } from '../helpers/processes.js';

const chat = defineWorkflow({
  name: 'pg-chat',
  kind: 'multi-turn',
  turn: async (ctx, first: string) => {
    // Waits for one steering input, then ends the turn with everything it got.
    const more = await ctx.takeInputs<string>({ wait: true });
    return [first, ...more].join('+');
  },
});

const hang = defineWorkflow({
  name: 'pg-hang',
  turn: async (ctx) => {
    await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
    return { sawCancel: ctx.cancelRequested };
  },
});

const of = <T extends HistoryEvent['type']>(h: HistoryEvent[], type: T) => h.filter((e): e is Extract<HistoryEvent, { type: T }> => e.type === type);

describePg('many engines on one PostgreSQL schema', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
  });

  async function engines(n: number, opts: { sameOwner?: boolean; schema?: string } = {}): Promise<{ schema: string; engines: Engine[]; stores: PostgresHistoryStore[] }> {
    const schema = opts.schema ?? uniqueSchema('turnlog_engines');
    if (!opts.schema) cleanups.push(() => dropSchema(schema));
    const out: Engine[] = [];
    const stores: PostgresHistoryStore[] = [];
    for (let i = 0; i < n; i++) {
      const store = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
      cleanups.push(() => store.close());
      const engine = await Engine.open({
        store,
        workflows: [chat, hang],
        logger: silentLogger,
        owner: opts.sameOwner ? 'one-host|turnlog' : `engine-${i}`,
        instance: `instance-${i}`,
        scanIntervalMs: 0,
        leaseMs: 60_000,
      });
      cleanups.push(() => engine.shutdown({ graceMs: 200 }));
      expect(await store.listening()).toBe(true);
      out.push(engine);
      stores.push(store);
    }
    return { schema, engines: out, stores };
  }

  it('an input sent through engine B reaches the turn engine A runs (takeInputs), and B’s waiter gets the result, without polling', async () => {
    const { engines: [a, b] } = await engines(2);
    const started = await a!.start(chat, 'hello', { taskId: 'c1' });
    await until(async () => (await a!.history('c1')).some((e) => e.type === 'TurnStarted'), 'turn 1 to start on A');
    const sent = await b!.task('c1').send('steer');
    const onB = await b!.task('c1').turnResult(sent);
    expect(onB).toMatchObject({ status: 'completed', output: 'hello+steer', turn: 1 });
    expect(await started.result()).toBe('hello+steer');
    const h = await b!.history('c1');
    // The input was queued by B as a steering input under A's generation, and taken by A's turn.
    expect(of(h, 'InputQueued').map((e) => [e.inputId, e.steering])).toEqual([
      [started.inputId, false],
      [sent, true],
    ]);
    expect(of(h, 'InputsTaken')[0]!.inputIds).toEqual([sent]);
    expect(of(h, 'TurnStarted').map((e) => e.instance)).toEqual(['instance-0']);
    expect(of(h, 'TurnCompleted')).toHaveLength(1);
  });

  it('a cancel through engine B stops the turn engine A runs; waiters on both engines learn it', async () => {
    const { engines: [a, b] } = await engines(2);
    const onA = await a!.start(hang, null, { taskId: 'h1' });
    await until(async () => (await b!.history('h1')).some((e) => e.type === 'TurnStarted'), 'the turn to start on A');
    const onB = b!.task('h1').result();
    await b!.cancel('h1', 'stop it');
    const [ra, rb] = await Promise.all([onA.nextTurn(), onB.then(() => 'resolved', (e: Error) => e.message)]);
    expect(ra.status).toBe('cancelled');
    expect(rb).toMatch(/cancel/);
    const h = await a!.history('h1');
    expect(of(h, 'TurnCancelled')).toHaveLength(1);
    expect(of(h, 'TaskCompleted')[0]).toMatchObject({ outcome: 'cancelled' });
    // A's handler ended once and its late outcome was discarded: exactly one terminal.
    expect(h.filter((e) => e.type.startsWith('Turn') && e.type !== 'TurnStarted')).toHaveLength(1);
  });

  it('fencing goes by instance: an engine with the same owner does not take a turn another instance runs', async () => {
    const { engines: [a, b], stores } = await engines(2, { sameOwner: true });
    await a!.start(chat, 'x', { taskId: 's1' });
    await until(async () => (await a!.history('s1')).some((e) => e.type === 'TurnStarted'), 'the turn to start on A');
    const held = await stores[0]!.getLease('s1');
    await b!.recover();
    const sent = await b!.task('s1').send('y');
    expect((await b!.task('s1').turnResult(sent)).output).toBe('x+y');
    const h = await b!.history('s1');
    expect(of(h, 'TurnStarted').map((e) => [e.instance, e.generation])).toEqual([['instance-0', held!.generation]]);
    expect(of(h, 'LeaseClaimed').map((e) => e.instance)).toEqual(['instance-0']);
  });

  it('the LISTEN connection reconnects after the server drops it (pg_terminate_backend), and notices flow again', async () => {
    const { engines: [a, b], stores } = await engines(2);
    const listenerPids = await withClient(async (c) => {
      // Only this schema's listeners: other runs on the same server (other worktrees) keep theirs.
      const r = await c.query(`SELECT pid FROM pg_stat_activity WHERE query = $1 AND datname = current_database()`, [`LISTEN "${stores[0]!.channel}"`]);
      return r.rows.map((x: { pid: number }) => x.pid);
    });
    expect(listenerPids.length).toBeGreaterThanOrEqual(2);
    await withClient((c) => c.query(`SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) pid`, [listenerPids]));
    await until(async () => (await stores[0]!.listening()) && (await stores[1]!.listening()) && stores.every((s) => s.listenerConnects() >= 2), 'both listeners to reconnect');
    const onA = await a!.start(chat, 'again', { taskId: 'r1' });
    await until(async () => (await a!.history('r1')).some((e) => e.type === 'TurnStarted'), 'the turn to start on A');
    await b!.task('r1').send('steer');
    expect(await onA.result()).toBe('again+steer');
  });
});

describePg('orphans spread across engines with free slots', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
  });

  it('three engines capped at 2 turns each claim six orphaned turns two apiece, each re-run exactly once', async () => {
    const schema = uniqueSchema('turnlog_orphans');
    cleanups.push(() => dropSchema(schema));
    const gates: (() => void)[] = [];
    const orphan = defineWorkflow({
      name: 'pg-orphan',
      turn: async (ctx) => {
        // Attempt 1 never ends (its engine "dies"); the recovered attempt holds its slot until released.
        if (ctx.attempt === 1) await new Promise<never>(() => undefined);
        await new Promise<void>((r) => gates.push(r));
        return ctx.attempt;
      },
    });
    const open = async (name: string, extra: { leaseMs: number; maxRunningTurns?: number }) => {
      const store = createPostgresStore({ connectionString: PG_URL, schema, max: 4 });
      cleanups.push(() => store.close());
      const e = await Engine.open({ store, workflows: [orphan], logger: silentLogger, owner: name, instance: name, scanIntervalMs: 0, shutdownGraceMs: 0, ...extra });
      cleanups.push(() => e.shutdown({ graceMs: 0 }));
      return { e, store };
    };
    const dying = await open('dying', { leaseMs: 300 });
    for (let i = 0; i < 6; i++) await dying.e.start(orphan, null, { taskId: `o${i}` });
    // Shutdown leaves the turns in progress, as a crash would; their leases lapse 300 ms later.
    await dying.e.shutdown({ graceMs: 0 });
    await until(async () => (await dying.store.listRecoverable(0, 'x')).length === 6, 'the leases to expire');
    const live = [await open('a', { leaseMs: 60_000, maxRunningTurns: 2 }), await open('b', { leaseMs: 60_000, maxRunningTurns: 2 }), await open('c', { leaseMs: 60_000, maxRunningTurns: 2 })];
    await Promise.all(live.map(({ e }) => e.recover()));
    await until(() => gates.length === 6, 'six recovered attempts');
    const ran = new Map<string, number>();
    for (let i = 0; i < 6; i++) {
      const h = await live[0]!.e.history(`o${i}`);
      const starts = of(h, 'TurnStarted');
      expect(starts.map((x) => x.attempt)).toEqual([1, 2]);
      expect(of(h, 'LeaseClaimed').at(-1)).toMatchObject({ reason: 'recovery', previousGeneration: 1, instance: starts[1]!.instance });
      ran.set(starts[1]!.instance, (ran.get(starts[1]!.instance) ?? 0) + 1);
    }
    expect(Object.fromEntries(ran)).toEqual({ a: 2, b: 2, c: 2 });
    for (const g of gates.splice(0)) g();
    for (let i = 0; i < 6; i++) expect(await live[1]!.e.task(`o${i}`).result()).toBe(2);
  });
});

describe('notice payloads', () => {
  it('round-trip task ids with colons; garbage is ignored', async () => {
    const { decodeNotice, encodeNotice, noticeChannel } = await import('../../src/store/postgres-listener.js');
    expect(decodeNotice(encodeNotice('a:b:c', 42))).toEqual({ taskId: 'a:b:c', lastEventId: 42 });
    expect(decodeNotice('nope')).toBeUndefined();
    expect(decodeNotice(':x')).toBeUndefined();
    expect(noticeChannel('x'.repeat(63)).length).toBeLessThan(63);
    expect(noticeChannel('a')).not.toBe(noticeChannel('b'));
  });
});
