/**
 * The shapes of the call kinds a handler records (attempt/calls.ts): what a call is as matched
 * (intent), as recorded (record), what recording answers (reply) and what the record gives a later
 * attempt (result), one map entry per kind; and {@link CallSpec}, the row each kind has in CALLS.
 * Types only; calls.ts re-exports them.
 */
import type { PayloadField, PayloadTooLargeError } from '../errors.js';
import type { FailureInfo, HistoryEvent, Payload } from '../history/events.js';
import type { ChildOutcome, QueuedInput, RecordedCall } from '../history/state.js';
import type { Reader, Writer } from '../internal/wire/wire.js';
import type { SpecDecoder } from './turn-spec.js';

export type CallKind = RecordedCall['kind'];
export type Recorded<K extends CallKind> = Extract<RecordedCall, { kind: K }>;

/** A call the handler makes, as matched against the record before anything runs. */
export interface CallIntents {
  step: { kind: 'step'; name: string };
  checkpoint: { kind: 'checkpoint' };
  'take-inputs': { kind: 'take-inputs' };
  patch: { kind: 'patch'; patchId: string };
  sleep: { kind: 'sleep'; ms: number };
  child: { kind: 'child'; op: 'start'; childId: string; workflow: string } | { kind: 'child'; op: 'await'; childId: string };
  wait: { kind: 'wait'; name: string };
}
/** A new call as the host records it (the body of a worker's Record frame). */
export interface CallRecords {
  /** `limit`, `waitedMs`: the flow limit the step waited for (docs/time.md#flow-limits). */
  step: { kind: 'step'; seq: number; name: string; result?: Payload; failure?: FailureInfo; durationMs: number; limit?: string; waitedMs?: number };
  checkpoint: { kind: 'checkpoint'; seq: number; data: Payload };
  'take-inputs': { kind: 'take-inputs'; seq: number };
  patch: { kind: 'patch'; seq: number; patchId: string; deprecated: boolean };
  /** `fireAt` is the host's now + `durationMs` when the sleep starts. */
  sleep: { kind: 'sleep'; seq: number; durationMs: number; fireAt: number };
  /** A start carries the child's input; an await's `outcome` is filled in by the engine once the child ended. */
  child:
    | { kind: 'child'; seq: number; op: 'start'; childId: string; workflow: string; input: Payload; detached: boolean }
    | { kind: 'child'; seq: number; op: 'await'; childId: string; outcome?: ChildOutcome };
  /** The engine adds the deadline (its now + `timeoutMs`) and answers it. */
  wait: { kind: 'wait'; seq: number; name: string; timeoutMs?: number };
}
/** An input handed to the handler by takeInputs(). */
export interface TakenInput {
  inputId: string;
  input: Payload;
}
/** What recording returns once durable (an Ack's reply); `undefined` for kinds that return nothing. */
export interface CallReplies {
  step: undefined;
  checkpoint: undefined;
  'take-inputs': TakenInput[];
  patch: undefined;
  sleep: undefined;
  child: ChildReply;
  /** When the wait times out (engine clock); absent: no timeout. */
  wait: { deadline?: number };
}
/** What startChild (the child id) and an await (with the child's outcome) return. */
export interface ChildReply {
  childId: string;
  outcome?: ChildOutcome;
}
/** What a recorded call gives back to a later attempt. */
export interface CallResults {
  step: Payload;
  checkpoint: Payload;
  'take-inputs': Payload[];
  /** A marker at this position: the new branch. */
  patch: true;
  /** When the timer fires (a later attempt sleeps only what is left). */
  sleep: number;
  child: ChildReply;
  /** The wait as recorded: `ended` set once it ended (else a later attempt waits for the rest). */
  wait: Recorded<'wait'>;
}

export type CallIntent = CallIntents[CallKind];
export type CallRecord = CallRecords[CallKind];
/** An Ack's reply, for the kinds that have one. */
export type CallReply = { [K in CallKind]: CallReplies[K] extends undefined ? never : { kind: K; value: CallReplies[K] } }[CallKind];

/** A history event as the host drafts it (the appender numbers and stamps it). */
export type EventDraft = HistoryEvent extends infer E ? (E extends HistoryEvent ? Omit<E, 'eventId' | 'generation' | 'time'> : never) : never;

/** What the engine's host needs to turn a record into events. */
export interface RecordEnv {
  turn: number;
  attempt: number;
  /** `Task …, turn …` for messages. */
  at: string;
  /** The engine's configured limit for `field`, or undefined when `p` is within it. */
  oversized(field: PayloadField & ('stepResult' | 'checkpoint'), p: Payload | undefined, subject: string): PayloadTooLargeError | undefined;
  /** The task's queue as of now (read again after a re-read). */
  queue(): readonly QueuedInput[];
  /** Undoes payload codecs on what goes back to the handler. */
  decode(p: Payload): Payload;
  /** The payload of `undefined`. */
  empty(): Payload;
  /** The engine's clock. */
  now(): number;
}

/** How the engine records one call: refused outright, or events to append then a reply. */
export interface Recording<R> {
  /** Refused before anything is written; nothing can stand at its seq, so the turn fails with it. */
  refused?: PayloadTooLargeError | undefined;
  /**
   * The events, new objects per call (the appender stamps them); called again after a re-read when
   * a same-generation writer appended first. Object literals, never `{ ...draft }`: on Node 20 each
   * property added to a spread's copy makes a new map (~10 µs an event, docs/performance.md).
   */
  events(): EventDraft[];
  /** What the call returns once the events are durable; throws for a refusal recorded in their place. */
  reply(): R;
}

/** One protobuf message member: its tag, writer and reader (`bad` throws the protocol error). */
export interface MemberCodec<T, Ctx = void> {
  tag: number;
  write(w: Writer, v: T): void;
  read(r: Reader, ctx: Ctx, bad: (detail: string) => never): T;
}

/** One call kind. */
export interface CallSpec<K extends CallKind> {
  kind: K;
  /** How messages name the call: `step "fetch"`. */
  describe(c: CallIntents[K] | Recorded<K>): string;
  /** Whether the record at the call's position is this call. */
  matches(r: Recorded<K>, i: CallIntents[K]): boolean;
  /** What the recorded call gives a later attempt (throws a recorded failure). */
  result(r: Recorded<K>, taken: readonly QueuedInput[]): CallResults[K];
  /** Payload codecs undone (engine side, before the call reaches a handler). */
  decoded(c: Recorded<K>, codec: SpecDecoder): Recorded<K>;
  /** Worker → engine: the member of WorkerFrame.Record (seq is the envelope's); `noun` names it in errors. */
  record: MemberCodec<CallRecords[K], number> & { noun: string };
  /** Engine → worker: the member of EngineFrame.Ack's reply; null for kinds that return nothing. */
  reply: CallReplies[K] extends undefined ? null : MemberCodec<CallReplies[K]> & { what: string };
  /** Engine → worker: the member of EngineFrame.Call (a call recorded by an earlier attempt). */
  recorded: MemberCodec<Recorded<K>, { seq: number; eventId: number }>;
  /** Engine side: the events a record appends and what it returns. */
  append(rec: CallRecords[K], env: RecordEnv): Recording<CallReplies[K]>;
}
