/**
 * The crash matrix of a long-lived conversation (issue #15): three turns under version 1, a
 * deploy whose version 2 migrates the state (StateMigrated), two more turns, compaction every two
 * turns. The driver is SIGKILLed after its N-th append, for every N, then run again to the end.
 * For every N: the conversation equals the uninterrupted run's, the hook ran exactly once (a kill
 * after the StateMigrated append does not migrate again), the history folds with one migration
 * and one terminal per turn, and every input ran once (idempotent sends across compaction).
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isTurnTerminal, type HistoryEvent } from '../../src/history/events.js';
import { decodeState } from '../../src/history/state-codec.js';
import { fold } from '../../src/replay/index.js';
import { killAtEveryAppend, matrixDirs, readStoredHistory } from '../helpers/crash-run.js';

const driver = resolve('dist/test/fixtures/children/migration-matrix-driver.js');
const newDir = matrixDirs('turnlog-migration-matrix-');

function check(events: HistoryEvent[], hookLog: string): void {
  const s = fold('conv', events);
  expect(s.status).toBe('suspended');
  expect(s.turn).toBe(5);
  expect(s.stateVersion).toBe(2);
  // One migration, from version 1, recorded just before turn 4's first TurnStarted.
  expect(hookLog).toBe('1\n');
  const migrations = events.filter((e) => e.type === 'StateMigrated');
  expect(migrations).toHaveLength(1);
  const m = migrations[0]!;
  expect(m).toMatchObject({ fromVersion: 1, toVersion: 2 });
  expect(events[events.indexOf(m) + 1]).toMatchObject({ type: 'TurnStarted', turn: 4, attempt: 1, workflowVersion: 2 });
  // One terminal per turn kept in the history.
  const started = new Set(events.flatMap((e) => (e.type === 'TurnStarted' ? [e.turn] : [])));
  for (const turn of started) expect(events.filter((e) => isTurnTerminal(e) && e.turn === turn), `terminals of turn ${turn}`).toHaveLength(1);
  // Every input ran in exactly one turn: kept TurnStarted events, plus the compacted ones' count.
  const second = events[1];
  const compactedTurns = second?.type === 'HistoryCompacted' ? second.turns : 0;
  if (second?.type === 'HistoryCompacted') {
    expect(second.droppedInputIds).toEqual(['i1', 'i2', 'i3'].slice(0, compactedTurns));
    expect(decodeState(second.state).stateVersion).toBe(1);
  }
  const ran = events.flatMap((e) => (e.type === 'TurnStarted' && e.attempt === 1 ? e.inputIds : []));
  expect([...(second?.type === 'HistoryCompacted' ? second.droppedInputIds ?? [] : []), ...ran]).toEqual(['i1', 'i2', 'i3', 'i4', 'i5']);
}

describe('crash matrix: a conversation that migrates its state and is compacted', () => {
  it('recovers to the uninterrupted conversation after a SIGKILL at every append, migrating once', { timeout: 600_000 }, async () => {
    let baseline = true;
    const { killed, expected } = await killAtEveryAppend(driver, newDir, async (dir) => {
      const events = await readStoredHistory(dir, 'conv');
      check(events, readFileSync(join(dir, 'hook.log'), 'utf8'));
      if (baseline) {
        baseline = false;
        expect(events[1]?.type).toBe('HistoryCompacted');
      }
    });
    expect(expected).toMatchObject({ turn: 5, state: { migrations: 1 } });
    expect((expected as { state: { log: unknown[] } }).state.log).toHaveLength(10);
    expect(killed).toBeGreaterThan(8);
  });
});
