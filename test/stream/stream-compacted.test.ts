// Review: a reader resumes task.stream({ from }) with an offset it was really given, after
// compaction dropped that event. The offset is this task's (later events exist), so it must not
// be rejected as "past the task's last event" (TURNLOG_STREAM_OFFSET): the reader gets a `gap`
// for what compaction dropped, then carries on with the kept events.
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { compactedChat } from '../fixtures/workflows/compacted-chat.js';

const engines: Engine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
});

const chat = compactedChat;

it('resuming from a compacted offset: a gap, then only kept durable events, no TURNLOG_STREAM_OFFSET', async () => {
  const store = new MemoryHistoryStore();
  const engine = await Engine.open({ store, workflows: [chat], logger: silentLogger, scanIntervalMs: 0 });
  engines.push(engine);
  const task = await engine.start(chat, 'm1', { taskId: 'c' });
  await task.nextTurn();
  // A reader saw turn 1 and remembers an offset inside it.
  const ac = new AbortController();
  let offset = '';
  for await (const item of task.stream({ signal: ac.signal })) {
    if (item.kind === 'step-completed') {
      offset = item.offset;
      ac.abort();
    }
  }
  expect(offset).toMatch(/^\d+$/);
  for (let i = 2; i <= 6; i++) await engine.turnResult('c', await engine.sendInput('c', `m${i}`));
  let compacted: { throughEventId: number } | undefined;
  for (;;) {
    const e = (await store.readEvents('c'))[1];
    if (e?.type === 'HistoryCompacted' && e.turns >= 4) {
      compacted = e;
      break;
    }
    await new Promise((r) => setTimeout(r, 5));
  }
  expect(Number(offset)).toBeLessThan(compacted.throughEventId);

  const again = new AbortController();
  const kinds: string[] = [];
  const offsets: number[] = [];
  for await (const item of task.stream({ from: offset, signal: again.signal })) {
    kinds.push(item.kind);
    if (/^\d+$/.test(item.offset) && item.kind !== 'gap') offsets.push(Number(item.offset));
    if (item.kind === 'turn-ended' && kinds.filter((k) => k === 'turn-ended').length === 2) again.abort();
  }
  // Live items still in the ring may come first (they are after the offset); then one gap.
  expect(kinds.filter((k) => k === 'gap')).toHaveLength(1);
  expect(offsets.every((o) => o > compacted!.throughEventId)).toBe(true);
  expect(kinds.filter((k) => k === 'turn-ended')).toHaveLength(2);
});
