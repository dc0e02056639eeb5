// Large payloads by reference (docs/history.md#large-payloads-by-reference): stored once per
// task by hash beside the history, resolved on read, carried by export/import, deleted with the task.
import { Level } from 'level';
import { afterEach, describe, expect, it } from 'vitest';
import { isTurnlogError } from '../../src/errors.js';
import { encodeHistoryFile, parseHistoryFile } from '../../src/history/history-file.js';
import type { HistoryEvent } from '../../src/history/events.js';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { Prefix, eventRange } from '../../src/store/keys.js';
import { PAYLOAD_REF_KEY, holdsRef, referencedHashes } from '../../src/store/payload-refs.js';
import { mapEventPayloads } from '../../src/history/payload-map.js';
import { ALL_EVENT_TYPES } from '../../src/history/events.js';
import fc from 'fast-check';
import { eventArbitraries } from '../helpers/event-arbitraries.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { PG_URL, describePg, dropSchema, uniqueSchema, withClient } from '../helpers/postgres.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { compaction } from '../../src/replay/compact.js';
import { fold } from '../../src/replay/fold.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

const big = 'tool output '.repeat(10_000); // ~120 KB
function history(): HistoryEvent[] {
  return historyBuilder('t', { tick: 5 })
    .created({ kind: 'multi-turn' })
    .input(big)
    .turnStarted()
    .step('tool', big)
    .step('small', 'ok')
    .completed('done', { state: { last: big } })
    .build();
}

async function level(): Promise<{ dir: string; store: LevelHistoryStore }> {
  const d = await makeTmpDir('turnlog-refs-');
  const store = new LevelHistoryStore(d.path, { payloadRefBytes: 64 * 1024, sync: false });
  await store.open();
  cleanups.push(async () => {
    await store.close().catch(() => undefined);
    await d.remove();
  });
  return { dir: d.path, store };
}

/** Raw records of a closed Level store: event value sizes and payload keys. */
async function raw(dir: string): Promise<{ eventBytes: number; payloadKeys: number }> {
  const db = new Level<Buffer, Buffer>(dir, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
  await db.open();
  try {
    let eventBytes = 0;
    for await (const [, v] of db.iterator(eventRange('t'))) eventBytes += v.length;
    const payloadKeys = (await db.keys({ gte: Buffer.from([Prefix.payload]), lt: Buffer.from([Prefix.payload + 1]) }).all()).length;
    return { eventBytes, payloadKeys };
  } finally {
    await db.close();
  }
}

describe('large payloads by reference', () => {
  it('LevelDB: the same large payload is stored once, events keep references, reads resolve them', async () => {
    const { dir, store } = await level();
    const events = history();
    await store.append('t', events, { expectedLastEventId: 0, generation: 1 });
    expect(await store.readEvents('t')).toEqual(events);
    await store.close();
    const r = await raw(dir);
    // Three payloads carry `big` (input, step result) or contain it (state): two distinct blobs.
    expect(r.payloadKeys).toBe(2);
    expect(r.eventBytes).toBeLessThan(2_000);
  });

  it('LevelDB: deleteTask deletes the task’s payloads; export/import carries them inline', async () => {
    const { dir, store } = await level();
    const events = history();
    await store.append('t', events, { expectedLastEventId: 0, generation: 1 });
    const file = await encodeHistoryFile({ taskId: 't', events: await store.readEvents('t') }, 'binary');
    expect(file.length).toBeGreaterThan(3 * big.length);
    await store.deleteTask('t');
    expect(await store.readEvents('t')).toEqual([]);
    const back = parseHistoryFile(file, 'f').tasks[0]!.events;
    await store.append('t', back, { expectedLastEventId: 0, generation: 1 });
    expect(await store.readEvents('t')).toEqual(events);
    await store.deleteTask('t');
    await store.close();
    expect((await raw(dir)).payloadKeys).toBe(0);
  });

  it('memory store: same contract; a bad threshold is TURNLOG_INVALID_ARGUMENT', async () => {
    const store = new MemoryHistoryStore({ payloadRefBytes: 64 * 1024 });
    await store.open();
    const events = history();
    await store.append('t', events, { expectedLastEventId: 0, generation: 1 });
    expect(store.payloadRefCount('t')).toBe(2);
    expect(await store.readEvents('t')).toEqual(events);
    await store.deleteTask('t');
    expect(store.payloadRefCount('t')).toBe(0);
    let code: string | undefined;
    try {
      new MemoryHistoryStore({ payloadRefBytes: 0 });
    } catch (err) {
      code = isTurnlogError(err) ? err.code : undefined;
    }
    expect(code).toBe('TURNLOG_INVALID_ARGUMENT');
  });

  it('the engine sees whole payloads: a turn with a large tool result, then a restart', async () => {
    const { store } = await level();
    const wf = defineWorkflow({
      name: 'tools',
      kind: 'multi-turn',
      initialState: () => ({ results: [] as string[] }),
      turn: async (ctx, q: string) => {
        const r = await ctx.step('tool', () => `${q}: ${big}`);
        ctx.state.results.push(r);
        return r.length;
      },
    });
    const engine = await Engine.open({ store, workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    const t = await engine.start(wf, 'q1', { taskId: 't' });
    expect((await t.nextTurn()).output).toBe(4 + big.length);
    await engine.shutdown({ graceMs: 0 });
    const stored = await store.readEvents('t');
    expect(stored.some((e) => e.type === 'StepCompleted' && Object.hasOwn(e.result!.metadata, PAYLOAD_REF_KEY))).toBe(false);
    const again = await Engine.open({ store, workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    cleanups.unshift(() => again.shutdown({ graceMs: 0 }));
    await again.turnResult('t', await again.sendInput('t', 'q2'));
    expect(((await again.describe('t')).state as { results: string[] }).results.map((r) => r.length)).toEqual([4 + big.length, 4 + big.length]);
  });
});

describePg('large payloads by reference on PostgreSQL', () => {
  it('stores once, resolves on read, deletes with the task; compactHistory rewrites event 2', async () => {
    const schema = uniqueSchema();
    const store = createPostgresStore({ connectionString: PG_URL, schema, payloadRefBytes: 64 * 1024 });
    await store.open();
    cleanups.push(async () => {
      await store.close();
      await dropSchema(schema);
    });
    const events = history();
    await store.append('t', events, { expectedLastEventId: 0, generation: 1 });
    expect(await store.readEvents('t')).toEqual(events);
    expect((await store.readTaskStart('t', 100)).events).toEqual(events);
    const count = () => withClient(async (c) => Number((await c.query(`SELECT count(*) AS n FROM "${schema}".payloads`)).rows[0].n));
    expect(await count()).toBe(2);
    await store.deleteTask('t');
    expect(await count()).toBe(0);

    const b = historyBuilder('k', { tick: 5 }).created({ kind: 'multi-turn' });
    for (let i = 1; i <= 3; i++) b.input(`m${i}`).turnStarted().step('model', `r${i}`).completed(`r${i}`, { state: { n: i } });
    const three = b.build();
    await store.append('k', three, { expectedLastEventId: 0, generation: 1 });
    const c = compaction('k', three, 1)!;
    await store.compactHistory!('k', c);
    const left = await store.readEvents('k');
    expect(left.map((e) => e.eventId)).toEqual([1, 2, ...three.filter((e) => e.eventId > c.throughEventId).map((e) => e.eventId)]);
    expect(Buffer.from(fold('k', left).state!.data)).toEqual(Buffer.from(fold('k', three).state!.data));
  });
});

describe('holdsRef (the read path\'s check before it copies an event to look for references)', () => {
  const { arbitraries } = eventArbitraries();
  const ref = new TextEncoder().encode('sha256:00');
  for (const type of ALL_EVENT_TYPES) {
    it(`${type}: true with a reference in any payload mapEventPayloads visits, as referencedHashes says otherwise`, () => {
      fc.assert(
        fc.property(arbitraries[type] as fc.Arbitrary<HistoryEvent>, (e) => {
          expect(holdsRef(e)).toBe(referencedHashes(e).length > 0);
          let n = 0;
          mapEventPayloads(e, (p) => (n++, p));
          for (let k = 0; k < n; k++) {
            let i = 0;
            const withRef = mapEventPayloads(e, (p) => (i++ === k ? { metadata: { ...p.metadata, [PAYLOAD_REF_KEY]: ref }, data: new Uint8Array(0) } : p));
            expect(referencedHashes(withRef)).toContain('sha256:00');
            expect(holdsRef(withRef)).toBe(true);
          }
        }),
        { seed: 1337, numRuns: 100 },
      );
    });
  }
});
