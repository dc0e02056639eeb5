import { describe, expect, it } from 'vitest';
import { decodeEvent, encodeEvent } from '../../src/history/codec.js';
import { HISTORY_FORMAT_VERSION, type HistoryEvent } from '../../src/history/events.js';
import {
  HISTORY_FILE_MAGIC,
  encodeHistoryFile,
  parseHistoryFile,
  readHistoryFile,
  writeHistoryFile,
  type HistoryFileFormat,
} from '../../src/history/history-file.js';
import { isTurnlogError } from '../../src/errors.js';
import { longHistory, oneShotHistory, richHistory } from '../cli/helpers.js';

const FORMATS: HistoryFileFormat[] = ['json', 'binary'];
const enc = new TextEncoder();
const dec = new TextDecoder();

// What a store hands back: events after one encode/decode from a Buffer (Buffers for bytes).
function stored(taskId: string, events: HistoryEvent[]): HistoryEvent[] {
  return events.map((e) => decodeEvent(Buffer.from(encodeEvent(e)), taskId));
}

function expectSameEvents(actual: HistoryEvent[], expected: HistoryEvent[]): void {
  expect(actual.length).toBe(expected.length);
  expect(actual.map((e) => Buffer.from(encodeEvent(e)))).toEqual(expected.map((e) => Buffer.from(encodeEvent(e))));
  expect(actual).toEqual(expected);
}

function fileErr(fn: () => unknown): Error {
  try {
    fn();
  } catch (err) {
    expect(isTurnlogError(err, 'TURNLOG_HISTORY_FILE')).toBe(true);
    return err as Error;
  }
  throw new Error('expected a TURNLOG_HISTORY_FILE error');
}

describe('history files', () => {
  for (const format of FORMATS) {
    it(`round-trips one task through ${format} with exact events`, async () => {
      const events = stored('t-rich', richHistory());
      const bytes = await encodeHistoryFile({ taskId: 't-rich', events }, format);
      const file = await readHistoryFile(bytes, 'rich.' + format);
      expect(file).toMatchObject({ format, formatVersion: HISTORY_FORMAT_VERSION, multi: false });
      expect(file.tasks.map((t) => t.taskId)).toEqual(['t-rich']);
      expectSameEvents(file.tasks[0]!.events, events);
    });

    it(`round-trips several tasks through ${format} (export --all)`, async () => {
      const tasks = [
        { taskId: 'a', events: stored('a', richHistory()) },
        { taskId: 'b', events: stored('b', oneShotHistory('w', 'failed')) },
        { taskId: 'c', events: stored('c', oneShotHistory('w', 'cancelled')) },
      ];
      const bytes = await encodeHistoryFile(tasks, format);
      const file = parseHistoryFile(bytes, 'all.' + format);
      expect(file.multi).toBe(true);
      expect(file.tasks.map((t) => t.taskId)).toEqual(['a', 'b', 'c']);
      for (const [i, t] of tasks.entries()) expectSameEvents(file.tasks[i]!.events, t.events);
    });

    it(`streams ${format} from async sources in chunks and reports progress`, async () => {
      const events = stored('long', longHistory(5000));
      async function* gen(): AsyncGenerator<HistoryEvent> {
        yield* events;
      }
      const chunks: Uint8Array[] = [];
      const progress: number[] = [];
      const res = await writeHistoryFile(
        { write: async (c) => void chunks.push(c) },
        { taskId: 'long', eventCount: events.length, events: gen() },
        { format, onProgress: (n) => progress.push(n) },
      );
      expect(res).toMatchObject({ tasks: 1, events: 5000 });
      expect(res.bytes).toBe(chunks.reduce((s, c) => s + c.length, 0));
      expect(progress.at(-1)).toBe(5000);
      async function* source(): AsyncGenerator<Uint8Array> {
        yield* chunks;
      }
      const file = await readHistoryFile(source(), 'long');
      expectSameEvents(file.tasks[0]!.events, events);
    });
  }

  it('writes JSON one event per line with the documented envelope', async () => {
    const events = stored('t', oneShotHistory());
    const text = dec.decode(await encodeHistoryFile({ taskId: 't', events }, 'json'));
    const doc = JSON.parse(text);
    expect(doc.format).toBe(HISTORY_FILE_MAGIC);
    expect(doc.formatVersion).toBe(HISTORY_FORMAT_VERSION);
    expect(doc.taskId).toBe('t');
    expect(doc.events).toHaveLength(events.length);
    expect(doc.events[0]).toMatchObject({ eventId: 1, generation: 1, taskCreated: { workflow: 'summarize', kind: 'WORKFLOW_KIND_ONE_SHOT' } });
    expect(text.split('\n')).toHaveLength(events.length + 3);
  });

  it('detects a binary file whose header length byte is `{`', async () => {
    // A task id that makes the header exactly 0x7b bytes long: content sniffing must not mistake it for JSON.
    const id = 'x'.repeat(0x7b - (2 + HISTORY_FILE_MAGIC.length) - 2 - 2 - 2);
    const events = stored(id, oneShotHistory());
    const bytes = await encodeHistoryFile({ taskId: id, events }, 'binary');
    expect(bytes[0]).toBe(0x7b);
    expect(parseHistoryFile(bytes, 'f').tasks[0]!.taskId).toBe(id);
  });

  it('rejects empty, garbage and foreign files naming the file', () => {
    expect(fileErr(() => parseHistoryFile(new Uint8Array(), 'empty.json')).message).toMatch(/empty\.json: it is empty/);
    expect(fileErr(() => parseHistoryFile(enc.encode('hello'), 'x.txt')).message).toMatch(/x\.txt: it is neither/);
    expect(fileErr(() => parseHistoryFile(enc.encode('{"format":"other"}'), 'o.json')).message).toMatch(
      /o\.json: it is JSON but not a turnlog history/,
    );
    expect(fileErr(() => parseHistoryFile(enc.encode('{"format":'), 'cut.json')).message).toMatch(/cut\.json: it is not valid UTF-8 JSON/);
  });

  it('rejects a newer format version with an upgrade hint', async () => {
    const events = stored('t', oneShotHistory());
    const json = JSON.parse(dec.decode(await encodeHistoryFile({ taskId: 't', events }, 'json')));
    json.formatVersion = 99;
    const err = fileErr(() => parseHistoryFile(enc.encode(JSON.stringify(json)), 'new.json'));
    expect(err.message).toMatch(/new\.json: it has history format version 99, newer than this turnlog reads \(up to 2\)\. Upgrade turnlog/);
  });

  it('rejects a newer binary header version', async () => {
    const bytes = await encodeHistoryFile({ taskId: 't', events: stored('t', oneShotHistory()) }, 'binary');
    // Header: len, 0x0a len "turnlog-history", 0x10 version.
    const at = 1 + 2 + HISTORY_FILE_MAGIC.length;
    expect(bytes[at]).toBe(0x10);
    const copy = bytes.slice();
    copy[at + 1] = 7;
    expect(fileErr(() => parseHistoryFile(copy, 'new.bin')).message).toMatch(/format version 7/);
  });

  it('rejects a truncated binary file and trailing garbage', async () => {
    const bytes = await encodeHistoryFile({ taskId: 't', events: stored('t', richHistory()) }, 'binary');
    expect(fileErr(() => parseHistoryFile(bytes.subarray(0, bytes.length - 5), 'cut.bin')).message).toMatch(
      /cut\.bin: it ends inside event \d+ of task t .*truncated/,
    );
    const extra = new Uint8Array([...bytes, 1, 2, 3]);
    expect(fileErr(() => parseHistoryFile(extra, 'extra.bin')).message).toMatch(/extra\.bin: byte \d+ should start a task header/);
  });

  it('rejects gaps in event ids, duplicated tasks and undecodable events', async () => {
    const events = stored('t', oneShotHistory());
    const json = JSON.parse(dec.decode(await encodeHistoryFile({ taskId: 't', events }, 'json')));
    json.events.splice(2, 1);
    expect(fileErr(() => parseHistoryFile(enc.encode(JSON.stringify(json)), 'gap.json')).message).toMatch(
      /task t: event 3 has event id 4; event ids must be dense from 1/,
    );
    const dup = await encodeHistoryFile([{ taskId: 'a', events }, { taskId: 'a', events }], 'json');
    expect(fileErr(() => parseHistoryFile(dup, 'dup.json')).message).toMatch(/task a appears twice/);
    const bad = JSON.parse(dec.decode(await encodeHistoryFile({ taskId: 't', events }, 'json')));
    bad.events[1] = { eventId: 2, timeMs: 1, generation: 1, somethingNew: {} };
    expect(fileErr(() => parseHistoryFile(enc.encode(JSON.stringify(bad)), 'newer.json')).message).toMatch(
      /task t, event 2 has a type this turnlog does not know/,
    );
  });

  it('refuses a JSON file whose ids spell a lone surrogate, and reads free text back well-formed', async () => {
    const events = stored('t', oneShotHistory());
    const json = JSON.parse(dec.decode(await encodeHistoryFile({ taskId: 't', events }, 'json')));
    const queued = json.events.findIndex((e: Record<string, unknown>) => 'inputQueued' in e);
    const badId = structuredClone(json);
    badId.events[queued].inputQueued.inputId = 'in-\ud83d';
    expect(fileErr(() => parseHistoryFile(enc.encode(JSON.stringify(badId)), 'id.json')).message).toMatch(
      /id\.json: task t, event \d+ cannot be decoded .*inputId "in-\\ud83d" is not a well-formed string/,
    );
    const badTask = { ...structuredClone(json), taskId: 'chat-\udc00' };
    expect(fileErr(() => parseHistoryFile(enc.encode(JSON.stringify(badTask)), 'task.json')).message).toMatch(/task id "chat-\\udc00" is not a well-formed/);
    // A free-text field that spells one imports, and is stored (and exported again) well-formed.
    const text = structuredClone(json);
    text.events.push({ eventId: events.length + 1, timeMs: 1, generation: 1, cancelRequested: { scope: 'CANCEL_SCOPE_TASK', reason: 'Sure \ud83d' } });
    const parsed = parseHistoryFile(enc.encode(JSON.stringify(text)), 'text.json');
    const last = parsed.tasks[0]!.events.at(-1)!;
    expect(decodeEvent(encodeEvent(last), 't')).toMatchObject({ type: 'CancelRequested', reason: 'Sure \uFFFD' });
  });

  it('fails an export whose source yields fewer events than declared', async () => {
    await expect(
      writeHistoryFile({ write: () => {} }, { taskId: 't', eventCount: 5, events: stored('t', oneShotHistory()).slice(0, 2) }, { format: 'binary' }),
    ).rejects.toThrow(/declared 5 events but 2 were written/);
  });
});
