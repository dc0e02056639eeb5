/**
 * The golden history of child tasks (format 2): a multi-turn lead whose turns fan out to two
 * specialists each (one child fails and is caught), with the histories of a parent and of a child
 * (TaskCreated.parent). It must load, fold (snapshots included), re-encode and replay unchanged,
 * forever. Re-record with `UPDATE_GOLDEN=1 npx vitest run test/testing/golden-children.test.ts`.
 */
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { decodeEvent, encodeEvent, eventToJSON } from '../../src/history/codec.js';
import { encodeHistoryFile, parseHistoryFile } from '../../src/history/history-file.js';
import { decodeState, encodeState } from '../../src/history/state-codec.js';
import { fold } from '../../src/replay/fold.js';
import { createTestEngine, replayHistory } from '../../src/testing/index.js';
import { isTurnlogError } from '../../src/errors.js';
import { createResearchLead, researchLead, specialist } from '../fixtures/workflows/research-lead.js';
import { VERSION } from './golden.js';

const PATH = join(import.meta.dirname, `../fixtures/histories-children/research-lead_${VERSION}.json`);

function plain(v: unknown): unknown {
  return JSON.parse(JSON.stringify(v, (_k, x: unknown) => (x instanceof Uint8Array ? [...x] : (x as { type?: string }).type === 'Buffer' ? (x as { data: number[] }).data : x)));
}

beforeAll(async () => {
  if (process.env['UPDATE_GOLDEN'] !== '1') return;
  const t = await createTestEngine({ workflows: [researchLead, specialist] });
  try {
    const task = await t.engine.start(researchLead, ['wind', 'nothing'], { taskId: 'research-lead', inputId: 'in-1' });
    await task.turnResult('in-1');
    await task.send(['solar', 'tides'], { inputId: 'in-2' });
    await task.turnResult('in-2');
    const tasks = [{ taskId: 'research-lead', events: await t.history('research-lead') }, { taskId: 'research-lead/c1.1', events: await t.history('research-lead/c1.1') }];
    await mkdir(dirname(PATH), { recursive: true });
    await writeFile(PATH, await encodeHistoryFile(tasks, 'json'));
  } finally {
    await t.close();
  }
});

describe('golden history of child tasks', () => {
  it('exists (re-record with UPDATE_GOLDEN=1)', () => {
    expect(existsSync(PATH), `${PATH} is missing`).toBe(true);
  });

  it('loads, folds (snapshot at every event) and re-encodes unchanged', () => {
    const text = readFileSync(PATH);
    const [parent, child] = parseHistoryFile(text, PATH).tasks;
    for (const task of [parent!, child!]) {
      for (const e of task.events) expect(eventToJSON(decodeEvent(encodeEvent(e), task.taskId))).toEqual(eventToJSON(e));
      for (let i = 1; i <= task.events.length; i++) {
        const s = fold(task.taskId, task.events.slice(0, i));
        expect(plain(decodeState(encodeState(s)))).toEqual(plain(s));
      }
    }
    const s = fold(parent!.taskId, parent!.events);
    expect(s.children?.map((c) => [c.childId, c.status])).toEqual([
      ['research-lead/c1.1', 'completed'],
      ['research-lead/c1.2', 'failed'],
      ['research-lead/c2.1', 'completed'],
      ['research-lead/c2.2', 'completed'],
    ]);
    expect(fold(child!.taskId, child!.events).parent).toEqual({ taskId: 'research-lead', turn: 1, seq: 1, detached: false });
  });

  it('replays turn by turn with the recorded outcomes (no child runs)', async () => {
    const report = await replayHistory({ history: PATH, taskId: 'research-lead', workflows: [researchLead] });
    expect(report.results.map((r) => [r.turn, r.status, r.outcome])).toEqual([
      [1, 'ok', 'suspended'],
      [2, 'ok', 'suspended'],
    ]);
  });

  it('code that starts another workflow at that position is a NonDeterminismError', async () => {
    const err = await replayHistory({ history: PATH, taskId: 'research-lead', workflows: [createResearchLead('other-specialist')] }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isTurnlogError(err, 'TURNLOG_NON_DETERMINISM')).toBe(true);
    expect((err as Error).message).toContain('startChild("specialist"');
  });
});
