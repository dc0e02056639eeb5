/**
 * The crash matrix (issue 4's core acceptance test). A child engine runs a scripted support
 * conversation (steps, checkpoints, a steering input taken mid-turn, a patched branch, a cancel) and is
 * SIGKILLed after its N-th append, for every N from 1 to the last; a second run finishes the
 * script. For every N: the conversation equals the uninterrupted run's, each recorded step was
 * replayed and never re-run, each turn has exactly one terminal, no input is lost or run twice.
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Level } from 'level';
import { Prefix } from '../../src/store/keys.js';
import { fold } from '../../src/replay/index.js';
import { isTurnTerminal, type HistoryEvent } from '../../src/history/events.js';
import { defaultPayloadConverter } from '../../src/history/payload.js';
import { killAtEveryAppend, matrixDirs, readStoredHistory } from '../helpers/crash-run.js';

const driver = resolve('dist/test/fixtures/children/crash-matrix-driver.js');
const newDir = matrixDirs('turnlog-matrix-');

const readHistory = (dir: string) => readStoredHistory(dir, 'conv');

/** Large payloads stored by reference in a closed store directory. */
async function payloadKeys(dir: string): Promise<number> {
  const db = new Level<Buffer, Buffer>(dir, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
  await db.open();
  try {
    return (await db.keys({ gte: Buffer.from([Prefix.payload]), lt: Buffer.from([Prefix.payload + 1]) }).all()).length;
  } finally {
    await db.close();
  }
}

function checkInvariants(events: HistoryEvent[], effectsLog: string): void {
  // The history is valid (fold rejects gaps, double terminals, steps after terminals, ...).
  const state = fold('conv', events);
  expect(state.status).toBe('completed');
  // Exactly one terminal event per started turn.
  const started = new Set(events.filter((e) => e.type === 'TurnStarted').map((e) => (e as { turn: number }).turn));
  for (const turn of started) {
    expect(events.filter((e) => isTurnTerminal(e) && e.turn === turn), `terminals of turn ${turn}`).toHaveLength(1);
  }
  // The patched branch: every completed turn recorded its marker once and took the new branch.
  for (const turn of events.filter((e) => e.type === 'TurnCompleted').map((e) => (e as { turn: number }).turn)) {
    const marks = events.filter((e) => e.type === 'PatchMarked' && e.turn === turn);
    expect(marks.map((e) => (e as { patchId: string }).patchId), `patch markers of turn ${turn}`).toEqual(['reply-v2']);
    const replies = events.filter((e) => e.type === 'StepCompleted' && e.turn === turn && e.name.startsWith('reply'));
    expect(replies.map((e) => (e as { name: string }).name), `reply steps of turn ${turn}`).toEqual(['reply-v2']);
  }
  // Every input runs in exactly one turn: taken at attempt 1 of a turn, or by takeInputs.
  const consumers = new Map<string, number[]>();
  for (const e of events) {
    const ids = e.type === 'TurnStarted' && e.attempt === 1 ? e.inputIds : e.type === 'InputsTaken' ? e.inputIds : [];
    for (const id of ids) consumers.set(id, [...(consumers.get(id) ?? []), (e as { turn: number }).turn]);
  }
  const queued = events.filter((e) => e.type === 'InputQueued').map((e) => (e as { inputId: string }).inputId);
  expect(queued.sort()).toEqual(['i1', 'i2', 'i3', 'i4', 'i5']);
  for (const id of queued) expect(consumers.get(id), `turns that ran ${id}`).toHaveLength(1);
  // A recorded step is replayed, never re-run: no execution of it happened after the recorded one.
  const execs = new Map<string, number>();
  for (const line of effectsLog.split('\n').filter(Boolean)) {
    const [key, n] = line.split(' ');
    execs.set(key!, Math.max(execs.get(key!) ?? 0, Number(n)));
  }
  for (const e of events) {
    if (e.type !== 'StepCompleted') continue;
    const recorded = defaultPayloadConverter.fromPayload<{ exec: number }>(e.result!).exec;
    expect(execs.get(`${e.turn}:${e.name}`), `executions of step ${e.turn}:${e.name}`).toBe(recorded);
  }
}

describe('crash matrix', () => {
  it('recovers to the uninterrupted conversation after a SIGKILL at every append', { timeout: 600_000 }, async () => {
    let baseline = true;
    const { killed } = await killAtEveryAppend(driver, newDir, async (dir) => {
      const events = await readHistory(dir);
      checkInvariants(events, readFileSync(join(dir, 'effects.log'), 'utf8'));
      if (baseline) {
        baseline = false;
        // The conversation records its state as deltas and keeps its large step result by reference.
        expect(events.filter((e) => (e.type === 'TurnCompleted' || e.type === 'TurnSuspended') && e.stateDelta !== undefined).length).toBeGreaterThan(1);
        expect(await payloadKeys(dir)).toBe(1);
      } else {
        expect(await payloadKeys(dir)).toBeLessThanOrEqual(1);
      }
    });
    // The script makes one append per step/checkpoint/turn boundary: about two dozen kill points.
    expect(killed).toBeGreaterThan(15);
  });
});
