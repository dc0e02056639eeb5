/**
 * Store benchmark: every figure is a ratio to raw `level` writes of the same bytes at the
 * same durability, measured in the same run (machines differ; ratios travel).
 * Targets (issue 2): durable append ≤ 1.2× a raw sync put; group commit across 100 tasks
 * ≥ 10× the one-append-per-sync rate.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Level } from 'level';
import { decodeEvent, encodeEvent, encodeEventGeneric } from '../src/history/codec.js';
import type { HistoryEvent } from '../src/history/events.js';
import { eventKey } from '../src/store/keys.js';
import { LevelHistoryStore } from '../src/store/level-store.js';
import { POLICY } from '../src/testing/store-events.js';

const enc = new TextEncoder();

function created(): HistoryEvent {
  return { type: 'TaskCreated', eventId: 1, time: 1, generation: 1, workflow: 'bench', kind: 'multi-turn', policy: POLICY, formatVersion: 1 };
}
/** A typical small event: a step result of ~40 bytes of JSON. */
function step(eventId: number): HistoryEvent {
  return {
    type: 'StepCompleted',
    eventId,
    time: 1_700_000_000_000 + eventId,
    generation: 1,
    turn: 1,
    attempt: 1,
    seq: eventId,
    name: 'call-model',
    result: { metadata: { encoding: enc.encode('json/plain') }, data: enc.encode('{"reply":"ok","tokens":123}') },
    durationMs: 12,
  };
}

const now = () => Number(process.hrtime.bigint()) / 1e6;
const fmt = (x: number, digits = 3) => x.toFixed(digits);

interface Rig {
  raw: Level<Buffer, Buffer>;
  store: LevelHistoryStore;
  dispose(): Promise<void>;
}

async function rig(): Promise<Rig> {
  const dir = await mkdtemp(join(tmpdir(), 'turnlog-bench-'));
  const raw = new Level<Buffer, Buffer>(join(dir, 'raw'), { keyEncoding: 'buffer', valueEncoding: 'buffer' });
  await raw.open();
  const store = new LevelHistoryStore(join(dir, 'store'));
  await store.open();
  return {
    raw,
    store,
    dispose: async () => {
      await raw.close();
      await store.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Sequential one-event appends vs raw puts of the same encoded bytes. Alternating one raw put
 * and one append spreads any background load evenly over both.
 */
async function sequential(r: Rig, sync: boolean, n: number): Promise<void> {
  const task = `seq-${sync}`;
  await r.store.append(task, [created()], { expectedLastEventId: 0, generation: 1, sync });
  let rawMs = 0;
  let storeMs = 0;
  for (let i = 0; i < n; i++) {
    const e = step(i + 2);
    const bytes = Buffer.from(encodeEvent(e));
    const key = eventKey(task, i + 2);
    let t = now();
    await r.raw.put(key, bytes, { sync });
    rawMs += now() - t;
    t = now();
    await r.store.append(task, [e], { expectedLastEventId: i + 1, generation: 1, sync });
    storeMs += now() - t;
  }
  console.log(
    `store  append 1 event, sync ${sync ? 'on ' : 'off'}  ${fmt((storeMs / n) * 1000, 1)} µs  raw put ${fmt((rawMs / n) * 1000, 1)} µs  ratio ${fmt(storeMs / rawMs, 2)}x raw level${sync ? '  (target ≤ 1.20x)' : ''}`,
  );
}

/** 100 tasks appending concurrently (group commit) vs one sync append at a time. */
async function groupCommit(r: Rig, tasks: number, perTask: number): Promise<void> {
  const ids = Array.from({ length: tasks }, (_, i) => `gc-${i}`);
  for (const id of ids) await r.store.append(id, [created()], { expectedLastEventId: 0, generation: 1 });

  // Baseline: one append per sync (raw sync puts of the same bytes, one at a time), measured
  // before and after the group run and averaged, so background load hits both alike.
  const bytes = Buffer.from(encodeEvent(step(2)));
  let putId = 0;
  const perSync = async (n: number): Promise<number> => {
    const start = now();
    for (let i = 0; i < n; i++) await r.raw.put(eventKey('one-per-sync', ++putId), bytes, { sync: true });
    return n / ((now() - start) / 1000);
  };
  const perSyncBefore = await perSync(200);
  let t: number;

  // Raw level with the same concurrency, for reference (LevelDB merges some concurrent writers itself).
  t = now();
  await Promise.all(
    ids.map(async (id) => {
      for (let k = 0; k < perTask; k++) await r.raw.put(eventKey(`raw-${id}`, k + 1), bytes, { sync: true });
    }),
  );
  const rawConcurrentRate = (tasks * perTask) / ((now() - t) / 1000);

  const before = r.store.commitStats;
  t = now();
  await Promise.all(
    ids.map(async (id) => {
      for (let k = 0; k < perTask; k++) {
        await r.store.append(id, [step(k + 2)], { expectedLastEventId: k + 1, generation: 1 });
      }
    }),
  );
  const rate = (tasks * perTask) / ((now() - t) / 1000);
  const after = r.store.commitStats;
  const perSyncRate = (perSyncBefore + (await perSync(200))) / 2;
  const perBatch = (after.writes - before.writes) / (after.batches - before.batches);
  console.log(
    `store  group commit, ${tasks} tasks × ${perTask} durable appends  ${Math.round(rate)} appends/s  one-per-sync ${Math.round(perSyncRate)}/s  ratio ${fmt(rate / perSyncRate, 1)}x (target ≥ 10x)  avg ${fmt(perBatch, 1)} appends/batch`,
  );
  console.log(
    `store  raw level, same ${tasks} concurrent sync writers  ${Math.round(rawConcurrentRate)} puts/s  turnlog/raw ${fmt(rate / rawConcurrentRate, 2)}x`,
  );
}

/**
 * Encode cost per event over one turn's events in rotation (InputQueued, LeaseClaimed,
 * TurnStarted, StepCompleted, TurnCompleted): the hand-written fast path against the generated
 * protobufjs encoder it must match byte for byte.
 */
function encode(): void {
  const t0 = 1_700_000_000_000;
  const input = { metadata: { encoding: enc.encode('json/plain') }, data: enc.encode('{"q":"hello"}') };
  const turn: HistoryEvent[] = [
    { type: 'InputQueued', eventId: 2, time: t0, generation: 1, inputId: 'in_V1StGXR8_Z5jdHi6B', input, steering: false },
    { type: 'LeaseClaimed', eventId: 3, time: t0, generation: 1, owner: 'host-1', instance: 'inst_abcdef', previousGeneration: 0, reason: 'turn-start', expiresAt: t0 + 30_000 },
    { type: 'TurnStarted', eventId: 4, time: t0, generation: 1, turn: 1, attempt: 1, inputIds: ['in_V1StGXR8_Z5jdHi6B'], entryMode: 'fresh', steered: false, owner: 'host-1', instance: 'inst_abcdef', executor: 'inline', pid: 4242, turnStartedAt: t0, deadline: t0 + 60_000 },
    step(5),
    { type: 'TurnCompleted', eventId: 6, time: t0 + 20, generation: 1, turn: 1, output: input },
  ];
  const n = 40_000;
  const per = (f: (x: HistoryEvent) => Uint8Array): number => {
    for (let i = 0; i < 5_000; i++) for (const e of turn) f(e);
    let best = Infinity;
    for (let r = 0; r < 3; r++) {
      const t = now();
      for (let i = 0; i < n; i++) for (const e of turn) f(e);
      best = Math.min(best, ((now() - t) / (n * turn.length)) * 1000);
    }
    return best;
  };
  const generic = per(encodeEventGeneric);
  const fast = per(encodeEvent);
  console.log(`store  encode one turn's events  ${fmt(fast, 2)} µs/event  generated protobufjs encoder ${fmt(generic, 2)} µs/event  ratio ${fmt(fast / generic, 2)}x`);
}

/** Decode cost per event, and readEvents vs a raw iterator over the same bytes. */
async function decode(r: Rig): Promise<void> {
  const events = Array.from({ length: 10_000 }, (_, i) => step(i + 1));
  const bytes = events.map((e) => encodeEvent(e));
  for (let i = 0; i < 2_000; i++) decodeEvent(bytes[i]!, 't');
  let t = now();
  for (const b of bytes) decodeEvent(b, 't');
  const decodeUs = ((now() - t) / bytes.length) * 1000;

  const task = 'read';
  await r.store.append(task, [created()], { expectedLastEventId: 0, generation: 1, sync: false });
  for (let i = 0; i < events.length; i += 500) {
    const chunk = events.slice(i, i + 500).map((e) => ({ ...e, eventId: e.eventId + 1 }) as HistoryEvent);
    await r.store.append(task, chunk, { expectedLastEventId: i + 1, generation: 1, sync: false });
    const ops = chunk.map((e) => ({ type: 'put' as const, key: eventKey('raw-read', e.eventId), value: Buffer.from(encodeEvent(e)) }));
    await r.raw.batch(ops, { sync: false });
  }
  t = now();
  const rawEntries = await r.raw.iterator({ gte: eventKey('raw-read', 1), lte: eventKey('raw-read', 0xffffffff) }).all();
  const rawMs = now() - t;
  t = now();
  const read = await r.store.readEvents(task);
  const readMs = now() - t;
  console.log(
    `store  decode  ${fmt(decodeUs, 2)} µs/event  readEvents ${fmt((readMs / read.length) * 1000, 2)} µs/event  raw iterator ${fmt((rawMs / rawEntries.length) * 1000, 2)} µs/event  ratio ${fmt(readMs / rawMs, 2)}x raw level`,
  );
}

export async function run(): Promise<void> {
  const r = await rig();
  try {
    await sequential(r, true, 400);
    await sequential(r, false, 5_000);
    await groupCommit(r, 100, 10);
    encode();
    await decode(r);
  } finally {
    await r.dispose();
  }
}
