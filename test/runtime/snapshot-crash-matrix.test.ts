/**
 * The crash matrices at a tiny snapshot cadence (snapshotEvery 4: the first snapshot at 4 events,
 * then one after every append while the state is small, runtime/appender.ts snapshotDue). The
 * default cadence (1,000) never snapshots these short histories, so the matrices alone never
 * recover from a snapshot: here every kill point's restart loads a snapshot written at an append
 * boundary somewhere inside a turn (after a start, a step, a checkpoint, a taken input, a marker)
 * and folds the tail after it. Each restart's output must equal the uninterrupted run's, and the
 * stored history fold to the baseline's status with one terminal per turn and a snapshot it agrees with.
 */
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isTurnTerminal, type HistoryEvent } from '../../src/history/events.js';
import { decodeState } from '../../src/history/state-codec.js';
import { fold } from '../../src/replay/index.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { killAtEveryAppend, matrixDirs, readStoredHistory } from '../helpers/crash-run.js';

const newDir = matrixDirs('turnlog-snapmatrix-');

let saved: string | undefined;
beforeAll(() => {
  saved = process.env['TURNLOG_TEST_SNAPSHOT_EVERY'];
  process.env['TURNLOG_TEST_SNAPSHOT_EVERY'] = '4';
});
afterAll(() => {
  if (saved === undefined) delete process.env['TURNLOG_TEST_SNAPSHOT_EVERY'];
  else process.env['TURNLOG_TEST_SNAPSHOT_EVERY'] = saved;
});

/** The stored snapshot folded on with its tail gives the full history's state. */
async function snapshotAgrees(dir: string, taskId: string, events: HistoryEvent[]): Promise<boolean> {
  const store = new LevelHistoryStore(dir);
  await store.open();
  try {
    const snap = await store.getSnapshot(taskId);
    if (!snap) return false;
    const from = decodeState(snap.data);
    expect(from.lastEventId).toBe(snap.eventId);
    const tail = events.filter((e) => e.eventId > snap.eventId);
    expect(tail.length === 0 ? from : fold(taskId, tail, from)).toEqual(fold(taskId, events));
    return true;
  } finally {
    await store.close();
  }
}

function oneTerminalPerTurn(events: HistoryEvent[]): void {
  const started = new Set(events.filter((e) => e.type === 'TurnStarted').map((e) => (e as { turn: number }).turn));
  for (const turn of started) expect(events.filter((e) => isTurnTerminal(e) && e.turn === turn), `terminals of turn ${turn}`).toHaveLength(1);
}

const matrices: [string, string, number][] = [
  ['crash-matrix-driver', 'conv', 15],
  ['migration-matrix-driver', 'conv', 8],
  ['wait-matrix-driver', 'conv', 5],
  ['time-matrix-driver', 'conv', 5],
];

describe('crash matrices with a snapshot at every append', () => {
  for (const [name, taskId, atLeast] of matrices) {
    it(`${name}: a SIGKILL at every append, restarted from the latest snapshot, ends as the uninterrupted run`, { timeout: 900_000 }, async () => {
      let snapshots = 0;
      let status: string | undefined;
      const { killed } = await killAtEveryAppend(resolve(`dist/test/fixtures/children/${name}.js`), newDir, async (dir) => {
        const events = await readStoredHistory(dir, taskId);
        status ??= fold(taskId, events).status; // the baseline's
        expect(fold(taskId, events).status).toBe(status);
        oneTerminalPerTurn(events);
        if (await snapshotAgrees(dir, taskId, events)) snapshots++;
      });
      expect(killed).toBeGreaterThan(atLeast);
      expect(snapshots).toBeGreaterThan(killed / 2);
    });
  }
});
