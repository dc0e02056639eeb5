/**
 * The golden history of named waits (format 2, beside the format-1 goldens of
 * test/fixtures/histories): a signal while waiting, one buffered before the turn, a timeout, and
 * a turn whose engine died mid-wait, re-run by another engine that waited only the remainder.
 * It must load, fold (snapshots included), re-encode and replay unchanged, forever.
 * Re-record with `UPDATE_GOLDEN=1 npx vitest run test/testing/golden-waits.test.ts`.
 */
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { decodeEvent, encodeEvent, eventToJSON } from '../../src/history/codec.js';
import type { HistoryEvent } from '../../src/history/events.js';
import { encodeHistoryFile, parseHistoryFile } from '../../src/history/history-file.js';
import { decodeState, encodeState } from '../../src/history/state-codec.js';
import { fold } from '../../src/replay/fold.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { createTestEngine, replayHistory } from '../../src/testing/index.js';
import { isTurnlogError } from '../../src/errors.js';
import { HOUR, approvalDesk, createApprovalDesk } from '../fixtures/workflows/approval-desk.js';
import { VERSION } from './golden.js';

const PATH = join(import.meta.dirname, `../fixtures/histories-waits/approval-desk_${VERSION}.json`);

/** Bytes (Buffer or Uint8Array) compared by content. */
function plain(v: unknown): unknown {
  return JSON.parse(JSON.stringify(v, (_k, x: unknown) => (x instanceof Uint8Array ? [...x] : (x as { type?: string }).type === 'Buffer' ? (x as { data: number[] }).data : x)));
}

async function waitStarted(history: () => Promise<HistoryEvent[]>, count: number): Promise<void> {
  while ((await history()).filter((e) => e.type === 'WaitStarted').length < count) await new Promise((r) => setTimeout(r, 5));
}

async function record(): Promise<HistoryEvent[]> {
  const store = new MemoryHistoryStore();
  const clock = new ManualClock();
  const first = await createTestEngine({ workflows: [approvalDesk], store, clock, instance: 'test-engine-1' });
  const task = await first.engine.start(approvalDesk, { orderId: 'A', amount: 40 }, { taskId: 'approval-desk', inputId: 'in-1' });
  await waitStarted(() => first.history('approval-desk'), 1);
  await task.signal('approval', { approved: true, by: 'ana' }); // 1: while waiting
  await task.turnResult('in-1');
  await task.signal('approval', { approved: false, by: 'bo' }); // 2: buffered before the turn
  await task.send({ orderId: 'B', amount: 900 }, { inputId: 'in-2' });
  await task.turnResult('in-2');
  await task.send({ orderId: 'C', amount: 5 }, { inputId: 'in-3' }); // 3: never answered
  await waitStarted(() => first.history('approval-desk'), 3);
  await first.advance(HOUR);
  await task.turnResult('in-3');
  await task.send({ orderId: 'D', amount: 12 }, { inputId: 'in-4' }); // 4: the engine dies mid-wait
  await waitStarted(() => first.history('approval-desk'), 4);
  await first.advance(HOUR / 2);
  await first.close();
  const second = await createTestEngine({ workflows: [approvalDesk], store, clock, instance: 'test-engine-2' });
  try {
    await second.advance(61_000); // the dead engine's lease expires
    await second.engine.recover();
    while (!(await second.history('approval-desk')).some((e) => e.type === 'TurnStarted' && e.turn === 4 && e.attempt === 2)) await new Promise((r) => setTimeout(r, 5));
    await second.engine.signal('approval-desk', 'approval', { approved: true, by: 'cy' });
    await second.engine.turnResult('approval-desk', 'in-4');
    return second.history('approval-desk');
  } finally {
    await second.close();
  }
}

beforeAll(async () => {
  if (process.env['UPDATE_GOLDEN'] !== '1') return;
  await mkdir(dirname(PATH), { recursive: true });
  await writeFile(PATH, await encodeHistoryFile({ taskId: 'approval-desk', events: await record() }, 'json'));
});

describe('golden history of waits and signals', () => {
  it('exists (re-record with UPDATE_GOLDEN=1)', () => {
    expect(existsSync(PATH), `${PATH} is missing`).toBe(true);
  });

  it('loads, folds (snapshot at every event) and re-encodes unchanged', () => {
    const text = readFileSync(PATH);
    const doc = JSON.parse(text.toString('utf8')) as { events: Record<string, unknown>[] };
    const [task] = parseHistoryFile(text, PATH).tasks;
    const events = task!.events;
    expect(new Set(events.map((e) => e.type))).toEqual(new Set([...events.map((e) => e.type), 'SignalReceived', 'WaitStarted', 'WaitEnded']));
    expect(events.map((e) => eventToJSON(e))).toEqual(doc.events);
    for (const e of events) expect(eventToJSON(decodeEvent(encodeEvent(e), task!.taskId))).toEqual(eventToJSON(e));
    for (let i = 1; i <= events.length; i++) {
      const s = fold(task!.taskId, events.slice(0, i));
      expect(plain(decodeState(encodeState(s)))).toEqual(plain(s));
    }
    // The buffered signal of turn 2 sat in the state between turns, then was taken.
    const before2 = events.findIndex((e) => e.type === 'InputQueued' && e.inputId === 'in-2');
    expect(fold(task!.taskId, events.slice(0, before2)).signals?.map((x) => x.name)).toEqual(['approval']);
    expect(fold(task!.taskId, events).signals).toBeUndefined();
    expect(events.filter((e) => e.type === 'WaitEnded').map((e) => (e.type === 'WaitEnded' ? e.timedOut : null))).toEqual([false, false, true, false]);
  });

  it('replays turn by turn: each wait gets its recorded outcome back, the re-run turn replays its last attempt', async () => {
    const report = await replayHistory({ history: PATH, workflows: [approvalDesk] });
    expect(report.results.map((r) => [r.turn, r.attempt, r.status, r.outcome])).toEqual([
      [1, 1, 'ok', 'suspended'],
      [2, 1, 'ok', 'suspended'],
      [3, 1, 'ok', 'suspended'],
      [4, 2, 'ok', 'suspended'],
    ]);
  });

  it('code that waits for another signal at that position is a NonDeterminismError', async () => {
    const err = await replayHistory({ history: PATH, workflows: [createApprovalDesk('sign-off')] }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isTurnlogError(err, 'TURNLOG_NON_DETERMINISM')).toBe(true);
    expect((err as Error).message).toContain('waitFor("approval")');
  });
});
