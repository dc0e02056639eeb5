// The snapshot cadence (runtime/appender.ts snapshotDue): every `snapshotEvery` events, and every
// `snapshotEvery / 4` while the task's last snapshot is small, so a small task's recovered tail is
// 4× shorter (docs/performance.md, "recovery of one long task").
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { SMALL_SNAPSHOT_BYTES, snapshotDue } from '../../src/runtime/appender.js';
import { silentLogger } from '../../src/logger.js';
import { MemoryHistoryStore } from '../../src/testing/index.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';

describe('snapshotDue', () => {
  it('every N events; every N / 4 once the last snapshot is known to be small', () => {
    expect(snapshotDue(999, 10_000, 1000)).toBe(false);
    expect(snapshotDue(1000, 10_000, 1000)).toBe(true);
    expect(snapshotDue(249, 100, 1000)).toBe(false);
    expect(snapshotDue(250, 100, 1000)).toBe(true);
    // The first comes at N, as before: a task's snapshots keep the old positions (bench/conversation measures there).
    expect(snapshotDue(250, undefined, 1000)).toBe(false);
    expect(snapshotDue(1000, undefined, 1000)).toBe(true);
    expect(snapshotDue(250, SMALL_SNAPSHOT_BYTES, 1000)).toBe(true);
    expect(snapshotDue(250, SMALL_SNAPSHOT_BYTES + 1, 1000)).toBe(false);
    // Never below one event.
    expect(snapshotDue(1, 100, 3)).toBe(true);
    expect(snapshotDue(0, 100, 3)).toBe(false);
  });
});

const engines: Engine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
});

/** A chat whose state is `bytes` long: one step a turn, state written at each turn's end. */
function chatOf(bytes: number) {
  return defineWorkflow({
    name: `chat-${bytes}`,
    kind: 'multi-turn',
    initialState: () => ({ text: '' }),
    turn: async (ctx, n: number) => {
      ctx.state.text = `${n} `.padEnd(bytes, 'x');
      return ctx.step('model', () => n);
    },
  });
}

/** Runs turns until the history passes `events`; returns every snapshot position the store saw. */
async function snapshotsOf(bytes: number, events: number): Promise<number[]> {
  const store = new MemoryHistoryStore();
  const at: number[] = [];
  const put = store.putSnapshot.bind(store);
  store.putSnapshot = (id, s) => (at.push(s.eventId), put(id, s));
  const chat = chatOf(bytes);
  const engine = await Engine.open({ store, workflows: [chat], logger: silentLogger, scanIntervalMs: 0, snapshotEvery: 40 });
  engines.push(engine);
  const h = await engine.start(chat, 0, { taskId: 'c' });
  await h.nextTurn();
  for (let i = 1; (await engine.describe('c')).lastEventId < events; i++) await engine.turnResult('c', await engine.sendInput('c', i));
  return at;
}

describe('engine cadence', () => {
  it('a small state is snapshotted every snapshotEvery / 4 events, a large one every snapshotEvery', async () => {
    const small = await snapshotsOf(100, 120);
    const large = await snapshotsOf(SMALL_SNAPSHOT_BYTES * 2, 120);
    // Gaps between snapshots: ~10 events (a turn appends a few at once) against ~40.
    const gaps = (xs: number[]) => xs.map((x, i) => x - (xs[i - 1] ?? 0));
    // The first at 40 in both (no size known yet); then every 10 for the small state, 40 for the large.
    for (const xs of [small, large]) expect(xs[0]).toBeGreaterThanOrEqual(40), expect(xs[0]).toBeLessThan(50);
    expect(small.length).toBeGreaterThanOrEqual(6);
    for (const g of gaps(small).slice(1)) expect(g).toBeGreaterThanOrEqual(10), expect(g).toBeLessThan(20);
    for (const g of gaps(large)) expect(g).toBeGreaterThanOrEqual(40), expect(g).toBeLessThan(50);
    expect(large.length).toBeLessThanOrEqual(3);
  });
});
