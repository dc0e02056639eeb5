/**
 * Review of src/runtime/appender.ts #materialize stamping drafts in place (eventId, generation,
 * time written on the draft objects). Checked: the only double materialization is #preview then
 * #append of the same pending drafts (same ids; the append's generation/time win, as before);
 * no draft is re-stamped after it was handed to the store; fold keeps only payloads/failures of
 * events, never the event objects; a payload codec copies. Kept as regression guards:
 * - no event object handed to store.append changes afterwards (a store may serialize later);
 * - an input queued by an engine that then claims a higher generation is written under it.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { HistoryEvent, Payload } from '../../src/history/events.js';
import type { PayloadCodec } from '../../src/history/payload.js';
import { fold } from '../../src/replay/fold.js';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import type { HistoryStore } from '../../src/store/history-store.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A store that remembers every event object it was handed and what it looked like then. */
function recordingStore(inner: HistoryStore): { store: HistoryStore; handed: { obj: HistoryEvent; then: HistoryEvent }[] } {
  const handed: { obj: HistoryEvent; then: HistoryEvent }[] = [];
  const store = new Proxy(inner, {
    get(target, prop) {
      const v = Reflect.get(target, prop, target) as unknown;
      if (prop === 'append') {
        return (taskId: string, events: readonly HistoryEvent[], options: unknown) => {
          for (const e of events) handed.push({ obj: e, then: structuredClone(e) });
          return (target.append as (...a: unknown[]) => unknown).call(target, taskId, events, options);
        };
      }
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  return { store, handed };
}

/** Reverses the data bytes and marks it (a stand-in for compression/encryption). */
const reverseCodec: PayloadCodec = {
  encode: (p: Payload) => ({ metadata: { ...p.metadata, reversed: new Uint8Array([1]) }, data: p.data.slice().reverse() }),
  decode: (p: Payload) => {
    const { reversed: _r, ...rest } = p.metadata;
    return { metadata: rest, data: p.data.slice().reverse() };
  },
};

function gates() {
  const waiting: (() => void)[] = [];
  let arrived: (() => void) | undefined;
  return {
    wait: () =>
      new Promise<void>((r) => {
        waiting.push(r);
        arrived?.();
      }),
    arrived: () => new Promise<void>((r) => (waiting.length ? r() : (arrived = r))),
    release: () => waiting.shift()?.(),
  };
}

describe('engine: drafts stamped in place', () => {
  for (const withCodec of [false, true]) {
    it(`no event handed to the store changes afterwards; the history folds to the engine's view (${withCodec ? 'with' : 'without'} a payload codec)`, async () => {
      const g = gates();
      const chat = defineWorkflow({
        name: 'chat',
        kind: 'multi-turn',
        turn: async (ctx, msg: string) => {
          const up = await ctx.step('upper', () => msg.toUpperCase());
          await g.wait();
          const more = await ctx.takeInputs<string>();
          await ctx.checkpoint({ up, more });
          return `${up}+${more.join(',')}`;
        },
      });
      const once = defineWorkflow({ name: 'once', turn: async (ctx, n: number) => ctx.step('double', () => n * 2) });
      const { store, handed } = recordingStore(new MemoryHistoryStore());
      const engine = await Engine.open({ store, workflows: [chat, once], logger: silentLogger, scanIntervalMs: 0, ...(withCodec ? { payloadCodecs: [reverseCodec] } : {}) });
      cleanups.push(() => engine.shutdown({ graceMs: 0 }));

      const h = await engine.start(chat, 'hi', { taskId: 'c1' });
      const firstId = h.inputId!;
      await g.arrived();
      await h.send('steer-1'); // steering while the turn runs
      const q = await engine.sendInput('c1', 'to-withdraw');
      await engine.withdraw('c1', q);
      g.release();
      const first = await engine.turnResult('c1', firstId);
      expect(first.output).toBe('HI+steer-1');
      await h.send('second');
      await g.arrived();
      g.release();
      expect((await h.nextTurn()).output).toBe('SECOND+');
      expect(await (await engine.start(once, 21, { taskId: 'o1' })).result()).toBe(42);

      for (const { obj, then } of handed) expect(obj).toStrictEqual(then);
      for (const id of ['c1', 'o1']) {
        const events = await engine.history(id);
        expect(events.map((e) => e.eventId)).toEqual(events.map((_, i) => i + 1));
        const s = fold(id, events);
        const d = await engine.describe(id);
        expect([d.lastEventId, d.status, d.turn]).toEqual([s.lastEventId, s.status, s.turn]);
      }
    });
  }

  it('an input that starts a turn under a newly claimed generation is written under that generation (preview, then append re-stamps)', async () => {
    const dir = await makeTmpDir('turnlog-review2-gen-');
    cleanups.push(dir.remove);
    const chat = defineWorkflow({ name: 'chat2', kind: 'multi-turn', turn: async (ctx, msg: string) => ctx.step('s', () => msg) });
    const a = await Engine.open({ store: dir.path, workflows: [chat], logger: silentLogger, scanIntervalMs: 0, instance: 'inst-a' });
    const h = await a.start(chat, 'one', { taskId: 'g1' });
    expect((await h.nextTurn()).output).toBe('one');
    await a.shutdown({ graceMs: 0 });

    const b = await Engine.open({ store: dir.path, workflows: [chat], logger: silentLogger, scanIntervalMs: 0, instance: 'inst-b' });
    const hb = b.task<string, string>('g1');
    await hb.send('two');
    expect((await hb.nextTurn()).output).toBe('two');
    await b.shutdown({ graceMs: 0 });

    const store = new LevelHistoryStore(dir.path);
    await store.open();
    const events = await store.readEvents('g1');
    await store.close();
    const claims = events.filter((e) => e.type === 'LeaseClaimed');
    expect(claims.length).toBe(2);
    const second = claims[1]!;
    expect(second.generation).toBeGreaterThan(claims[0]!.generation);
    const input = events.find((e) => e.type === 'InputQueued' && e.inputId === hb.inputId)!;
    // Appended in the same batch as the claim: same generation, same time, the id just before it.
    expect([input.generation, input.time, input.eventId + 1]).toEqual([second.generation, second.time, second.eventId]);
    expect(() => fold('g1', events)).not.toThrow();
  });
});
