/**
 * The one place that maps history events between the public TypeScript types and protobuf.
 * Encoding builds plain objects that protobufjs encodes directly (no `fromObject` pass);
 * decoding reads the envelope by hand (codec-fast.ts), a step by hand too, any other member with
 * its own generated decoder, and builds the TS event by hand, which keeps decode + fold above
 * 500,000 events/s (bench/replay).
 *
 * The mapping of each event lives with its family: `codec-task.ts` (task, inputs, signals,
 * leases), `codec-turn.ts` (turns and attempts), `codec-calls.ts` (recorded calls),
 * `codec-admin.ts` (operator actions, compaction, migrations); the messages they share
 * (payloads, failures, policies, deltas, enum tables) are in `codec-messages.ts` and the
 * hand-written fast paths of the hot events in `codec-fast.ts`.
 */
import { HistoryCorruptError, HistoryFormatError } from '../errors.js';
import { lookupType, protobuf } from '../internal/proto/root.js';
import { setOwn } from '../internal/wire/wire.js';
import { ADMIN_FROM_PROTO, ADMIN_TO_PROTO } from './codec-admin.js';
import { CALL_FROM_PROTO, CALL_TO_PROTO } from './codec-calls.js';
import { decodeStepFast, encodeFast, encoding, readEnvelope } from './codec-fast.js';
import type { FromProto, FromProtoTable, Origin, ToProtoTable } from './codec-messages.js';
import { TASK_FROM_PROTO, TASK_TO_PROTO } from './codec-task.js';
import { TURN_FROM_PROTO, TURN_TO_PROTO } from './codec-turn.js';
import { HISTORY_FORMAT_VERSION, type EventType, type HistoryEvent } from './events.js';
import { wellFormedEvent } from './well-formed.js';

export {
  decodeFailure,
  decodePayload,
  decodePolicy,
  encodeFailure,
  encodePayload,
  encodePolicy,
  failureFromProto,
  failureToProto,
  traceOf,
} from './codec-messages.js';
export { setOwn };

const HistoryEventType = lookupType('turnlog.v1.HistoryEvent');

/** Every event type's encode entry: a family table that misses a type fails to compile here. */
const TO_PROTO: ToProtoTable<EventType> = { ...TASK_TO_PROTO, ...TURN_TO_PROTO, ...CALL_TO_PROTO, ...ADMIN_TO_PROTO };
/** Every oneof member's decode entry, likewise. */
const FROM_PROTO: FromProtoTable<EventType> = { ...TASK_FROM_PROTO, ...TURN_FROM_PROTO, ...CALL_FROM_PROTO, ...ADMIN_FROM_PROTO };

type AnyToProto = (e: HistoryEvent, eventId: number, timeMs: number, generation: number) => Record<string, unknown>;

/** Maps a TS event to the plain object protobufjs encodes (its family's entry). */
function eventToProto(e: HistoryEvent): Record<string, unknown> {
  return (TO_PROTO[e.type] as AnyToProto)(e, e.eventId, e.time, e.generation);
}

/**
 * Encodes one event to protobuf bytes. Free text is made well-formed first and an ill-formed id
 * is refused (TURNLOG_INVALID_ARGUMENT): nothing is ever encoded that cannot be decoded.
 */
export function encodeEvent(event: HistoryEvent): Uint8Array {
  if (encoding) return encodeEventGeneric(event);
  const e = wellFormedEvent(event);
  return encodeFast(e, false) ?? HistoryEventType.encode(eventToProto(e) as never).finish();
}

/**
 * The generated protobufjs encoder alone, without the fast path: the reference the fast path
 * must match byte for byte (tests, benchmarks). Not exported from the package.
 */
export function encodeEventGeneric(e: HistoryEvent): Uint8Array {
  return HistoryEventType.encode(eventToProto(wellFormedEvent(e)) as never).finish();
}

// The decoded message: protobufjs sets the oneof's virtual `attributes` field to the member name.
type EventMsg = Record<string, any> & { eventId: number; timeMs: number; generation: number; attributes?: string };

/** Maps a decoded protobuf message to the TS event (its family's entry). */
function eventFromProto(m: EventMsg, taskId: string): HistoryEvent {
  const eventId = m.eventId;
  const at: Origin = { taskId, eventId };
  const kind = m.attributes;
  const fromProto: FromProto | undefined =
    kind !== undefined && Object.hasOwn(FROM_PROTO, kind) ? FROM_PROTO[kind as keyof typeof FROM_PROTO] : undefined;
  // An event type added by a newer turnlog: proto3 keeps it as an unknown field.
  if (fromProto === undefined) throw new HistoryFormatError(taskId, eventId, HISTORY_FORMAT_VERSION, 'unknown event type');
  return fromProto(m[kind!], eventId, m.timeMs, m.generation, at);
}

/** A oneof member's generated decoder and its family's entry, by the member's tag (codec-fast.ts reads the envelope). */
interface Member {
  type: protobuf.Type;
  fromProto: FromProto;
}
const MEMBERS = new Map<number, Member>();
for (const f of HistoryEventType.oneofs['attributes']!.fieldsArray) {
  const fromProto = Object.hasOwn(FROM_PROTO, f.name) ? FROM_PROTO[f.name as keyof typeof FROM_PROTO] : undefined;
  if (fromProto !== undefined && f.resolvedType instanceof protobuf.Type) MEMBERS.set((f.id << 3) | 2, { type: f.resolvedType, fromProto });
}
const STEP_TAG = (HistoryEventType.fields['stepCompleted']!.id << 3) | 2;

/**
 * Decodes one stored event. `key` names the record in errors; `taskId` names the task.
 * Truncated or garbled bytes give HistoryCorruptError; a well-formed event of a type
 * this build does not know gives HistoryFormatError.
 */
export function decodeEvent(bytes: Uint8Array, taskId: string, key?: string): HistoryEvent {
  let m: EventMsg | undefined;
  let member: Member | undefined;
  let msg: unknown;
  let eventId = 0;
  let time = 0;
  let generation = 0;
  try {
    const env = readEnvelope(bytes);
    if (env !== undefined) {
      if (env.tag === STEP_TAG) {
        const fast = decodeStepFast(env);
        if (fast !== undefined) return fast;
      } else if ((member = MEMBERS.get(env.tag)) !== undefined) {
        ({ eventId, time, generation } = env);
        // The member's own generated decoder, on the reader protobufjs makes for the whole event.
        const r = protobuf.Reader.create(bytes);
        r.pos = env.start;
        msg = member.type.decode(r, env.end - env.start);
      }
    }
    if (msg === undefined) m = HistoryEventType.decode(bytes) as unknown as EventMsg;
  } catch (err) {
    throw new HistoryCorruptError(key ?? `${taskId}/?`, (err as Error).message, { cause: err });
  }
  if (m === undefined) return member!.fromProto(msg, eventId, time, generation, { taskId, eventId });
  if (m.eventId === 0) throw new HistoryCorruptError(key ?? `${taskId}/?`, 'event id 0');
  return eventFromProto(m, taskId);
}

/** Length-delimited encoding (history files, the worker protocol's framing). */
export function encodeEventDelimited(event: HistoryEvent): Uint8Array {
  if (encoding) return encodeEventDelimitedGeneric(event);
  const e = wellFormedEvent(event);
  return encodeFast(e, true) ?? HistoryEventType.encodeDelimited(eventToProto(e) as never).finish();
}

/** {@link encodeEventDelimited} through the generated encoder alone (tests). */
export function encodeEventDelimitedGeneric(e: HistoryEvent): Uint8Array {
  return HistoryEventType.encodeDelimited(eventToProto(wellFormedEvent(e)) as never).finish();
}

/** The proto3 JSON mapping of an event (history files in JSON, `turnlog events --json`). */
export function eventToJSON(e: HistoryEvent): Record<string, unknown> {
  const msg = HistoryEventType.fromObject(eventToProto(wellFormedEvent(e)));
  return HistoryEventType.toObject(msg, { enums: String, bytes: String, defaults: false, oneofs: false }) as Record<
    string,
    unknown
  >;
}

/** Inverse of {@link eventToJSON}. */
export function eventFromJSON(json: Record<string, unknown>, taskId: string): HistoryEvent {
  let msg: EventMsg;
  try {
    msg = HistoryEventType.toObject(HistoryEventType.fromObject(json), {
      enums: Number,
      defaults: true,
      oneofs: true,
      arrays: true,
    }) as EventMsg;
  } catch (err) {
    throw new HistoryCorruptError(`${taskId}/json`, (err as Error).message, { cause: err });
  }
  // toObject with defaults fills every oneof member with null defaults; keep only the set one.
  return eventFromProto(msg, taskId);
}
