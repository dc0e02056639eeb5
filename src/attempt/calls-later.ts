/**
 * The rows of CALLS (attempt/calls.ts) for the kinds that complete later: sleep (its timer fires),
 * child (the child ends) and wait (a signal or its timeout). Each row as in calls-at-once.ts; their
 * completions are replay/decide.ts's rules and runtime/drafts.ts's drafts.
 */
import type { Payload } from '../history/events.js';
import type { ChildOutcome } from '../history/state.js';
import * as pb from '../internal/wire/fields.js';
import { Reader, Writer, readFailure, readPayload, writeFailure, writePayload } from '../internal/wire/wire.js';
import type { CallRecords, CallReplies, CallSpec, ChildReply, EventDraft, Recorded } from './calls-types.js';
import { fields, optDouble } from './calls-wire.js';
import type { SpecDecoder } from './turn-spec.js';

const REC = pb.WorkerFrame_Record;
const CALL = pb.EngineFrame_Call;

export const SLEEP: CallSpec<'sleep'> = {
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
};

export const CHILD: CallSpec<'child'> = {
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
};

export const WAIT: CallSpec<'wait'> = {
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

