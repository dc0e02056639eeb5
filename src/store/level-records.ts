/**
 * The LevelDB store's records read back (level-store.ts and its parts): an event checked to hold
 * the id its key names, a summary, a JSON record (lease, corrupt mark, format meta). Each failure
 * is a HistoryCorruptError naming the key. Pure: no database.
 */
import { HistoryCorruptError } from '../errors.js';
import { decodeEvent } from '../history/codec.js';
import type { HistoryEvent, TaskSummary } from '../history/events.js';
import { describeKey, eventIdOfKey } from './keys.js';
import { decodeSummary } from './records.js';

/** Decodes an event record of `taskId` (an event key: the name is built without decoding the key). */
export function decodeEventRecord(taskId: string, key: Buffer, value: Buffer): HistoryEvent {
  const id = eventIdOfKey(key);
  const name = `events/${taskId}/${id}`;
  // A plain Uint8Array view makes protobufjs return Uint8Array bytes fields, as the types say.
  const e = decodeEvent(new Uint8Array(value.buffer, value.byteOffset, value.byteLength), taskId, name);
  if (e.eventId !== id) throw new HistoryCorruptError(name, `holds event ${e.eventId}`);
  return e;
}

export function decodeSummaryRecord(taskId: string, key: Buffer, raw: Buffer): TaskSummary {
  try {
    return decodeSummary(taskId, raw);
  } catch (err) {
    throw new HistoryCorruptError(describeKey(key), (err as Error).message, { cause: err });
  }
}

export function parseJson(raw: Buffer, key: Buffer): unknown {
  try {
    const v: unknown = JSON.parse(raw.toString('utf8'));
    if (typeof v !== 'object' || v === null) throw new Error('not a JSON object');
    return v;
  } catch (err) {
    throw new HistoryCorruptError(describeKey(key), (err as Error).message, { cause: err });
  }
}
