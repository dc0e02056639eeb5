/**
 * Long conversation benchmark (issue 15 item 1): a chat that keeps its messages in state, 2 KB
 * per message, one model step per turn, run by the engine on LevelDB. At 10, 100 and 500 turns:
 * history bytes per turn and their ratio to the bytes of the inputs, outputs and step results,
 * in format 2 (state deltas, as written) and format 1 (the same history with full states, as the
 * previous build wrote it); recovery time (read snapshot + tail, decode, fold) for both.
 * Target: format 2 within 1.3× of the payload bytes; recovery flat in the history's length.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { encodeEvent } from '../src/history/codec.js';
import type { HistoryEvent, Payload } from '../src/history/events.js';
import { decodeState, encodeState } from '../src/history/state-codec.js';
import { fold, withFullStates } from '../src/replay/fold.js';
import { silentLogger } from '../src/logger.js';
import { Engine } from '../src/runtime/engine.js';
import { LevelHistoryStore } from '../src/store/level-store.js';
import type { HistoryStore } from '../src/store/history-store.js';
import { chatInState, chatText } from '../test/fixtures/workflows/chat-in-state.js';

const now = () => Number(process.hrtime.bigint()) / 1e6;
const SNAPSHOT_EVERY = 100;
const CHECKPOINTS = [10, 100, 500];
const text = chatText;
const chat = chatInState;

const size = (p: Payload | undefined) => p?.data.length ?? 0;

/** Bytes of the inputs, step results and outputs: what the conversation itself is. */
function payloadBytes(events: readonly HistoryEvent[]): number {
  let n = 0;
  for (const e of events) {
    if (e.type === 'InputQueued') n += size(e.input);
    else if (e.type === 'StepCompleted') n += size(e.result);
    else if (e.type === 'TurnCompleted') n += size(e.output);
  }
  return n;
}

/** What a recovering engine does: the latest snapshot, then decode and fold the tail. */
async function recoveryMs(store: HistoryStore, taskId: string): Promise<number> {
  let best = Infinity;
  for (let r = 0; r < 5; r++) {
    const t0 = now();
    const snap = await store.getSnapshot(taskId);
    const from = snap ? decodeState(snap.data) : undefined;
    const tail = await store.readEvents(taskId, { fromEventId: (snap?.eventId ?? 0) + 1 });
    fold(taskId, tail, from);
    best = Math.min(best, now() - t0);
  }
  return best;
}

/** The format-1 store: the same history with full states, snapshots at the same cadence. */
async function format1Store(dir: string, taskId: string, events: HistoryEvent[]): Promise<LevelHistoryStore> {
  const store = new LevelHistoryStore(dir);
  await store.open();
  const full = withFullStates(taskId, events);
  for (let i = 0; i < full.length; i += 50) {
    await store.append(taskId, full.slice(i, i + 50), { expectedLastEventId: i, generation: full[full.length - 1]!.generation });
  }
  const snapAt = Math.floor(full.length / SNAPSHOT_EVERY) * SNAPSHOT_EVERY;
  if (snapAt > 0) await store.putSnapshot(taskId, { eventId: snapAt, data: encodeState(fold(taskId, full.slice(0, snapAt))) });
  return store;
}

export async function run(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'turnlog-bench-conversation-'));
  try {
    const store = new LevelHistoryStore(join(dir, 'v2'));
    const engine = await Engine.open({ store, workflows: [chat], logger: silentLogger, scanIntervalMs: 0, snapshotEvery: SNAPSHOT_EVERY });
    const taskId = 'chat';
    await (await engine.start(chat, text(1, 'user'), { taskId })).nextTurn();
    console.log(`chat in state, 2 KB messages, one model step per turn, LevelDB, snapshot every ${SNAPSHOT_EVERY} events`);
    console.log('turns | payload B/turn | format 1 B/turn (ratio) | format 2 B/turn (ratio) | recovery format 1 | recovery format 2');
    let turn = 1;
    for (const target of CHECKPOINTS) {
      const t0 = now();
      for (; turn < target; ) {
        turn++;
        await engine.turnResult(taskId, await engine.sendInput(taskId, text(turn, 'user')));
      }
      const turnMs = (now() - t0) / Math.max(1, target - 1);
      const events = await store.readEvents(taskId);
      const payload = payloadBytes(events);
      const v2 = events.reduce((n, e) => n + encodeEvent(e).length, 0);
      const v1 = withFullStates(taskId, events).reduce((n, e) => n + encodeEvent(e).length, 0);
      const rec2 = await recoveryMs(store, taskId);
      const old = await format1Store(join(dir, `v1-${target}`), taskId, events);
      const rec1 = await recoveryMs(old, taskId);
      await old.close();
      const per = (b: number) => Math.round(b / target).toLocaleString('en-US');
      console.log(
        `${String(target).padStart(5)} | ${per(payload).padStart(14)} | ${per(v1).padStart(12)} (${(v1 / payload).toFixed(2)}×) | ${per(v2).padStart(12)} (${(v2 / payload).toFixed(2)}×) | ${rec1.toFixed(2).padStart(9)} ms | ${rec2.toFixed(2).padStart(9)} ms   (${turnMs.toFixed(2)} ms/turn)`,
      );
    }
    await engine.shutdown({ graceMs: 0 });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

// Run directly: node dist/bench/conversation.bench.js
if (import.meta.url === `file://${process.argv[1]}`) await run();
