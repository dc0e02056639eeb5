/**
 * The crash matrix for child tasks (issue #13): a parent that starts a child and awaits it is
 * SIGKILLed after its N-th append (parent's and child's appends alike), for every N; a second
 * run finishes it. For every N: the child is started once (one child task, one ChildStarted),
 * its result is recorded once (one ChildEnded), and every step ran exactly once.
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { fold } from '../../src/replay/index.js';
import { isTurnTerminal, type HistoryEvent } from '../../src/history/events.js';
import { killAtEveryAppend, matrixDirs, readStoredHistory } from '../helpers/crash-run.js';

const driver = resolve('dist/test/fixtures/children/child-matrix-driver.js');
const newDir = matrixDirs('turnlog-child-matrix-');

function checkInvariants(parent: HistoryEvent[], child: HistoryEvent[], effectsLog: string): void {
  const p = fold('lead', parent);
  expect(p.status).toBe('completed');
  expect(p.outcome).toBe('succeeded');
  expect(parent.filter((e) => isTurnTerminal(e))).toHaveLength(1);
  expect(parent.filter((e) => e.type === 'ChildStarted')).toMatchObject([{ childId: 'lead/c1.1', seq: 1 }]);
  expect(parent.filter((e) => e.type === 'ChildEnded')).toMatchObject([{ childId: 'lead/c1.1', seq: 2, status: 'completed' }]);
  // One child task, created once, naming its parent call.
  expect(child.filter((e) => e.type === 'TaskCreated')).toMatchObject([{ parent: { taskId: 'lead', turn: 1, seq: 1 } }]);
  expect(fold('lead/c1.1', child).outcome).toBe('succeeded');
  // Each recorded step ran exactly as often as its record says (replayed, never re-run).
  const execs = new Map<string, number>();
  for (const [key, n] of effectsLog.split('\n').filter(Boolean).map((l) => l.split(' '))) execs.set(key!, Math.max(execs.get(key!) ?? 0, Number(n)));
  expect(execs.get('lead/c1.1:search')).toBe(1);
  expect(execs.get('lead:summarize')).toBe(1);
}

describe('child crash matrix', () => {
  it('a parent that starts a child and awaits it survives a SIGKILL at every append', { timeout: 600_000 }, async () => {
    const { killed, expected } = await killAtEveryAppend(
      driver,
      newDir,
      async (dir) => checkInvariants(await readStoredHistory(dir, 'lead'), await readStoredHistory(dir, 'lead/c1.1'), readFileSync(join(dir, 'effects.log'), 'utf8')),
      60,
    );
    expect(expected).toEqual({ status: 'completed', output: 'wind#1/1' });
    expect(killed).toBeGreaterThan(6);
  });
});
