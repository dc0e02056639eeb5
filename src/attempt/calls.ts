/**
 * Every kind of call a handler records (step, checkpoint, takeInputs), as data: one row per kind
 * in {@link CALLS}. The context matches calls against the record with it (the one replay check,
 * shared with replay testing), the worker protocol encodes records, acks and recorded calls with
 * it, and the engine's host turns a record into the events it appends. A new kind is one row in
 * CALLS (the mapped type refuses a table that misses one), one proto message, and its event in history/.
 * The parts: calls-types.ts (the kinds' shapes and the row type), calls-at-once.ts and
 * calls-later.ts (the rows), calls-wire.ts (wire helpers the rows share); this module assembles
 * the table, looks rows up and holds the replay check.
 */
import { NonDeterminismError } from '../errors.js';
import type { RecordedCall } from '../history/state.js';
import { CHECKPOINT, PATCH, STEP, TAKE_INPUTS } from './calls-at-once.js';
import { CHILD, SLEEP, WAIT } from './calls-later.js';
import type { CallIntent, CallKind, CallSpec } from './calls-types.js';

export type {
  CallIntent,
  CallIntents,
  CallKind,
  CallRecord,
  CallRecords,
  CallReplies,
  CallReply,
  CallResults,
  CallSpec,
  ChildReply,
  EventDraft,
  MemberCodec,
  RecordEnv,
  Recorded,
  Recording,
  TakenInput,
} from './calls-types.js';
export { readTaken, writeTaken } from './calls-wire.js';

export const CALLS: { readonly [K in CallKind]: CallSpec<K> } = {
  step: STEP,
  checkpoint: CHECKPOINT,
  'take-inputs': TAKE_INPUTS,
  patch: PATCH,
  sleep: SLEEP,
  child: CHILD,
  wait: WAIT,
};

/** The row of a call, typed by its kind (TypeScript cannot narrow a table lookup by itself). */
export function callSpec<K extends CallKind>(kind: K): CallSpec<K> {
  return CALLS[kind] as unknown as CallSpec<K>;
}

/** How messages name a call or a record. */
export function describeCall(c: CallIntent | RecordedCall): string {
  return callSpec(c.kind).describe(c as never);
}

/**
 * The one replay check (live context and replay tester): undefined when `recorded` is the call
 * the handler makes at position `seq`, else the NonDeterminismError naming both.
 */
export function replayMismatch(taskId: string, turn: number, seq: number, recorded: RecordedCall, call: CallIntent): NonDeterminismError | undefined {
  if (recorded.kind === call.kind && callSpec(call.kind).matches(recorded as never, call as never)) return undefined;
  return new NonDeterminismError(taskId, turn, recorded.eventId, `${describeCall(recorded)} at position ${seq}`, describeCall(call));
}

/** A kind's row by its WorkerFrame.Record member tag. */
export const RECORD_BY_TAG: ReadonlyMap<number, CallSpec<CallKind>> = new Map(Object.values(CALLS).map((s) => [s.record.tag, s as CallSpec<CallKind>]));
/** A kind's row by its EngineFrame.Call member tag. */
export const RECORDED_BY_TAG: ReadonlyMap<number, CallSpec<CallKind>> = new Map(Object.values(CALLS).map((s) => [s.recorded.tag, s as CallSpec<CallKind>]));
/** A kind's row by its EngineFrame.Ack reply member tag. */
export const REPLY_BY_TAG: ReadonlyMap<number, CallSpec<CallKind>> = new Map(
  Object.values(CALLS).flatMap((s) => (s.reply ? [[s.reply.tag, s as CallSpec<CallKind>] as const] : [])),
);
