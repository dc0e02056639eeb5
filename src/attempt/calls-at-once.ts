/**
 * The rows of CALLS (attempt/calls.ts) for the kinds answered when recorded: step, checkpoint,
 * takeInputs and patch. Each row: how the call is described and matched against the record, its
 * result from the record, its worker frame members, and the events the engine appends for it.
 */
import type { HistoryEvent, Payload } from '../history/events.js';
import { errorToFailure, failureToError } from '../history/failure.js';
import * as pb from '../internal/wire/fields.js';
import { EMPTY_BYTES as EMPTY, readFailure, readPayload, writeFailure, writePayload } from '../internal/wire/wire.js';
import type { CallRecords, CallSpec, Recorded, TakenInput } from './calls-types.js';
import { fields, readTaken, writeTaken } from './calls-wire.js';

const REC = pb.WorkerFrame_Record;
const CALL = pb.EngineFrame_Call;

export const STEP: CallSpec<'step'> = {
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
};

export const CHECKPOINT: CallSpec<'checkpoint'> = {
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
};

export const TAKE_INPUTS: CallSpec<'take-inputs'> = {
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
};

export const PATCH: CallSpec<'patch'> = {
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
};
