/**
 * Issue #10 item 3: one undecodable history must not stop the engine. Recovery at open and the
 * periodic scan isolate the task (logged with key and task, marked, refused with
 * HistoryCorruptError, visible in describe and list) and serve every other task. The corrupt
 * task's records are never rewritten or deleted.
 */
import { Level } from 'level';
import { afterEach, describe, expect, it } from 'vitest';
import { HistoryCorruptError, isTurnlogError } from '../../src/errors.js';
import type { HistoryEvent } from '../../src/history/events.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { Engine } from '../../src/runtime/engine.js';
import type { Logger } from '../../src/logger.js';
import type { ClaimRequest, HistoryStore } from '../../src/store/history-store.js';
import { eventKey, summaryKey } from '../../src/store/keys.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const engines: Engine[] = [];
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
  for (const c of cleanups.splice(0)) await c();
});

/** A logger that keeps errors, so tests can check what was reported. */
function recordingLogger(): Logger & { errors: { message: string; fields: Record<string, unknown> }[] } {
  const errors: { message: string; fields: Record<string, unknown> }[] = [];
  return { errors, info: () => {}, warn: () => {}, error: (message, fields = {}) => errors.push({ message, fields }) };
}

let hang = true;
const chat = defineWorkflow({
  name: 'chat',
  kind: 'multi-turn',
  turn: async (ctx, msg: string) => {
    if (msg === 'hang' && hang) await new Promise(() => undefined);
    return ctx.suspend('waiting', `echo ${msg}`);
  },
});

type Entries = [string, string][];

/** Every record of one task (events, summary, lease, snapshot, indexes) as hex, sorted. */
async function recordsOf(dir: string, taskId: string): Promise<Entries> {
  const db = new Level<Buffer, Buffer>(dir, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
  await db.open();
  try {
    const out: Entries = [];
    const id = Buffer.from(taskId);
    for (const [k, v] of await db.iterator().all()) {
      if (k[0] === 0x78 || k[0] === 0x6d) continue; // corrupt marks and meta
      const own = k[0] === 0x65 ? k.subarray(1, k.length - 5).equals(id) : k.subarray(k.length - id.length).equals(id) && (k.length === id.length + 1 || k[k.length - id.length - 1] === 0);
      if (own) out.push([k.toString('hex'), v.toString('hex')]);
    }
    return out;
  } finally {
    await db.close();
  }
}

async function overwrite(dir: string, key: Buffer, value: Buffer): Promise<void> {
  const db = new Level<Buffer, Buffer>(dir, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
  await db.open();
  await db.put(key, value);
  await db.close();
}

/**
 * A real store with `good` (suspended after one turn) and `bad` (a turn left in progress by a
 * shutdown, so recovery at the next open picks it up).
 */
async function storeWithTwoTasks(): Promise<string> {
  const d = await makeTmpDir('turnlog-corrupt-');
  cleanups.push(d.remove);
  hang = true;
  const first = await Engine.open({ store: d.path, workflows: [chat], logger: recordingLogger(), scanIntervalMs: 0 });
  const good = await first.start(chat, 'hi', { taskId: 'good' });
  await good.nextTurn();
  await first.start(chat, 'hang', { taskId: 'bad' });
  await first.shutdown({ graceMs: 0 });
  hang = false;
  return d.path;
}

/** TurnSuspended whose reason ends in half an emoji, as the codec wrote it before the fix. */
const PRE_FIX_EVENT = Buffer.from('080311000000000000f03f1801b2010c080112085375726520eda0bd', 'hex');

describe('recovery at open isolates a corrupt task', () => {
  for (const [what, bytes] of [
    ['garbage bytes', Buffer.from([0xff, 0xff, 0x01])],
    ['a lone surrogate written before the fix', PRE_FIX_EVENT],
  ] as const) {
    it(`${what}: the engine opens, serves the other task and refuses the corrupt one`, async () => {
      const dir = await storeWithTwoTasks();
      await overwrite(dir, eventKey('bad', 3), bytes);
      const before = await recordsOf(dir, 'bad');

      const log = recordingLogger();
      const engine = await Engine.open({ store: dir, workflows: [chat], logger: log, scanIntervalMs: 0 });
      engines.push(engine);

      // Logged once, naming the key and the task.
      const isolated = log.errors.filter((e) => e.message.includes('isolated'));
      expect(isolated).toHaveLength(1);
      expect(isolated[0]!.fields).toMatchObject({ taskId: 'bad', key: 'events/bad/3' });

      // Every other task is served.
      const good = engine.task<string, string>('good');
      await good.send('again');
      expect(await good.nextTurn()).toMatchObject({ status: 'suspended', output: 'echo again' });

      // The corrupt one is visible as such and refused.
      const d = await engine.describe('bad');
      expect(d).toMatchObject({ taskId: 'bad', workflow: 'chat', status: 'in_progress', decision: { kind: 'none', rule: 'corrupt' }, corrupt: { key: 'events/bad/3', code: 'TURNLOG_HISTORY_CORRUPT' } });
      const listed = (await engine.list()).tasks;
      expect(listed.find((s) => s.taskId === 'bad')?.corrupt).toMatchObject({ key: 'events/bad/3' });
      expect(listed.find((s) => s.taskId === 'good')?.corrupt).toBeUndefined();
      for (const call of [
        () => engine.start(chat, 'x', { taskId: 'bad' }),
        () => engine.task('bad').send('x'),
        () => engine.cancel('bad'),
        () => engine.withdraw('bad', 'in-1'),
        () => engine.turnResult('bad', 'in-1'),
        () => engine.history('bad'),
      ]) {
        const err = await call().then(() => undefined, (e: unknown) => e);
        expect(err).toBeInstanceOf(HistoryCorruptError);
        expect((err as HistoryCorruptError).key).toBe('events/bad/3');
      }
      // A periodic scan skips it quietly: no second report, no rewrite.
      await engine.recover();
      expect(log.errors.filter((e) => e.message.includes('isolated'))).toHaveLength(1);
      await engine.shutdown({ graceMs: 0 });
      expect(await recordsOf(dir, 'bad')).toEqual(before);

      // The mark survives a restart: the next engine reports and refuses it without reading it.
      const log2 = recordingLogger();
      const again = await Engine.open({ store: dir, workflows: [chat], logger: log2, scanIntervalMs: 0 });
      engines.push(again);
      expect(log2.errors.filter((e) => e.message.includes('isolated')).map((e) => e.fields['taskId'])).toEqual(['bad']);
      expect((await again.describe('bad')).corrupt?.key).toBe('events/bad/3');
      expect(isTurnlogError(await again.task('bad').send('x').catch((e: unknown) => e), 'TURNLOG_HISTORY_CORRUPT')).toBe(true);
    });
  }
});

describe('recovery at open with an unreadable summary', () => {
  it('the engine opens and recovers the in-progress task; the listing rebuilds the summary, nothing is logged', async () => {
    const dir = await storeWithTwoTasks();
    await overwrite(dir, summaryKey('good'), Buffer.from('{not json'));
    const log = recordingLogger();
    const engine = await Engine.open({ store: dir, workflows: [chat], logger: log, scanIntervalMs: 0 });
    engines.push(engine);
    expect(log.errors.map((e) => e.message)).not.toContain('recovery could not claim every due task');
    // `bad` was left in progress by the first engine and is re-run (it no longer hangs).
    const bad = engine.task<string, string>('bad');
    for (let i = 0; i < 400 && (await engine.describe('bad')).status !== 'suspended'; i++) await new Promise((r) => setTimeout(r, 5));
    expect((await engine.describe('bad')).status).toBe('suspended');
    await bad.send('next');
    expect(await bad.nextTurn()).toMatchObject({ status: 'suspended', output: 'echo next' });
  });
});

describe('an unreadable summary beside a task with queued input', () => {
  it('recovery still starts the queued turn of a task listed after it, every scan, and list() serves both', async () => {
    const d = await makeTmpDir('turnlog-corrupt-');
    cleanups.push(d.remove);
    const first = await Engine.open({ store: d.path, workflows: [chat], logger: recordingLogger(), scanIntervalMs: 0 });
    for (const id of ['a', 'b']) await (await first.start(chat, 'hi', { taskId: id })).nextTurn();
    await first.shutdown({ graceMs: 0 });
    // `b` gets an input the engine never ran (it died after queueing it); `a`'s summary is unreadable.
    const store = new LevelHistoryStore(d.path, { sync: false });
    await store.open();
    const b = await store.readEvents('b');
    const last = b[b.length - 1]!;
    await store.append('b', [{ ...b.find((e) => e.type === 'InputQueued')!, eventId: last.eventId + 1, generation: last.generation, time: last.time } as HistoryEvent], {
      expectedLastEventId: last.eventId,
      generation: last.generation,
    });
    await store.close();
    await overwrite(d.path, summaryKey('a'), Buffer.from('{not json'));

    const log = recordingLogger();
    const engine = await Engine.open({ store: d.path, workflows: [chat], logger: log, scanIntervalMs: 0 });
    engines.push(engine);
    for (let i = 0; i < 400 && (await engine.describe('b')).turn < 2; i++) await new Promise((r) => setTimeout(r, 5));
    expect((await engine.describe('b')).turn).toBe(2);
    await engine.recover();
    expect(log.errors).toEqual([]);
    expect((await engine.list()).tasks.map((t) => t.taskId)).toEqual(['a', 'b']);
  });
});

describe('the periodic scan isolates a corrupt task', () => {
  it('a task that becomes recoverable later and cannot be read is isolated; the same scan recovers the others', async () => {
    const inner = new MemoryHistoryStore();
    await inner.open();
    // Two tasks left in progress by an earlier engine, hidden from recovery until `reveal`.
    for (const id of ['late', 'other']) {
      const events = historyBuilder(id).created({ workflow: 'chat', kind: 'multi-turn' }).input('hi').turnStarted().build();
      await inner.append(id, events, { expectedLastEventId: 0, generation: events[0]!.generation });
    }
    let reveal = false;
    const store = new Proxy(inner, {
      get(target, prop, receiver) {
        if (prop === 'open' || prop === 'close') return async () => undefined;
        if (prop === 'claimDueWork') {
          return async (request: ClaimRequest) => (reveal ? target.claimDueWork(request) : { tasks: [] });
        }
        if (prop === 'readEvents') {
          return async (taskId: string, o?: object): Promise<HistoryEvent[]> => {
            if (taskId === 'late') throw new HistoryCorruptError('events/late/2', 'garbled');
            return target.readEvents(taskId, o);
          };
        }
        const v = Reflect.get(target, prop, receiver) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    }) as HistoryStore;
    const clock = new ManualClock();
    const log = recordingLogger();
    const engine = await Engine.open({ store, workflows: [chat], logger: log, clock, scanIntervalMs: 1000 });
    engines.push(engine);
    expect(log.errors).toEqual([]);

    reveal = true;
    await clock.advance(1000);
    for (let i = 0; i < 200 && (await inner.getSummary('other'))?.status !== 'suspended'; i++) await clock.advance(0);

    expect(log.errors.filter((e) => e.message.includes('isolated')).map((e) => e.fields)).toEqual([
      expect.objectContaining({ taskId: 'late', key: 'events/late/2' }),
    ]);
    expect(log.errors.filter((e) => e.message.includes('scan failed'))).toEqual([]);
    expect((await inner.getSummary('other'))?.status).toBe('suspended');
    expect((await engine.describe('late')).corrupt?.key).toBe('events/late/2');
    expect((await inner.listCorrupt()).map((m) => m.taskId)).toEqual(['late']);
    // The scanner stays armed and keeps serving.
    expect(clock.pendingTimers).toBeGreaterThan(0);
  });
});
