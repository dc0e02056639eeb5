/**
 * The golden history of a state migration (format 2): two turns under version 1, a deploy of
 * version 2 whose hook throws (the turn fails, the state keeps its shape), then a fixed hook that
 * migrates (StateMigrated) before two more turns. It must load, fold (snapshots included),
 * re-encode and replay unchanged, forever, without calling the hook.
 * Re-record with `UPDATE_GOLDEN=1 npx vitest run test/testing/golden-migration.test.ts`.
 */
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { decodeEvent, encodeEvent, eventToJSON } from '../../src/history/codec.js';
import type { HistoryEvent } from '../../src/history/events.js';
import { defaultPayloadConverter } from '../../src/history/payload.js';
import { encodeHistoryFile, parseHistoryFile } from '../../src/history/history-file.js';
import { decodeState, encodeState } from '../../src/history/state-codec.js';
import { fold } from '../../src/replay/fold.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { createTestEngine, replayHistory } from '../../src/testing/index.js';
import { chatV1, chatV2, createChatV2 } from '../fixtures/workflows/migrating-chat.js';
import { VERSION } from './golden.js';

const PATH = join(import.meta.dirname, `../fixtures/histories-migration/migrating-chat_${VERSION}.json`);
const TASK = 'migrating-chat';

/** Bytes (Buffer or Uint8Array) compared by content. */
function plain(v: unknown): unknown {
  return JSON.parse(JSON.stringify(v, (_k, x: unknown) => (x instanceof Uint8Array ? [...x] : (x as { type?: string }).type === 'Buffer' ? (x as { data: number[] }).data : x)));
}

async function record(): Promise<HistoryEvent[]> {
  const store = new MemoryHistoryStore();
  const clock = new ManualClock();
  const v1 = await createTestEngine({ workflows: [chatV1], store, clock });
  await v1.engine.start(chatV1, 'hello', { taskId: TASK, inputId: 'in-1' });
  await v1.engine.turnResult(TASK, 'in-1');
  await v1.engine.turnResult(TASK, await v1.engine.sendInput(TASK, 'book a flight', { inputId: 'in-2' }));
  await v1.close();
  const broken = await createTestEngine({
    workflows: [
      createChatV2(() => {
        throw new Error('no migration yet');
      }),
    ],
    store,
    clock,
  });
  await broken.engine.turnResult(TASK, await broken.engine.sendInput(TASK, 'to Paris', { inputId: 'in-3' }));
  await broken.close();
  const v2 = await createTestEngine({ workflows: [chatV2], store, clock });
  await v2.engine.turnResult(TASK, await v2.engine.sendInput(TASK, 'to Paris', { inputId: 'in-4' }));
  await v2.engine.turnResult(TASK, await v2.engine.sendInput(TASK, 'in May', { inputId: 'in-5' }));
  const events = await v2.history(TASK);
  await v2.close();
  return events;
}

beforeAll(async () => {
  if (process.env['UPDATE_GOLDEN'] !== '1') return;
  await mkdir(dirname(PATH), { recursive: true });
  await writeFile(PATH, await encodeHistoryFile({ taskId: TASK, events: await record() }, 'json'));
});

describe('golden history of a state migration', () => {
  it('exists (re-record with UPDATE_GOLDEN=1)', () => {
    expect(existsSync(PATH), `${PATH} is missing`).toBe(true);
  });

  it('loads, folds (snapshot at every event) and re-encodes unchanged; the fold takes the recorded state', () => {
    const text = readFileSync(PATH);
    const doc = JSON.parse(text.toString('utf8')) as { events: Record<string, unknown>[] };
    const [task] = parseHistoryFile(text, PATH).tasks;
    const events = task!.events;
    expect(events.map((e) => eventToJSON(e))).toEqual(doc.events);
    for (const e of events) expect(eventToJSON(decodeEvent(encodeEvent(e), TASK))).toEqual(eventToJSON(e));
    for (let i = 1; i <= events.length; i++) {
      const s = fold(TASK, events.slice(0, i));
      expect(plain(decodeState(encodeState(s)))).toEqual(plain(s));
    }
    const migrations = events.filter((e) => e.type === 'StateMigrated');
    expect(migrations).toMatchObject([{ fromVersion: 1, toVersion: 2 }]);
    const failed = events.find((e) => e.type === 'TurnFailed');
    expect(failed?.type === 'TurnFailed' && failed.failure.code).toBe('TURNLOG_STATE_MIGRATION_FAILED');
    const s = fold(TASK, events);
    expect(s.stateVersion).toBe(2);
    expect(defaultPayloadConverter.fromPayload(s.state!)).toEqual({
      log: [
        { role: 'user', text: 'hello' },
        { role: 'assistant', text: 'v1: hello' },
        { role: 'user', text: 'book a flight' },
        { role: 'assistant', text: 'v1: book a flight' },
        { role: 'user', text: 'to Paris' },
        { role: 'assistant', text: 'v2: to Paris (4 before)' },
        { role: 'user', text: 'in May' },
        { role: 'assistant', text: 'v2: in May (6 before)' },
      ],
    });
  });

  it('replays: version 2 skips the older turns, the failed migration is cut off, the migrated turns are ok', async () => {
    const report = await replayHistory({ history: PATH, workflows: [createChatV2(() => { throw new Error('replay must not call the hook'); })] });
    expect(report.results.map((r) => [r.turn, r.status])).toEqual([
      [1, 'older-version'],
      [2, 'older-version'],
      [3, 'cut-off'],
      [4, 'ok'],
      [5, 'ok'],
    ]);
    // Version 1 replays its own turns.
    const [task] = parseHistoryFile(readFileSync(PATH), PATH).tasks;
    const upToV2 = task!.events.slice(0, task!.events.findIndex((e) => e.type === 'TurnStarted' && e.turn === 3));
    expect((await replayHistory({ history: upToV2, taskId: TASK, workflows: [chatV1] })).results.map((r) => r.status)).toEqual(['ok', 'ok']);
  });
});
