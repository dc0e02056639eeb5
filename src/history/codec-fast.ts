/**
 * The fast paths of the event codec, on the shared wire layer (src/internal/wire/): the events of
 * every turn encoded by hand, StepCompleted decoded by hand. Both return undefined for anything
 * else, which takes the generic path (history/codec.ts).
 */
import * as pb from '../internal/wire/fields.js';
import { Reader, Writer, readFailure, readPayload, writeFailure, writePayload } from '../internal/wire/wire.js';
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
// Fast path: StepCompleted is most of a long history. Decoding it by hand on the shared wire
// layer, straight into the TS event, doubles decode + fold throughput (bench/replay). Anything
// unusual (an unknown field, a repeated oneof, event id 0) returns undefined and takes the
// generic path. Strings read leniently (invalid UTF-8 becomes U+FFFD), as protobufjs reads them.

const STEP = pb.StepCompleted;

export function decodeStepFast(bytes: Uint8Array): HistoryEvent | undefined {
  const r = new Reader(bytes, false);
  let eventId = 0;
  let time = 0;
  let generation = 0;
  let stepStart = -1;
  let stepEnd = -1;
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
      case H.stepCompleted: {
        if (stepStart >= 0) return undefined;
        stepEnd = r.end();
        stepStart = r.pos;
        r.pos = stepEnd;
        break;
      }
      default:
        return undefined;
    }
  }
  if (stepStart < 0 || eventId === 0) return undefined;
  r.pos = stepStart;
  r.limit = stepEnd;
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
  const limited = limit ? { limit, waitedMs } : undefined;
  if (failure !== undefined) return { type: 'StepCompleted', eventId, time, generation, turn, attempt, seq, name, durationMs, failure, ...limited };
  if (result === undefined) return undefined;
  return { type: 'StepCompleted', eventId, time, generation, turn, attempt, seq, name, durationMs, result, ...limited };
}
