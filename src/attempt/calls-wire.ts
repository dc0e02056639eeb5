/**
 * The wire helpers the call kinds' rows share (calls-at-once.ts, calls-later.ts): a message's
 * fields read by tag, an optional double, and a taken input as the worker protocol carries it
 * (in an Ack's reply and among a Run's taken inputs). calls.ts re-exports writeTaken and readTaken.
 */
import type { Payload } from '../history/events.js';
import type { QueuedInput } from '../history/state.js';
import * as pb from '../internal/wire/fields.js';
import { EMPTY_BYTES as EMPTY, Reader, Writer, readPayload, writePayload } from '../internal/wire/wire.js';

export const optDouble = (w: Writer, tag: number, v: number | undefined): void => {
  if (v !== undefined) {
    w.uint32(tag);
    w.double(v);
  }
};
const TAKEN = pb.EngineFrame_TakenInput;

/** Reads a message's fields; `on` returns false for a tag it does not know (skipped). */
export function fields(r: Reader, on: (tag: number) => boolean): void {
  while (r.more()) {
    const t = r.uint32();
    if (!on(t)) r.skip(t & 7);
  }
}

// A taken input: in an Ack's reply, and among a Run's taken inputs (with its queue fields).
export function writeTaken(w: Writer, tag: number, q: { inputId: string; input: Payload; steering?: boolean; eventId?: number; time?: number }): void {
  w.uint32(tag);
  const at = w.fork();
  w.stringField(TAKEN.inputId, q.inputId);
  writePayload(w, TAKEN.input, q.input);
  w.boolField(TAKEN.steering, q.steering);
  w.uint32Field(TAKEN.eventId, q.eventId);
  w.doubleField(TAKEN.timeMs, q.time);
  w.ldelim(at);
}

export function readTaken(r: Reader): QueuedInput {
  const q: QueuedInput = { inputId: '', input: { metadata: {}, data: EMPTY }, steering: false, eventId: 0, time: 0 };
  fields(r, (t) => {
    if (t === TAKEN.inputId) q.inputId = r.string();
    else if (t === TAKEN.input) q.input = r.nested(readPayload);
    else if (t === TAKEN.steering) q.steering = r.bool();
    else if (t === TAKEN.eventId) q.eventId = r.uint32();
    else if (t === TAKEN.timeMs) q.time = r.double();
    else return false;
    return true;
  });
  return q;
}
