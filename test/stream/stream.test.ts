// task.stream() (docs/streaming.md): lifecycle items and live chunks in offset order, reconnects
// from an offset, gaps, restarts after a SIGKILLed worker, and the stream's errors.
// Process tests import the compiled fixtures (dist/test/fixtures/workflows): build first.
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { Engine, type EngineOptions } from '../../src/runtime/engine.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { ProcessExecutor } from '../../src/executor/process-executor.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { silentLogger } from '../../src/logger.js';
import { isTurnlogError } from '../../src/errors.js';
import type { StreamItem } from '../../src/stream/items.js';
import * as fixtures from '../fixtures/workflows/index.js';

const MODULE = fileURLToPath(new URL('../../dist/test/fixtures/workflows/index.js', import.meta.url));

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function open(options: Partial<EngineOptions> & Pick<EngineOptions, 'workflows'>): Promise<Engine> {
  const engine = await Engine.open({ store: new MemoryHistoryStore(), logger: silentLogger, scanIntervalMs: 0, ...options });
  cleanups.push(() => engine.shutdown({ graceMs: 100 }));
  return engine;
}

function processExecutor(): ProcessExecutor {
  const exec = new ProcessExecutor({ workflowsModule: MODULE, execArgv: [], logger: silentLogger });
  cleanups.push(() => exec.close());
  return exec;
}

/** Reads items until one matches `stop` (included). */
async function readUntil(it: AsyncIterable<StreamItem>, stop: (i: StreamItem) => boolean): Promise<StreamItem[]> {
  const out: StreamItem[] = [];
  for await (const item of it) {
    out.push(item);
    if (stop(item)) break;
  }
  return out;
}

function gate() {
  let open!: () => void;
  const promise = new Promise<void>((r) => (open = r));
  return { promise, open };
}

function summary(items: StreamItem[]): string[] {
  return items.map((i) => {
    switch (i.kind) {
      case 'chunk':
        return `chunk ${JSON.stringify(i.data)}`;
      case 'step-started':
      case 'step-completed':
        return `${i.kind} ${i.name}`;
      case 'turn-ended':
        return `turn-ended ${i.status}`;
      case 'attempt-restarted':
        return `attempt-restarted ${i.attempt}`;
      default:
        return i.kind;
    }
  });
}

function offsetsIncrease(items: StreamItem[]): boolean {
  const key = (o: string) => o.split('.').map(Number) as [number, number?];
  return items.every((it, i) => {
    if (i === 0) return true;
    const [a, b = 0] = key(items[i - 1]!.offset);
    const [c, d = 0] = key(it.offset);
    return c > a || (c === a && d > b);
  });
}

const talk = defineWorkflow({
  name: 'talk',
  turn: async (ctx, words: string[]) => {
    for (const w of words.slice(0, 2)) ctx.emit(w);
    const r = await ctx.step('lookup', () => 'found');
    for (const w of words.slice(2)) ctx.emit(w);
    return r;
  },
});

describe('task.stream() on an inline turn', () => {
  it('yields the lifecycle and the chunks in order, each with an increasing offset, and ends with the task', async () => {
    const engine = await open({ workflows: [talk] });
    const h = await engine.start(talk, ['a', 'b', 'c'], { taskId: 's1' });
    const items = await readUntil(h.stream(), () => false);
    expect(summary(items)).toEqual([
      'input-queued',
      'turn-started',
      'chunk "a"',
      'chunk "b"',
      'step-started lookup',
      'step-completed lookup',
      'chunk "c"',
      'turn-ended completed',
      'task-completed',
    ]);
    expect(offsetsIncrease(items)).toBe(true);
    expect(items.find((i) => i.kind === 'step-completed')).toMatchObject({ result: 'found', seq: 1, taskId: 's1' });
    expect(items.find((i) => i.kind === 'turn-ended')).toMatchObject({ output: 'found', turn: 1 });
    // A durable item's offset is its event id.
    const history = await h.history();
    const started = history.find((e) => e.type === 'TurnStarted')!;
    expect(items[1]!.offset).toBe(String(started.eventId));
  });

  it('shows chunks while the turn still runs (a live reader)', async () => {
    const hold = gate();
    const slow = defineWorkflow({
      name: 'slow-talk',
      turn: async (ctx) => {
        ctx.emit('first');
        await hold.promise;
        ctx.emit('second');
        return 'done';
      },
    });
    const engine = await open({ workflows: [slow] });
    const h = await engine.start(slow, null, { taskId: 's2' });
    const it = h.stream()[Symbol.asyncIterator]();
    const seen: StreamItem[] = [];
    while (!seen.some((i) => i.kind === 'chunk')) seen.push((await it.next()).value as StreamItem);
    expect((await h.describe()).status).toBe('in_progress');
    hold.open();
    for (;;) {
      const r = await it.next();
      if (r.done) break;
      seen.push(r.value);
    }
    expect(summary(seen)).toEqual(['input-queued', 'turn-started', 'chunk "first"', 'chunk "second"', 'turn-ended completed', 'task-completed']);
  });

  it('a reader that reconnects with an offset gets everything after it: no gap, no duplicate', async () => {
    const engine = await open({ workflows: [talk] });
    const h = await engine.start(talk, ['a', 'b', 'c', 'd'], { taskId: 's3' });
    const all = await readUntil(h.stream(), () => false);
    // From the last item (task-completed): nothing more, and the iterator ends.
    expect(await readUntil(h.stream({ from: all.at(-1)!.offset }), () => false)).toEqual([]);
    for (let k = 0; k < all.length - 1; k++) {
      const rest = await readUntil(h.stream({ from: all[k]!.offset }), () => false);
      expect(rest).toEqual(all.slice(k + 1));
    }
  });

  it('a reader behind a full buffer gets one gap item, then carries on', async () => {
    const many = defineWorkflow({
      name: 'many',
      turn: async (ctx, n: number) => {
        for (let i = 0; i < n; i++) ctx.emit(i);
        return n;
      },
    });
    const engine = await open({ workflows: [many], streamBufferItems: 10 });
    const h = await engine.start(many, 50, { taskId: 's4' });
    await h.result();
    const items = await readUntil(h.stream(), () => false);
    const chunks = items.filter((i) => i.kind === 'chunk').map((i) => (i as { data: unknown }).data);
    expect(chunks).toEqual([40, 41, 42, 43, 44, 45, 46, 47, 48, 49]);
    const gaps = items.filter((i) => i.kind === 'gap');
    expect(gaps).toHaveLength(1);
    expect(summary(items).indexOf('gap')).toBe(summary(items).indexOf('chunk 40') - 1);
    expect(offsetsIncrease(items)).toBe(true);
  });

  it('a steering input sent mid-turn shows as input-queued (steering) then inputs-taken, in the order it happened', async () => {
    const hold = gate();
    const steer = defineWorkflow({
      name: 'steer',
      kind: 'multi-turn',
      turn: async (ctx, first: string) => {
        ctx.emit(`answering ${first}`);
        await hold.promise;
        const more = await ctx.takeInputs<string>();
        ctx.emit(`also ${more.join(',')}`);
        return ctx.suspend('next', more);
      },
    });
    const engine = await open({ workflows: [steer] });
    const h = await engine.start(steer, 'a', { taskId: 's8' });
    const ac = new AbortController();
    const items: StreamItem[] = [];
    const reading = (async () => {
      for await (const item of h.stream({ signal: ac.signal })) {
        items.push(item);
        if (item.kind === 'chunk' && item.data === 'answering a') {
          await h.send('b');
          hold.open();
        }
        if (item.kind === 'turn-ended') ac.abort();
      }
    })();
    await reading;
    expect(summary(items)).toEqual(['input-queued', 'turn-started', 'chunk "answering a"', 'input-queued', 'inputs-taken', 'chunk "also b"', 'turn-ended suspended']);
    expect(items[3]).toMatchObject({ kind: 'input-queued', input: 'b', steering: true });
    expect(offsetsIncrease(items)).toBe(true);
  });

  it('a waiting reader is woken after the turn has moved on: a step\'s next record is submitted before the reader takes the step before it', async () => {
    const go = gate();
    const order: string[] = [];
    const inner = new MemoryHistoryStore();
    // Writes complete in a later turn of the event loop, as a disk's sync does.
    const store = new Proxy(inner, {
      get(target, prop, receiver) {
        if (prop === 'append') {
          return async (id: string, events: { type: string; name?: string }[], opts: unknown) => {
            for (const e of events) order.push(`append ${e.type}${e.name ? ` ${e.name}` : ''}`);
            await new Promise((resolve) => setImmediate(resolve));
            return target.append(id, events as never, opts as never);
          };
        }
        const v = Reflect.get(target, prop, receiver) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    const wf = defineWorkflow({
      name: 'step-emit-step',
      turn: async (ctx) => {
        await go.promise;
        await ctx.step('one', () => 1);
        ctx.emit('a');
        return ctx.step('two', () => 2);
      },
    });
    const engine = await open({ store, workflows: [wf] });
    const h = await engine.start(wf, null, { taskId: 'wake-order' });
    const reading = readUntil(h.stream(), (i) => {
      order.push(`item ${i.kind}${'name' in i ? ` ${i.name}` : ''}`);
      // The reader is now waiting for live items: let the turn go on.
      if (i.kind === 'turn-started') go.open();
      return i.kind === 'task-completed';
    });
    await h.result();
    await reading;
    // Woken in the microtasks that resumed the turn, the reader took step one's items first and
    // its work sat on the turn's path from one record to the next.
    expect(order.indexOf('append StepCompleted two')).toBeGreaterThan(-1);
    expect(order.indexOf('append StepCompleted two')).toBeLessThan(order.indexOf('item step-completed one'));
  });

  it('ends when the signal aborts', async () => {
    const multi = defineWorkflow({ name: 'multi', kind: 'multi-turn', turn: async (ctx, x: string) => ctx.suspend('waiting', x) });
    const engine = await open({ workflows: [multi] });
    const h = await engine.start(multi, 'hi', { taskId: 's5' });
    await h.nextTurn();
    const ac = new AbortController();
    const items: StreamItem[] = [];
    for await (const item of h.stream({ signal: ac.signal })) {
      items.push(item);
      if (item.kind === 'turn-ended') ac.abort();
    }
    expect(summary(items)).toEqual(['input-queued', 'turn-started', 'turn-ended suspended']);
  });

  it('ends (without throwing) when the engine shuts down', async () => {
    const multi = defineWorkflow({ name: 'multi2', kind: 'multi-turn', turn: async (ctx, x: string) => ctx.suspend('waiting', x) });
    const engine = await open({ workflows: [multi] });
    const h = await engine.start(multi, 'hi', { taskId: 's9' });
    await h.nextTurn();
    const items: StreamItem[] = [];
    const reading = (async () => {
      for await (const item of h.stream()) items.push(item);
    })();
    while (!items.some((i) => i.kind === 'turn-ended')) await new Promise((r) => setTimeout(r, 5));
    await engine.shutdown();
    await reading;
    expect(summary(items)).toEqual(['input-queued', 'turn-started', 'turn-ended suspended']);
  });

  it('refuses an offset that is not one, or one past the history, with TURNLOG_STREAM_OFFSET', async () => {
    const engine = await open({ workflows: [talk] });
    const h = await engine.start(talk, ['a'], { taskId: 's6' });
    await h.result();
    for (const from of ['x', '1.0', '-1', '3.', '999']) {
      try {
        await readUntil(h.stream({ from }), () => true);
        expect.unreachable(from);
      } catch (err) {
        expect(isTurnlogError(err, 'TURNLOG_STREAM_OFFSET'), from).toBe(true);
        expect((err as Error).message).toContain('s6');
      }
    }
    // The message says what is wrong with this offset (it once named "last event 0" for a task of 7 events).
    await expect(readUntil(h.stream({ from: '999' }), () => true)).rejects.toThrow(/stream offset 999 is past the task's last event \(it has no event 999\)/);
    await expect(readUntil(engine.stream('nope'), () => true)).rejects.toMatchObject({ code: 'TURNLOG_TASK_NOT_FOUND' });
  });

  it('ctx.emit refuses a value that is not JSON, without failing what is recorded', async () => {
    const bad = defineWorkflow({
      name: 'bad-emit',
      turn: async (ctx) => {
        let code = '';
        try {
          (ctx.emit as (v: unknown) => void)(() => 1);
        } catch (err) {
          code = (err as { code: string }).code;
        }
        return code;
      },
    });
    const engine = await open({ workflows: [bad] });
    expect(await (await engine.start(bad, null, { taskId: 's7' })).result()).toBe('TURNLOG_PAYLOAD_ENCODING');
  });
});

describe('task.stream() on a process worker', () => {
  it('streams chunks from the worker around its recorded step', async () => {
    const engine = await open({ workflows: Object.values(fixtures), executors: { process: processExecutor() } });
    const h = await engine.start(fixtures.streamTokens, 3, { taskId: 'p1' });
    const items = await readUntil(h.stream(), () => false);
    expect(summary(items)).toEqual([
      'input-queued',
      'turn-started',
      'chunk {"token":"a0"}',
      'chunk {"token":"a1"}',
      'chunk {"token":"a2"}',
      'step-started refund',
      'step-completed refund',
      'chunk {"token":"b0"}',
      'chunk {"token":"b1"}',
      'chunk {"token":"b2"}',
      'turn-ended completed',
      'task-completed',
    ]);
    expect(offsetsIncrease(items)).toBe(true);
  });

  it('a SIGKILLed worker: an explicit attempt-restarted item, and the recorded step is not streamed again as new work', async () => {
    const engine = await open({ workflows: Object.values(fixtures), executors: { process: processExecutor() } });
    const h = await engine.start(fixtures.streamCrash, 7, { taskId: 'p2' });
    const items = await readUntil(h.stream(), () => false);
    expect(summary(items)).toEqual([
      'input-queued',
      'turn-started',
      'chunk {"token":"before-1"}',
      'step-started refund',
      'step-completed refund',
      'chunk {"token":"after-1"}',
      'attempt-restarted 2',
      'chunk {"token":"before-2"}',
      'chunk {"token":"after-2"}',
      'turn-ended completed',
      'task-completed',
    ]);
    const restarted = items.find((i) => i.kind === 'attempt-restarted') as Extract<StreamItem, { kind: 'attempt-restarted' }>;
    expect(restarted.reason).toMatch(/crashed/);
    // The refund ran once: the second attempt got the recorded result back.
    expect(items.find((i) => i.kind === 'turn-ended')).toMatchObject({ output: { refunded: 7, attempt: 1 } });
  });

  it('a worker that floods chunks with nobody reading still finishes its turn', async () => {
    const engine = await open({ workflows: Object.values(fixtures), executors: { process: processExecutor() }, streamBufferItems: 100 });
    const h = await engine.start(fixtures.streamFlood, 20_000, { taskId: 'p3' });
    expect(await h.result()).toBe(20_000);
    const items = await readUntil(h.stream(), () => false);
    const chunks = items.filter((i) => i.kind === 'chunk');
    expect(chunks.length).toBeLessThanOrEqual(100);
    expect(chunks.at(-1)).toMatchObject({ data: 19_999 });
    expect(items.some((i) => i.kind === 'gap')).toBe(true);
  });
});
