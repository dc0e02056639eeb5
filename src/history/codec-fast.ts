/**
 * The fast paths of the event codec, on the shared wire layer (src/internal/wire/): the events of
 * every turn encoded by hand, StepCompleted decoded by hand. Both return undefined for anything
 * else, which takes the generic path (history/codec.ts).
 */
import * as pb from '../internal/wire/fields.js';
import { EMPTY_BYTES, LEN, Reader, Writer, readFailure, readPayload, writeFailure, writePayload } from '../internal/wire/wire.js';
import type { FailureInfo, HistoryEvent, Payload } from './events.js';
import { EMPTY_PAYLOAD, ENTRY_MODES, EXECUTORS, OUTCOMES, toNum } from './codec-messages.js';

// ---------------------------------------------------------------------------------------------
// Encode fast path: the events of every turn (InputQueued, LeaseClaimed, TurnStarted, a
// StepCompleted, TurnCompleted, TurnFailed, TaskCompleted, TimeoutCancelRequested) are written
// by hand on the shared wire layer (src/internal/wire/), field by field in field-number order
// with the generated tags, straight from the TS event: no intermediate object, no per-call
// Writer. The bytes are identical to the generated encoder's (test/history/codec-encode.test.ts
// compares both on every event type), which means following its proto3 rules exactly:
// - uint32/enum: written unless null/undefined or 0; string: unless "" ; bool: unless false;
// - double: unless 0 (`Object.is`, so -0 and NaN are written);
// - a message field (payload, oneof member): written whenever not null/undefined, even empty;
// - map<string, bytes>: one entry per Object.keys() key, key and value always written;
// - repeated string: every element, nothing for an empty array.
// Everything else (rare events) takes the generic path.

const H = pb.HistoryEvent;

/**
 * One Writer reused by every encode. Encoding is synchronous, but a payload getter or Proxy
 * could call encodeEvent from inside another encode: `encoding` sends such a nested call to the
 * generated encoder, so it never resets the outer call's writer (test: review2).
 */
let shared: Writer | null = null;
export let encoding = false;
/** A Writer that grew past this is dropped after use, so one huge event is not kept alive. */
const SHARED_MAX = 64 * 1024;

function sharedWriter(): Writer {
  const w = shared ?? (shared = new Writer(1024));
  // A throw in the middle of an earlier encode (a bad enum, a missing payload) left state behind.
  w.reset();
  return w;
}

/** The bytes out of the shared writer, in a Buffer of their size (as protobufjs' `finish()` under Node). */
function finishShared(w: Writer, delimited: boolean): Uint8Array {
  const out = w.finish(delimited);
  if (w.buf.length > SHARED_MAX) shared = null;
  return out;
}

/** HistoryEvent fields 1–3, then opens the oneof member `tag`; returns the mark to close it. */
function openEvent(w: Writer, e: HistoryEvent, tag: number): number {
  w.uint32Field(H.eventId, e.eventId);
  w.doubleField(H.timeMs, e.time);
  w.uint32Field(H.generation, e.generation);
  w.uint32(tag);
  return w.fork();
}

/** Writes a hot event into `w` and returns true, or returns false (nothing written) for the generic path. */
function writeEventFast(w: Writer, e: HistoryEvent): boolean {
  let at: number;
  switch (e.type) {
    case 'StepCompleted': {
      const F = pb.StepCompleted;
      at = openEvent(w, e, H.stepCompleted);
      w.uint32Field(F.turn, e.turn);
      w.uint32Field(F.attempt, e.attempt);
      w.uint32Field(F.seq, e.seq);
      w.stringField(F.name, e.name);
      if (e.failure) writeFailure(w, F.failure, e.failure);
      else writePayload(w, F.result, e.result ?? EMPTY_PAYLOAD);
      w.doubleField(F.durationMs, e.durationMs);
      if (e.limit !== undefined) {
        w.stringField(F.limit, e.limit);
        w.doubleField(F.waitedMs, e.waitedMs ?? 0);
      }
      break;
    }
    case 'TurnStarted': {
      const F = pb.TurnStarted;
      const entryMode = toNum(ENTRY_MODES, e.entryMode);
      const executor = toNum(EXECUTORS, e.executor);
      at = openEvent(w, e, H.turnStarted);
      w.uint32Field(F.turn, e.turn);
      w.uint32Field(F.attempt, e.attempt);
      w.stringsField(F.inputIds, e.inputIds);
      w.int32Field(F.entryMode, entryMode);
      w.boolField(F.steered, e.steered);
      w.stringField(F.owner, e.owner);
      w.stringField(F.instance, e.instance);
      w.int32Field(F.executor, executor);
      w.uint32Field(F.pid, e.pid);
      w.doubleField(F.turnStartedAtMs, e.turnStartedAt);
      w.doubleField(F.deadlineMs, e.deadline);
      w.uint32Field(F.workflowVersion, e.workflowVersion ?? 0);
      break;
    }
    case 'InputQueued': {
      const input = e.input;
      if (input == null) return false;
      at = openEvent(w, e, H.inputQueued);
      w.stringField(pb.InputQueued.inputId, e.inputId);
      writePayload(w, pb.InputQueued.input, input);
      w.boolField(pb.InputQueued.steering, e.steering);
      w.doubleField(pb.InputQueued.deliverAtMs, e.deliverAt);
      w.stringField(pb.InputQueued.traceparent, e.trace?.traceparent);
      w.stringField(pb.InputQueued.tracestate, e.trace?.tracestate);
      break;
    }
    case 'TurnCompleted':
      if (e.stateDelta) return false;
      at = openEvent(w, e, H.turnCompleted);
      w.uint32Field(pb.TurnCompleted.turn, e.turn);
      if (e.output) writePayload(w, pb.TurnCompleted.output, e.output);
      if (e.state) writePayload(w, pb.TurnCompleted.state, e.state);
      break;
    case 'TurnFailed':
      at = openEvent(w, e, H.turnFailed);
      w.uint32Field(pb.TurnFailed.turn, e.turn);
      writeFailure(w, pb.TurnFailed.failure, e.failure);
      break;
    case 'LeaseClaimed': {
      const F = pb.LeaseClaimed;
      at = openEvent(w, e, H.leaseClaimed);
      w.stringField(F.owner, e.owner);
      w.stringField(F.instance, e.instance);
      w.uint32Field(F.generation, e.generation);
      w.uint32Field(F.previousGeneration, e.previousGeneration);
      w.stringField(F.reason, e.reason);
      w.doubleField(F.expiresAtMs, e.expiresAt);
      break;
    }
    case 'TaskCompleted': {
      const outcome = toNum(OUTCOMES, e.outcome);
      at = openEvent(w, e, H.taskCompleted);
      w.int32Field(pb.TaskCompleted.outcome, outcome);
      break;
    }
    case 'TimeoutCancelRequested':
      at = openEvent(w, e, H.timeoutCancelRequested);
      w.uint32Field(pb.TimeoutCancelRequested.turn, e.turn);
      w.doubleField(pb.TimeoutCancelRequested.atMs, e.at);
      w.doubleField(pb.TimeoutCancelRequested.graceUntilMs, e.graceUntil);
      break;
    default:
      return false;
  }
  w.ldelim(at);
  return true;
}

/** Encodes through the fast path into the shared writer, or returns undefined for the generic path. */
export function encodeFast(e: HistoryEvent, delimited: boolean): Uint8Array | undefined {
  encoding = true;
  try {
    const w = sharedWriter();
    if (writeEventFast(w, e)) return finishShared(w, delimited);
  } finally {
    encoding = false;
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// Decode fast paths. The HistoryEvent envelope (event id, time, generation and which oneof
// member) is read by hand for every event, on one reused Reader: the generated decoder of the
// whole HistoryEvent sets its oneof through a setter that deletes each of the 30 other members
// from the message (17% of decode + fold's samples, for the one event in six that is not a
// step). StepCompleted, most of a long history, is then decoded by hand straight into the TS
// event; history/codec.ts decodes the other members with their own generated decoder. Anything
// unusual (an unknown field, two members, no member, event id 0) returns undefined and takes the
// generic path. Strings read leniently (invalid UTF-8 becomes U+FFFD), as protobufjs reads them.

/** What {@link readEnvelope} read: one object, overwritten by the next call (copy what you keep). */
export interface Envelope {
  eventId: number;
  time: number;
  generation: number;
  /** The oneof member's tag (field number << 3 | 2). */
  tag: number;
  /** The member's bytes: [start, end) of the frame. */
  start: number;
  end: number;
}

const envelope: Envelope = { eventId: 0, time: 0, generation: 0, tag: 0, start: 0, end: 0 };
/** The one Reader of the decode fast paths (decoding is synchronous and calls nothing outside). */
const reader = new Reader(EMPTY_BYTES, false);

/** Reads `bytes`' envelope, or returns undefined for the generic path. */
export function readEnvelope(bytes: Uint8Array): Envelope | undefined {
  const r = reader;
  r.reset(bytes);
  let eventId = 0;
  let time = 0;
  let generation = 0;
  let tag = 0;
  let start = -1;
  let end = -1;
  while (r.more()) {
    const t = r.uint32();
    switch (t) {
      case H.eventId:
        eventId = r.uint32();
        break;
      case H.timeMs:
        time = r.double();
        break;
      case H.generation:
        generation = r.uint32();
        break;
      default:
        // A length-delimited field past the envelope's three: the member (codec.ts knows which).
        if ((t & 7) !== LEN || t >>> 3 <= 3 || start >= 0) return undefined;
        tag = t;
        end = r.end();
        start = r.pos;
        r.pos = end;
    }
  }
  if (start < 0 || eventId === 0) return undefined;
  const env = envelope;
  env.eventId = eventId;
  env.time = time;
  env.generation = generation;
  env.tag = tag;
  env.start = start;
  env.end = end;
  return env;
}

const STEP = pb.StepCompleted;

/** The StepCompleted of the envelope {@link readEnvelope} just read, or undefined for the generic path. */
export function decodeStepFast(env: Envelope): HistoryEvent | undefined {
  const r = reader;
  r.pos = env.start;
  r.limit = env.end;
  let turn = 0;
  let attempt = 0;
  let seq = 0;
  let name = '';
  let durationMs = 0;
  let result: Payload | undefined;
  let failure: FailureInfo | undefined;
  let limit = '';
  let waitedMs = 0;
  while (r.more()) {
    const t = r.uint32();
    switch (t) {
      case STEP.turn:
        turn = r.uint32();
        break;
      case STEP.attempt:
        attempt = r.uint32();
        break;
      case STEP.seq:
        seq = r.uint32();
        break;
      case STEP.name:
        name = r.string();
        break;
      case STEP.result:
        if (result !== undefined || failure !== undefined) return undefined;
        result = r.nested(readPayload);
        break;
      case STEP.failure:
        if (result !== undefined || failure !== undefined) return undefined;
        failure = r.nested(readFailure);
        break;
      case STEP.durationMs:
        durationMs = r.double();
        break;
      case STEP.limit:
        limit = r.string();
        break;
      case STEP.waitedMs:
        waitedMs = r.double();
        break;
      default:
        return undefined;
    }
  }
  const { eventId, time, generation } = env;
  let e: HistoryEvent & { type: 'StepCompleted' };
  if (failure !== undefined) e = { type: 'StepCompleted', eventId, time, generation, turn, attempt, seq, name, durationMs, failure };
  else if (result !== undefined) e = { type: 'StepCompleted', eventId, time, generation, turn, attempt, seq, name, durationMs, result };
  else return undefined;
  if (limit) {
    e.limit = limit;
    e.waitedMs = waitedMs;
  }
  return e;
}
