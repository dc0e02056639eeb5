// State deltas (history format 2) through the engine: a chat that keeps its messages in state
// writes each turn's change, reloads to the same state from snapshot + tail, and format-1 tasks
// and tasks under payload codecs keep full states (docs/history.md#state-deltas).
import { afterEach, describe, expect, it } from 'vitest';
import { encodeEvent } from '../../src/history/codec.js';
import type { HistoryEvent, Payload } from '../../src/history/events.js';
import type { PayloadCodec } from '../../src/history/payload.js';
import { Engine, type EngineOptions } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { chatInState, chatText, type ChatMessage } from '../fixtures/workflows/chat-in-state.js';

const engines: Engine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
});

async function open(store: MemoryHistoryStore, options: Partial<EngineOptions> = {}): Promise<Engine> {
  const engine = await Engine.open({ store, workflows: [chat], logger: silentLogger, scanIntervalMs: 0, ...options });
  engines.push(engine);
  return engine;
}

type Message = ChatMessage;
const text = chatText;
const chat = chatInState;

const terminals = (h: HistoryEvent[]) => h.filter((e) => e.type === 'TurnCompleted' || e.type === 'TurnSuspended') as Extract<HistoryEvent, { type: 'TurnCompleted' }>[];
const bytes = (p: Payload | undefined) => p?.data.length ?? 0;

async function converse(engine: Engine, taskId: string, from: number, to: number): Promise<void> {
  if (from === 1) {
    const task = await engine.start(chat, text(1, 'user'), { taskId });
    await task.nextTurn();
  }
  for (let turn = Math.max(from, 2); turn <= to; turn++) {
    const inputId = await engine.sendInput(taskId, text(turn, 'user'));
    await engine.turnResult(taskId, inputId);
  }
}

describe('state deltas', () => {
  it('a chat that keeps its messages in state stores each turn as a delta, within 1.3× of its payloads', async () => {
    const store = new MemoryHistoryStore();
    const engine = await open(store, { snapshotEvery: 25 });
    await converse(engine, 'c', 1, 30);
    const h = await store.readEvents('c');
    const ends = terminals(h);
    expect(ends).toHaveLength(30);
    expect(ends[0]!.state).toBeDefined();
    for (const e of ends.slice(1)) {
      expect(e.state).toBeUndefined();
      expect(e.stateDelta!.pieces.some((p) => 'source' in p)).toBe(true);
    }
    let payloads = 0;
    for (const e of h) {
      if (e.type === 'InputQueued') payloads += bytes(e.input);
      if (e.type === 'StepCompleted') payloads += bytes(e.result);
      if (e.type === 'TurnCompleted') payloads += bytes(e.output);
    }
    const stored = h.reduce((n, e) => n + encodeEvent(e).length, 0);
    // The first turn's full state is a constant; the ratio falls toward ~1.05 as the chat grows.
    expect(stored / payloads).toBeLessThan(1.3);
    const d = await engine.describe('c');
    expect((d.state as { messages: Message[] }).messages).toHaveLength(60);
    expect((d.state as { messages: Message[] }).messages[59]).toEqual({ role: 'assistant', content: text(59, 'assistant') });
  });

  it('a new engine loads the state from snapshot + a tail of deltas and goes on', async () => {
    const store = new MemoryHistoryStore();
    const a = await open(store, { snapshotEvery: 10 });
    await converse(a, 'c', 1, 12);
    const before = await a.describe('c');
    await a.shutdown({ graceMs: 0 });
    expect((await store.getSnapshot('c'))!.eventId).toBeGreaterThan(30);
    const b = await open(store, { snapshotEvery: 10 });
    expect((await b.describe('c')).state).toEqual(before.state);
    await converse(b, 'c', 13, 14);
    const messages = ((await b.describe('c')).state as { messages: Message[] }).messages;
    expect(messages.map((m) => m.content)).toEqual(Array.from({ length: 28 }, (_, i) => (i % 2 === 0 ? text(i / 2 + 1, 'user') : text(i, 'assistant'))));
  });

  it('a task created in format 1 keeps full states', async () => {
    const store = new MemoryHistoryStore();
    const v1 = historyBuilder('old', { tick: 1 })
      .created({ workflow: 'chat', kind: 'multi-turn', formatVersion: 1 })
      .input(text(1, 'user'))
      .turnStarted()
      .step('model', { role: 'assistant', content: text(2, 'assistant') })
      .completed(text(2, 'assistant'), { state: { messages: [{ role: 'user', content: text(1, 'user') }, { role: 'assistant', content: text(2, 'assistant') }] } })
      .build();
    await store.open();
    await store.append('old', v1, { expectedLastEventId: 0, generation: 1 });
    const engine = await open(store);
    await converse(engine, 'old', 2, 3);
    const ends = terminals(await store.readEvents('old'));
    expect(ends).toHaveLength(3);
    for (const e of ends) {
      expect(e.stateDelta).toBeUndefined();
      expect(e.state).toBeDefined();
    }
    expect(((await engine.describe('old')).state as { messages: Message[] }).messages).toHaveLength(6);
  });

  it('with payload codecs, states stay full (a delta of encoded bytes would not decode event by event)', async () => {
    const reverse: PayloadCodec = {
      encode: (p) => ({ metadata: { ...p.metadata }, data: p.data.slice().reverse() }),
      decode: (p) => ({ metadata: { ...p.metadata }, data: p.data.slice().reverse() }),
    };
    const store = new MemoryHistoryStore();
    const engine = await open(store, { payloadCodecs: [reverse] });
    await converse(engine, 'c', 1, 3);
    const ends = terminals(await store.readEvents('c'));
    expect(ends.every((e) => e.state !== undefined && e.stateDelta === undefined)).toBe(true);
    expect(((await engine.describe('c')).state as { messages: Message[] }).messages).toHaveLength(6);
  });
});
