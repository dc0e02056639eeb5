/**
 * The crash matrix for durable time (issue #13): a conversation that sleeps inside a turn and
 * then waits for a scheduled input is SIGKILLed after its N-th append, for every N; a second
 * run finishes it. For every N: nothing lost, doubled or resurrected; a re-run sleeps toward the
 * recorded fire time, never a fresh full sleep before it; the scheduled turn starts at or after
 * its deliverAt, also after a restart.
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { fold } from '../../src/replay/index.js';
import { isTurnTerminal, type HistoryEvent } from '../../src/history/events.js';
import { killAtEveryAppend, matrixDirs, readStoredHistory } from '../helpers/crash-run.js';

const driver = resolve('dist/test/fixtures/children/time-matrix-driver.js');
const newDir = matrixDirs('turnlog-time-matrix-');

const readHistory = (dir: string) => readStoredHistory(dir, 'conv');

function checkInvariants(events: HistoryEvent[], effectsLog: string): void {
  const state = fold('conv', events);
  expect(state.turn).toBe(2);
  expect(state.openTurn).toBeUndefined();
  for (const turn of [1, 2]) expect(events.filter((e) => isTurnTerminal(e) && e.turn === turn), `terminals of turn ${turn}`).toHaveLength(1);
  // One timer, recorded once (a re-run replays it, never records a second).
  const timers = events.filter((e) => e.type === 'TimerStarted');
  expect(timers).toHaveLength(1);
  const fireAt = timers[0]!.type === 'TimerStarted' ? timers[0]!.fireAt : 0;
  const lines = effectsLog.split('\n').filter(Boolean).map((l) => l.split(' '));
  // The step after the sleep ran only once the recorded timer was due.
  for (const [key, , at] of lines) if (key === '1:after') expect(Number(at)).toBeGreaterThanOrEqual(fireAt);
  // Each recorded step ran exactly as often as its record says (replayed, never re-run).
  const execs = new Map<string, number>();
  for (const [key, n] of lines) execs.set(key!, Math.max(execs.get(key!) ?? 0, Number(n)));
  for (const e of events) {
    if (e.type !== 'StepCompleted') continue;
    expect(execs.get(`${e.turn}:${e.name}`), `executions of ${e.turn}:${e.name}`).toBe(1);
  }
  // The scheduled input ran in exactly one turn, started at or after its deliverAt.
  const queued = events.find((e) => e.type === 'InputQueued' && e.inputId === 'i2');
  const deliverAt = queued?.type === 'InputQueued' ? queued.deliverAt : undefined;
  expect(deliverAt).toBeGreaterThan(0);
  const starts = events.filter((e) => e.type === 'TurnStarted' && e.inputIds.includes('i2'));
  expect(starts.filter((e) => e.type === 'TurnStarted' && e.attempt === 1)).toHaveLength(1);
  for (const s of starts) expect(s.time).toBeGreaterThanOrEqual(deliverAt!);
}

describe('time crash matrix', () => {
  it('a conversation that sleeps and gets a scheduled input survives a SIGKILL at every append', { timeout: 600_000 }, async () => {
    const { killed, expected } = await killAtEveryAppend(
      driver,
      newDir,
      async (dir) => checkInvariants(await readHistory(dir), readFileSync(join(dir, 'effects.log'), 'utf8')),
      60,
    );
    expect(expected).toEqual({ i1: 'nap:1/1', i2: 'reminder:1/1' });
    expect(killed).toBeGreaterThan(6);
  });
});
