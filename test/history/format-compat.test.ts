/**
 * History format compatibility: the golden histories in test/fixtures/histories were written in
 * format 1 (full states). This build writes format 2 (state deltas) and must still load, fold
 * and re-encode them unchanged; test/testing/golden.test.ts replays them. Do not re-record them
 * (UPDATE_GOLDEN): add format-2 goldens beside them instead.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { decodeEvent, encodeEvent, eventToJSON } from '../../src/history/codec.js';
import { HISTORY_FORMAT_VERSION } from '../../src/history/events.js';
import { parseHistoryFile } from '../../src/history/history-file.js';
import { fold, withFullStates } from '../../src/replay/fold.js';
import { GOLDEN_DIR } from '../testing/golden.js';

const files = readdirSync(GOLDEN_DIR, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.json'));

describe('format-1 histories under format 2', () => {
  it('this build writes format 2 and the golden files are format 1', () => {
    expect(HISTORY_FORMAT_VERSION).toBe(2);
    expect(files.length).toBeGreaterThanOrEqual(4);
  });

  it.each(files)('%s loads, folds and re-encodes unchanged', (file) => {
    const text = readFileSync(join(GOLDEN_DIR, file));
    const doc = JSON.parse(text.toString('utf8')) as { formatVersion: number; events: Record<string, unknown>[] };
    expect(doc.formatVersion).toBe(1);
    const [task] = parseHistoryFile(text, file).tasks;
    const events = task!.events;
    const created = events[0]!;
    expect(created.type === 'TaskCreated' && created.formatVersion).toBe(1);
    // Full states only, and they are what fold keeps.
    expect(events.some((e) => (e.type === 'TurnCompleted' || e.type === 'TurnSuspended') && e.stateDelta !== undefined)).toBe(false);
    expect(withFullStates(task!.taskId, events)).toEqual(events);
    expect(events.map((e) => eventToJSON(e))).toEqual(doc.events);
    for (const e of events) expect(eventToJSON(decodeEvent(encodeEvent(e), task!.taskId))).toEqual(eventToJSON(e));
    const s = fold(task!.taskId, events);
    expect(s.formatVersion).toBe(1);
    expect(s.lastEventId).toBe(events.length);
    const lastState = events.filter((e) => e.type === 'TurnCompleted' || e.type === 'TurnSuspended').map((e) => e.state).filter((x) => x !== undefined).at(-1);
    if (lastState) expect(Buffer.from(s.state!.data).equals(Buffer.from(lastState.data))).toBe(true);
  });
});
