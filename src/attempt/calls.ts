/**
 * Every kind of call a handler records (step, checkpoint, takeInputs), as data: one row per kind
 * in {@link CALLS}. The context matches calls against the record with it (the one replay check,
 * shared with replay testing), the worker protocol encodes records, acks and recorded calls with
 * it, and the engine's host turns a record into the events it appends. A new kind is one row here
 * (the mapped type refuses a table that misses one), one proto message, and its event in history/.
 */
import { NonDeterminismError, type PayloadField, type PayloadTooLargeError } from '../errors.js';
import type { FailureInfo, HistoryEvent, Payload } from '../history/events.js';
import { errorToFailure, failureToError } from '../history/failure.js';
import type { ChildOutcome, QueuedInput, RecordedCall } from '../history/state.js';
import * as pb from '../internal/wire/fields.js';
import { EMPTY_BYTES as EMPTY, Reader, Writer, readFailure, readPayload, writeFailure, writePayload } from '../internal/wire/wire.js';
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

const REC = pb.WorkerFrame_Record;
const optDouble = (w: Writer, tag: number, v: number | undefined): void => {
  if (v !== undefined) {
    w.uint32(tag);
    w.double(v);
  }
};
const CALL = pb.EngineFrame_Call;
const TAKEN = pb.EngineFrame_TakenInput;

/** Reads a message's fields; `on` returns false for a tag it does not know (skipped). */
function fields(r: Reader, on: (tag: number) => boolean): void {
  while (r.more()) {
    const t = r.uint32();
    if (!on(t)) r.skip(t & 7);
  }
}

export const CALLS: { readonly [K in CallKind]: CallSpec<K> } = {
  step: {
    kind: 'step',
    describe: (c) => `step "${c.name}"`,
    matches: (r, i) => r.name === i.name,
    result: (r) => {
      if (r.failure) throw failureToError(r.failure);
      return r.result!;
    },
    decoded: (c, codec) => {
      if (c.result) return { ...c, result: codec.decode(c.result) };
      return c.failure ? { ...c, failure: codec.decodeFailure(c.failure) } : c;
    },
    record: {
      tag: REC.step,
      noun: 'step record',
      write: (w, s) => {
        const F = pb.WorkerFrame_Record_Step;
        w.stringField(F.name, s.name);
        if (s.result) writePayload(w, F.result, s.result);
        if (s.failure) writeFailure(w, F.failure, s.failure);
        w.doubleField(F.durationMs, s.durationMs);
        if (s.limit !== undefined) {
          w.stringField(F.limit, s.limit);
          w.doubleField(F.waitedMs, s.waitedMs ?? 0);
        }
      },
      read: (r, seq, bad) => {
        const F = pb.WorkerFrame_Record_Step;
        const s: CallRecords['step'] = { kind: 'step', seq, name: '', durationMs: 0 };
        fields(r, (t) => {
          if (t === F.name) s.name = r.string();
          else if (t === F.result) s.result = r.nested(readPayload);
          else if (t === F.failure) s.failure = r.nested(readFailure);
          else if (t === F.durationMs) s.durationMs = r.double();
          else if (t === F.limit) s.limit = r.string();
          else if (t === F.waitedMs) s.waitedMs = r.double();
          else return false;
          return true;
        });
        if (!s.name) bad(`step record ${seq} has no name`);
        // A limit is a non-empty name; its wait comes only with it.
        if (s.limit) s.waitedMs ??= 0;
        else {
          delete s.limit;
          delete s.waitedMs;
        }
        if (!s.result === !s.failure) bad(`step record ${seq} ("${s.name}") must carry exactly one of result and failure`);
        if (!Number.isFinite(s.durationMs) || s.durationMs < 0) bad(`step record ${seq} has duration ${s.durationMs}`);
        return s;
      },
    },
    reply: null,
    recorded: {
      tag: CALL.step,
      write: (w, c) => {
        const F = pb.EngineFrame_StepCall;
        w.stringField(F.name, c.name);
        w.uint32Field(F.attempt, c.attempt);
        if (c.result) writePayload(w, F.result, c.result);
        if (c.failure) writeFailure(w, F.failure, c.failure);
        w.doubleField(F.durationMs, c.durationMs);
      },
      read: (r, { seq, eventId }) => {
        const F = pb.EngineFrame_StepCall;
        const c: Recorded<'step'> = { kind: 'step', seq, eventId, name: '', attempt: 0, durationMs: 0 };
        fields(r, (t) => {
          if (t === F.name) c.name = r.string();
          else if (t === F.attempt) c.attempt = r.uint32();
          else if (t === F.result) c.result = r.nested(readPayload);
          else if (t === F.failure) c.failure = r.nested(readFailure);
          else if (t === F.durationMs) c.durationMs = r.double();
          else return false;
          return true;
        });
        return c;
      },
    },
    append: (rec, env) => {
      const { turn, attempt } = env;
      // An oversized result is recorded as the step's failure instead (same seq, no gap), and thrown.
      const tooLarge = rec.failure ? undefined : env.oversized('stepResult', rec.result, `${env.at}, step "${rec.name}" result`);
      const failure = rec.failure ?? (tooLarge && errorToFailure(tooLarge));
      const result = failure ? undefined : (rec.result ?? env.empty());
      return {
        // A literal per call, never `{ ...draft }` (Recording.events).
        events: () => {
          const d: Omit<Extract<HistoryEvent, { type: 'StepCompleted' }>, 'eventId' | 'generation' | 'time'> = { type: 'StepCompleted', turn, attempt, seq: rec.seq, name: rec.name, durationMs: rec.durationMs };
          if (rec.limit) {
            d.limit = rec.limit;
            d.waitedMs = rec.waitedMs ?? 0;
          }
          if (failure) d.failure = failure;
          else if (result) d.result = result;
          return [d];
        },
        reply: () => {
          if (tooLarge) throw tooLarge;
          return undefined;
        },
      };
    },
  },

  checkpoint: {
    kind: 'checkpoint',
    describe: () => 'checkpoint',
    matches: () => true,
    result: (r) => r.data,
    decoded: (c, codec) => ({ ...c, data: codec.decode(c.data) }),
    record: {
      tag: REC.checkpoint,
      noun: 'checkpoint',
      write: (w, c) => writePayload(w, pb.WorkerFrame_Record_Checkpoint.data, c.data),
      read: (r, seq, bad) => {
        let data: Payload | undefined;
        fields(r, (t) => t === pb.WorkerFrame_Record_Checkpoint.data && (data = r.nested(readPayload)) !== undefined);
        if (!data) bad(`checkpoint ${seq} has no data`);
        return { kind: 'checkpoint', seq, data: data! };
      },
    },
    reply: null,
    recorded: {
      tag: CALL.checkpoint,
      write: (w, c) => writePayload(w, pb.EngineFrame_CheckpointCall.data, c.data),
      read: (r, { seq, eventId }) => {
        let data: Payload = { metadata: {}, data: EMPTY };
        fields(r, (t) => t === pb.EngineFrame_CheckpointCall.data && (data = r.nested(readPayload)) !== undefined);
        return { kind: 'checkpoint', seq, eventId, data };
      },
    },
    append: (rec, env) => ({
      // Nothing can stand at this seq instead, so the whole turn fails (the driver's finish).
      refused: env.oversized('checkpoint', rec.data, `${env.at}, checkpoint`),
      events: () => [{ type: 'Checkpointed', turn: env.turn, seq: rec.seq, data: rec.data }],
      reply: () => undefined,
    }),
  },

  'take-inputs': {
    kind: 'take-inputs',
    describe: () => 'takeInputs()',
    matches: () => true,
    result: (r, taken) => {
      const byId = new Map(taken.map((q) => [q.inputId, q]));
      return r.inputIds.map((id) => byId.get(id)!.input);
    },
    decoded: (c) => c,
    record: {
      tag: REC.takeInputs,
      noun: 'take-inputs',
      write: () => {},
      read: (r, seq) => {
        fields(r, () => false);
        return { kind: 'take-inputs', seq };
      },
    },
    reply: {
      tag: pb.EngineFrame_Ack.takeInputs,
      what: 'The inputs taken by ctx.takeInputs()',
      write: (w, inputs) => {
        for (const q of inputs) writeTaken(w, pb.EngineFrame_TakenInputs.inputs, q);
      },
      read: (r) => {
        const inputs: TakenInput[] = [];
        fields(r, (t) => {
          if (t !== pb.EngineFrame_TakenInputs.inputs) return false;
          const q = r.nested(readTaken);
          inputs.push({ inputId: q.inputId, input: q.input });
          return true;
        });
        return inputs;
      },
    },
    recorded: {
      tag: CALL.takeInputs,
      write: (w, c) => w.stringsField(pb.EngineFrame_TakeInputsCall.inputIds, c.inputIds),
      read: (r, { seq, eventId }) => {
        const inputIds: string[] = [];
        fields(r, (t) => t === pb.EngineFrame_TakeInputsCall.inputIds && inputIds.push(r.string()) > 0);
        return { kind: 'take-inputs', seq, eventId, inputIds };
      },
    },
    append: (rec, env) => {
      let queue = env.queue();
      return {
        events: () => {
          queue = env.queue(); // after a re-read, the queue as the other writer left it
          return [{ type: 'InputsTaken', turn: env.turn, seq: rec.seq, inputIds: queue.map((q) => q.inputId) }];
        },
        reply: () => queue.map((q) => ({ inputId: q.inputId, input: env.decode(q.input) })),
      };
    },
  },

  patch: {
    kind: 'patch',
    describe: (c) => `patched("${c.patchId}")`,
    matches: (r, i) => r.patchId === i.patchId,
    result: () => true,
    decoded: (c) => c,
    record: {
      tag: REC.patch,
      noun: 'patch record',
      write: (w, c) => {
        w.stringField(pb.WorkerFrame_Record_Patch.patchId, c.patchId);
        w.boolField(pb.WorkerFrame_Record_Patch.deprecated, c.deprecated);
      },
      read: (r, seq, bad) => {
        const c: CallRecords['patch'] = { kind: 'patch', seq, patchId: '', deprecated: false };
        fields(r, (t) => {
          if (t === pb.WorkerFrame_Record_Patch.patchId) c.patchId = r.string();
          else if (t === pb.WorkerFrame_Record_Patch.deprecated) c.deprecated = r.bool();
          else return false;
          return true;
        });
        if (!c.patchId) bad(`patch record ${seq} has no patch id`);
        return c;
      },
    },
    reply: null,
    recorded: {
      tag: CALL.patch,
      write: (w, c) => {
        w.stringField(pb.EngineFrame_PatchCall.patchId, c.patchId);
        w.boolField(pb.EngineFrame_PatchCall.deprecated, c.deprecated);
      },
      read: (r, { seq, eventId }) => {
        const c: Recorded<'patch'> = { kind: 'patch', seq, eventId, patchId: '', deprecated: false };
        fields(r, (t) => {
          if (t === pb.EngineFrame_PatchCall.patchId) c.patchId = r.string();
          else if (t === pb.EngineFrame_PatchCall.deprecated) c.deprecated = r.bool();
          else return false;
          return true;
        });
        return c;
      },
    },
    append: (rec, env) => ({
      events: () => [{ type: 'PatchMarked', turn: env.turn, seq: rec.seq, patchId: rec.patchId, deprecated: rec.deprecated }],
      reply: () => undefined,
    }),
  },

  sleep: {
    kind: 'sleep',
    describe: (c) => `sleep(${'ms' in c ? c.ms : c.durationMs} ms)`,
    // By kind and position only, as Temporal matches timers: a duration computed from the clock
    // differs on every attempt, and the recorded fireAt is what counts.
    matches: () => true,
    result: (r) => r.fireAt,
    decoded: (c) => c,
    record: {
      tag: REC.sleep,
      noun: 'sleep record',
      write: (w, c) => {
        w.doubleField(pb.WorkerFrame_Record_Sleep.durationMs, c.durationMs);
        w.doubleField(pb.WorkerFrame_Record_Sleep.fireAtMs, c.fireAt);
      },
      read: (r, seq, bad) => {
        const F = pb.WorkerFrame_Record_Sleep;
        const c: CallRecords['sleep'] = { kind: 'sleep', seq, durationMs: 0, fireAt: 0 };
        fields(r, (t) => {
          if (t === F.durationMs) c.durationMs = r.double();
          else if (t === F.fireAtMs) c.fireAt = r.double();
          else return false;
          return true;
        });
        if (!Number.isFinite(c.durationMs) || c.durationMs < 0 || !Number.isFinite(c.fireAt)) bad(`sleep record ${seq} has duration ${c.durationMs}, fire time ${c.fireAt}`);
        return c;
      },
    },
    reply: null,
    recorded: {
      tag: CALL.sleep,
      write: (w, c) => {
        w.doubleField(pb.EngineFrame_SleepCall.durationMs, c.durationMs);
        w.doubleField(pb.EngineFrame_SleepCall.fireAtMs, c.fireAt);
      },
      read: (r, { seq, eventId }) => {
        const F = pb.EngineFrame_SleepCall;
        const c: Recorded<'sleep'> = { kind: 'sleep', seq, eventId, durationMs: 0, fireAt: 0 };
        fields(r, (t) => {
          if (t === F.durationMs) c.durationMs = r.double();
          else if (t === F.fireAtMs) c.fireAt = r.double();
          else return false;
          return true;
        });
        return c;
      },
    },
    append: (rec, env) => ({
      events: () => [{ type: 'TimerStarted', turn: env.turn, seq: rec.seq, durationMs: rec.durationMs, fireAt: rec.fireAt }],
      reply: () => undefined,
    }),
  },

  child: {
    kind: 'child',
    describe: (c) => (c.op === 'start' ? `startChild("${c.workflow}", { childId: "${c.childId}" })` : `awaitChild("${c.childId}")`),
    // The child id is derived from the call's position unless given, so it matches on every attempt.
    matches: (r, i) => r.op === i.op && r.childId === i.childId && (r.op !== 'start' || i.op !== 'start' || r.workflow === i.workflow),
    result: (r) => (r.op === 'start' ? { childId: r.childId } : { childId: r.childId, outcome: r.outcome }),
    decoded: (c, codec) => (c.op === 'await' ? { ...c, outcome: decodedOutcome(c.outcome, codec) } : c),
    record: {
      tag: REC.child,
      noun: 'child record',
      write: (w, c) => {
        const F = pb.WorkerFrame_Record_Child;
        w.stringField(F.childId, c.childId);
        if (c.op === 'start') {
          w.stringField(F.workflow, c.workflow);
          writePayload(w, F.input, c.input);
          w.boolField(F.detached, c.detached);
        } else w.boolField(F.wait, true);
      },
      read: (r, seq, bad) => {
        const F = pb.WorkerFrame_Record_Child;
        let childId = '';
        let workflow = '';
        let input: Payload | undefined;
        let detached = false;
        let wait = false;
        fields(r, (t) => {
          if (t === F.childId) childId = r.string();
          else if (t === F.workflow) workflow = r.string();
          else if (t === F.input) input = r.nested(readPayload);
          else if (t === F.detached) detached = r.bool();
          else if (t === F.wait) wait = r.bool();
          else return false;
          return true;
        });
        if (!childId) bad(`child record ${seq} has no child id`);
        if (wait) return { kind: 'child', seq, op: 'await', childId };
        if (!workflow || !input) bad(`child record ${seq} (${childId}) starts a child without a workflow or an input`);
        return { kind: 'child', seq, op: 'start', childId, workflow, input: input!, detached };
      },
    },
    reply: {
      tag: pb.EngineFrame_Ack.child,
      what: "A child's id or outcome",
      write: (w, c) => writeChildReply(w, c),
      read: (r) => readChildReply(r),
    },
    recorded: {
      tag: CALL.child,
      write: (w, c) => {
        const F = pb.EngineFrame_ChildCall;
        w.stringField(F.childId, c.childId);
        if (c.op === 'start') {
          w.stringField(F.workflow, c.workflow);
          w.boolField(F.detached, c.detached);
          return;
        }
        w.boolField(F.ended, true);
        w.uint32(F.outcome);
        const at = w.fork();
        writeChildReply(w, { childId: c.childId, outcome: c.outcome });
        w.ldelim(at);
      },
      read: (r, { seq, eventId }) => {
        const F = pb.EngineFrame_ChildCall;
        let childId = '';
        let workflow = '';
        let ended = false;
        let detached = false;
        let outcome: ChildOutcome = { status: 'completed' };
        fields(r, (t) => {
          if (t === F.childId) childId = r.string();
          else if (t === F.workflow) workflow = r.string();
          else if (t === F.ended) ended = r.bool();
          else if (t === F.detached) detached = r.bool();
          else if (t === F.outcome) outcome = r.nested(readChildReply).outcome ?? outcome;
          else return false;
          return true;
        });
        return ended ? { kind: 'child', seq, eventId, op: 'await', childId, outcome } : { kind: 'child', seq, eventId, op: 'start', childId, workflow, detached };
      },
    },
    append: (rec, env) => {
      if (rec.op === 'start') {
        return {
          events: () => [{ type: 'ChildStarted', turn: env.turn, seq: rec.seq, childId: rec.childId, workflow: rec.workflow, detached: rec.detached }],
          reply: () => ({ childId: rec.childId }),
        };
      }
      const outcome = rec.outcome;
      if (!outcome) throw new Error(`${env.at}: child ${rec.childId} awaited without its outcome (engine bug)`);
      return {
        events: () => [{ type: 'ChildEnded', turn: env.turn, seq: rec.seq, childId: rec.childId, ...outcome }],
        reply: () => ({ childId: rec.childId, outcome }),
      };
    },
  },

  wait: {
    kind: 'wait',
    describe: (c) => `waitFor("${c.name}")`,
    // By name: a wait for another event at this position is another program.
    matches: (r, i) => r.name === i.name,
    result: (r) => r,
    decoded: (c, codec) => (c.ended?.value ? { ...c, ended: { ...c.ended, value: codec.decode(c.ended.value) } } : c),
    record: {
      tag: REC.wait,
      noun: 'wait record',
      write: (w, c) => {
        w.stringField(pb.WorkerFrame_Record_Wait.name, c.name);
        optDouble(w, pb.WorkerFrame_Record_Wait.timeoutMs, c.timeoutMs);
      },
      read: (r, seq, bad) => {
        const F = pb.WorkerFrame_Record_Wait;
        const c: CallRecords['wait'] = { kind: 'wait', seq, name: '' };
        fields(r, (t) => {
          if (t === F.name) c.name = r.string();
          else if (t === F.timeoutMs) c.timeoutMs = r.double();
          else return false;
          return true;
        });
        if (!c.name) bad(`wait record ${seq} has no name`);
        if (c.timeoutMs !== undefined && !(Number.isFinite(c.timeoutMs) && c.timeoutMs >= 0)) bad(`wait record ${seq} has timeout ${c.timeoutMs}`);
        return c;
      },
    },
    reply: {
      tag: pb.EngineFrame_Ack.wait,
      what: 'The deadline of ctx.waitFor()',
      write: (w, v) => optDouble(w, pb.EngineFrame_WaitReply.deadlineMs, v.deadline),
      read: (r) => {
        const v: CallReplies['wait'] = {};
        fields(r, (t) => t === pb.EngineFrame_WaitReply.deadlineMs && (v.deadline = r.double()) !== undefined);
        return v;
      },
    },
    recorded: {
      tag: CALL.wait,
      write: (w, c) => {
        const F = pb.EngineFrame_WaitCall;
        w.stringField(F.name, c.name);
        optDouble(w, F.timeoutMs, c.timeoutMs);
        optDouble(w, F.deadlineMs, c.deadline);
        if (c.ended) {
          w.boolField(F.ended, true);
          w.stringField(F.signalId, c.ended.signalId);
          if (c.ended.value) writePayload(w, F.value, c.ended.value);
          w.boolField(F.timedOut, c.ended.timedOut);
        }
      },
      read: (r, { seq, eventId }) => {
        const F = pb.EngineFrame_WaitCall;
        const c: Recorded<'wait'> = { kind: 'wait', seq, eventId, name: '' };
        let ended = false;
        const end: NonNullable<Recorded<'wait'>['ended']> = { signalId: '', timedOut: false, eventId: 0 };
        fields(r, (t) => {
          if (t === F.name) c.name = r.string();
          else if (t === F.timeoutMs) c.timeoutMs = r.double();
          else if (t === F.deadlineMs) c.deadline = r.double();
          else if (t === F.ended) ended = r.bool();
          else if (t === F.signalId) end.signalId = r.string();
          else if (t === F.value) end.value = r.nested(readPayload);
          else if (t === F.timedOut) end.timedOut = r.bool();
          else return false;
          return true;
        });
        if (ended) c.ended = end;
        return c;
      },
    },
    append: (rec, env) => {
      const deadline = rec.timeoutMs === undefined ? undefined : env.now() + rec.timeoutMs;
      const { turn } = env;
      const events = (): EventDraft[] => {
        const d: EventDraft = { type: 'WaitStarted', turn, seq: rec.seq, name: rec.name };
        if (rec.timeoutMs !== undefined) d.timeoutMs = rec.timeoutMs;
        if (deadline !== undefined) d.deadline = deadline;
        return [d];
      };
      return { events, reply: () => (deadline === undefined ? {} : { deadline }) };
    },
  },
};

const REPLY = pb.EngineFrame_ChildReply;

function writeChildReply(w: Writer, c: ChildReply): void {
  w.stringField(REPLY.childId, c.childId);
  const o = c.outcome;
  if (!o) return;
  w.uint32Field(REPLY.status, (pb.CHILD_STATUSES as readonly (string | undefined)[]).indexOf(o.status));
  if (o.output) writePayload(w, REPLY.output, o.output);
  if (o.failure) writeFailure(w, REPLY.failure, o.failure);
  w.stringField(REPLY.reason, o.reason);
}

function readChildReply(r: Reader): ChildReply {
  const c: ChildReply = { childId: '' };
  let o: ChildOutcome | undefined;
  fields(r, (t) => {
    if (t === REPLY.childId) c.childId = r.string();
    else if (t === REPLY.status) (o ??= { status: 'completed' }).status = pb.CHILD_STATUSES[r.uint32()] ?? 'failed';
    else if (t === REPLY.output) (o ??= { status: 'completed' }).output = r.nested(readPayload);
    else if (t === REPLY.failure) (o ??= { status: 'completed' }).failure = r.nested(readFailure);
    else if (t === REPLY.reason) (o ??= { status: 'completed' }).reason = r.string();
    else return false;
    return true;
  });
  if (o) c.outcome = o;
  return c;
}

function decodedOutcome(o: ChildOutcome, codec: SpecDecoder): ChildOutcome {
  const out = { ...o };
  if (o.output) out.output = codec.decode(o.output);
  if (o.failure) out.failure = codec.decodeFailure(o.failure);
  return out;
}

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
