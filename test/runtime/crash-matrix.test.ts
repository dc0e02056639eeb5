/**
 * The crash matrix (issue 4's core acceptance test). A child engine runs a scripted support
 * conversation (steps, checkpoints, a steering input taken mid-turn, a patched branch, a cancel) and is
 * SIGKILLed after its N-th append, for every N from 1 to the last; a second run finishes the
 * script. For every N: the conversation equals the uninterrupted run's, each recorded step was
 * replayed and never re-run, each turn has exactly one terminal, no input is lost or run twice.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Level } from 'level';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { Prefix } from '../../src/store/keys.js';
import { fold } from '../../src/replay/index.js';
import { isTurnTerminal, type HistoryEvent } from '../../src/history/events.js';
import { defaultPayloadConverter } from '../../src/history/payload.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const driver = resolve('dist/test/fixtures/children/crash-matrix-driver.js');
const dirs: { remove: () => Promise<void> }[] = [];
afterAll(async () => {
  for (const d of dirs) await d.remove();
});

function run(dir: string, killAfter?: number) {
  const env = { ...process.env };
  delete env['TURNLOG_FAULT_KILL_AFTER_APPEND'];
  if (killAfter !== undefined) env['TURNLOG_FAULT_KILL_AFTER_APPEND'] = String(killAfter);
  const r = spawnSync(process.execPath, [driver, dir], { env, encoding: 'utf8', timeout: 60_000 });
  return { status: r.status, signal: r.signal, stdout: r.stdout, stderr: r.stderr };
}

async function readHistory(dir: string): Promise<HistoryEvent[]> {
  const store = new LevelHistoryStore(dir);
  await store.open();
  try {
    return await store.readEvents('conv');
  } finally {
    await store.close();
  }
}

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
    const base = await makeTmpDir('turnlog-matrix-');
    dirs.push(base);
    const baseline = run(base.path);
    expect(baseline.status, baseline.stderr).toBe(0);
    const expected = JSON.parse(baseline.stdout) as unknown;
    const events = await readHistory(base.path);
    checkInvariants(events, readFileSync(join(base.path, 'effects.log'), 'utf8'));
    // The conversation records its state as deltas and keeps its large step result by reference.
    expect(events.filter((e) => (e.type === 'TurnCompleted' || e.type === 'TurnSuspended') && e.stateDelta !== undefined).length).toBeGreaterThan(1);
    expect(await payloadKeys(base.path)).toBe(1);

    let killed = 0;
    for (let n = 1; n < 200; n++) {
      const dir = await makeTmpDir('turnlog-matrix-');
      dirs.push(dir);
      const first = run(dir.path, n);
      if (first.status === 0) {
        // N is past the last append: the run finished untouched. The matrix is complete.
        expect(JSON.parse(first.stdout)).toEqual(expected);
        break;
      }
      expect(first.signal, `run killed after append ${n}: ${first.stderr}`).toBe('SIGKILL');
      killed++;
      const second = run(dir.path);
      expect(second.status, `resume after kill at append ${n}: ${second.stderr}`).toBe(0);
      expect(JSON.parse(second.stdout), `conversation after kill at append ${n}`).toEqual(expected);
      checkInvariants(await readHistory(dir.path), readFileSync(join(dir.path, 'effects.log'), 'utf8'));
      expect(await payloadKeys(dir.path)).toBeLessThanOrEqual(1);
    }
    // The script makes one append per step/checkpoint/turn boundary: about two dozen kill points.
    expect(killed).toBeGreaterThan(15);
  });
});
