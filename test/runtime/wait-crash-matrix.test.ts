/**
 * The crash matrix for named waits (issue #13): a conversation that waits for an approval with a
 * timeout (turn 1, signalled while it waits) and then for one that never comes (turn 2, times
 * out) is SIGKILLed after its N-th append, for every N; a second run finishes it. For every N:
 * one signal, taken by turn 1's wait only; each wait recorded once and ended once; turn 2 ends at
 * or after its recorded deadline (a re-run waits toward it, never a fresh full wait recorded);
 * each recorded step ran once.
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { fold } from '../../src/replay/index.js';
import { isTurnTerminal, type HistoryEvent } from '../../src/history/events.js';
import { killAtEveryAppend, matrixDirs, readStoredHistory } from '../helpers/crash-run.js';

const driver = resolve('dist/test/fixtures/children/wait-matrix-driver.js');
const newDir = matrixDirs('turnlog-wait-matrix-');

function checkInvariants(events: HistoryEvent[], effectsLog: string): void {
  const state = fold('conv', events);
  expect(state.turn).toBe(2);
  expect(state.openTurn).toBeUndefined();
  expect(state.signals).toBeUndefined();
  for (const turn of [1, 2]) {
    expect(events.filter((e) => isTurnTerminal(e) && e.turn === turn), `terminals of turn ${turn}`).toHaveLength(1);
    expect(events.filter((e) => e.type === 'WaitStarted' && e.turn === turn), `waits of turn ${turn}`).toHaveLength(1);
    expect(events.filter((e) => e.type === 'WaitEnded' && e.turn === turn), `wait ends of turn ${turn}`).toHaveLength(1);
  }
  const signals = events.filter((e) => e.type === 'SignalReceived');
  expect(signals).toHaveLength(1);
  const ends = events.filter((e) => e.type === 'WaitEnded');
  expect(ends[0]).toMatchObject({ turn: 1, timedOut: false, signalId: signals[0]!.type === 'SignalReceived' ? signals[0]!.signalId : '' });
  expect(ends[1]).toMatchObject({ turn: 2, timedOut: true });
  const started2 = events.find((e) => e.type === 'WaitStarted' && e.turn === 2);
  const deadline = started2?.type === 'WaitStarted' ? started2.deadline! : Infinity;
  expect(ends[1]!.time).toBeGreaterThanOrEqual(deadline);
  const lines = effectsLog.split('\n').filter(Boolean).map((l) => l.split(' '));
  const execs = new Map<string, number>();
  for (const [key, n] of lines) execs.set(key!, Math.max(execs.get(key!) ?? 0, Number(n)));
  for (const e of events) {
    if (e.type !== 'StepCompleted') continue;
    expect(execs.get(`${e.turn}:${e.name}`), `executions of ${e.turn}:${e.name}`).toBe(1);
  }
  // Turn 2's step after the wait ran once its recorded deadline had passed.
  for (const [key, , at] of lines) if (key === '2:after') expect(Number(at)).toBeGreaterThanOrEqual(deadline);
}

describe('wait crash matrix', () => {
  it('a conversation that waits for an approval with a timeout survives a SIGKILL at every append', { timeout: 600_000 }, async () => {
    const { killed, expected } = await killAtEveryAppend(
      driver,
      newDir,
      async (dir) => checkInvariants(await readStoredHistory(dir, 'conv'), readFileSync(join(dir, 'effects.log'), 'utf8')),
      60,
    );
    expect(expected).toEqual({ i1: 'ana:1/1', i2: 'expired:1/1' });
    expect(killed).toBeGreaterThan(10);
  });
});
