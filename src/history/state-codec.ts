/**
 * Snapshots: a folded {@link TaskState} ⇄ `turnlog.v1.TaskStateSnapshot` bytes
 * (proto/turnlog/v1/state.proto). Recovery decodes the latest snapshot and folds only the
 * tail after it. The round trip is exact; bytes always come back as plain `Uint8Array`s.
 */
import { HistoryCorruptError, HistoryFormatError, TurnlogError } from '../errors.js';
import { lookupType } from '../internal/proto/root.js';
import * as pb from '../internal/wire/fields.js';
import { decodePolicy, encodePolicy, failureFromProto, failureToProto, setOwn, traceOf } from './codec.js';
import type {
  CancelScope,
  ChildStatus,
  EntryMode,
  ExecutorKind,
  FailureInfo,
  Payload,
  TaskOutcome,
  TaskStatus,
  WorkflowKind,
} from './events.js';
import type { ChildOutcome, ChildRef, OpenTurn, QueuedInput, RecordedCall, TaskState, TurnRecord } from './state.js';

/** Layout version written in every snapshot; readers refuse others and fold the full history. */
export const SNAPSHOT_VERSION = 1;

const SnapshotType = lookupType('turnlog.v1.TaskStateSnapshot');
const TurnPolicyType = lookupType('turnlog.v1.TurnPolicy');

// Enum maps, generated from the .proto files (src/internal/wire/fields.ts): index = proto enum number.
const KINDS: readonly (WorkflowKind | undefined)[] = pb.WORKFLOW_KINDS;
const ENTRY_MODES: readonly (EntryMode | undefined)[] = pb.ENTRY_MODES;
const EXECUTORS: readonly (ExecutorKind | undefined)[] = pb.EXECUTOR_KINDS;
const OUTCOMES: readonly (TaskOutcome | undefined)[] = pb.TASK_OUTCOMES;
const SCOPES: readonly (CancelScope | undefined)[] = pb.CANCEL_SCOPES;
const STATUSES: readonly (TaskStatus | undefined)[] = pb.TASK_STATUSES;
const CHILD_STATUSES: readonly (ChildStatus | undefined)[] = pb.CHILD_STATUSES;
const TERMINALS: readonly (TurnRecord['terminal'] | undefined)[] = pb.TURN_TERMINALS;

function toNum<T>(table: readonly (T | undefined)[], v: T): number {
  const i = table.indexOf(v);
  if (i <= 0) throw new TurnlogError('TURNLOG_INVALID_ARGUMENT', `Cannot encode enum value ${String(v)} in a snapshot.`);
  return i;
}

function fromNum<T>(table: readonly (T | undefined)[], n: number, what: string, taskId: string, eventId: number): T {
  const v = table[n];
  if (v === undefined) {
    throw new HistoryFormatError(taskId, eventId, SNAPSHOT_VERSION, `snapshot has unknown ${what} value ${n}`);
  }
  return v;
}

// Decoded messages are protobufjs instances; fields are read by name, as in codec.ts.
type Msg = Record<string, any>;

// ---------------------------------------------------------------------------------------------
// Encode

function payloadMsg(p: Payload): Msg {
  return { metadata: p.metadata, data: p.data };
}

function inputMsg(q: QueuedInput): Msg {
  const m: Msg = { inputId: q.inputId, input: payloadMsg(q.input), steering: q.steering, eventId: q.eventId, timeMs: q.time };
  if (q.deliverAt !== undefined) m['deliverAtMs'] = q.deliverAt;
  if (q.trace !== undefined) m['trace'] = { traceparent: q.trace.traceparent, tracestate: q.trace.tracestate ?? '' };
  return m;
}

function cancelMsg(c: { scope: CancelScope; reason: string; eventId: number }): Msg {
  return { scope: toNum(SCOPES, c.scope), reason: c.reason, eventId: c.eventId };
}

function callMsg(c: RecordedCall): Msg {
  switch (c.kind) {
    case 'step': {
      const step: Msg = { name: c.name, attempt: c.attempt, durationMs: c.durationMs };
      if (c.result !== undefined) step['result'] = payloadMsg(c.result);
      if (c.failure !== undefined) step['failure'] = failureToProto(c.failure);
      return { seq: c.seq, eventId: c.eventId, step };
    }
    case 'checkpoint':
      return { seq: c.seq, eventId: c.eventId, checkpoint: { data: payloadMsg(c.data) } };
    case 'take-inputs':
      return { seq: c.seq, eventId: c.eventId, takeInputs: { inputIds: c.inputIds } };
    case 'patch':
      return { seq: c.seq, eventId: c.eventId, patch: { patchId: c.patchId, deprecated: c.deprecated } };
    case 'sleep':
      return { seq: c.seq, eventId: c.eventId, sleep: { durationMs: c.durationMs, fireAtMs: c.fireAt } };
    case 'child': {
      const child: Msg = { childId: c.childId };
      if (c.op === 'start') Object.assign(child, { workflow: c.workflow, detached: c.detached });
      else {
        const o = c.outcome;
        Object.assign(child, { ended: true, status: toNum(CHILD_STATUSES, o.status) });
        if (o.output !== undefined) child['output'] = payloadMsg(o.output);
        if (o.failure !== undefined) child['failure'] = failureToProto(o.failure);
        if (o.reason !== undefined) child['reason'] = o.reason;
      }
      return { seq: c.seq, eventId: c.eventId, child };
    }
    case 'wait': {
      const w: Msg = { name: c.name };
      if (c.timeoutMs !== undefined) w['timeoutMs'] = c.timeoutMs;
      if (c.deadline !== undefined) w['deadlineMs'] = c.deadline;
      if (c.ended) {
        w['ended'] = true;
        w['signalId'] = c.ended.signalId;
        w['timedOut'] = c.ended.timedOut;
        w['endedEventId'] = c.ended.eventId;
        if (c.ended.value !== undefined) w['value'] = payloadMsg(c.ended.value);
      }
      return { seq: c.seq, eventId: c.eventId, wait: w };
    }
  }
}

function openTurnMsg(t: OpenTurn): Msg {
  const m: Msg = {
    turn: t.turn,
    attempt: t.attempt,
    attemptRunning: t.attemptRunning,
    inputIds: t.inputIds,
    inputs: t.inputs.map(inputMsg),
    entryMode: toNum(ENTRY_MODES, t.entryMode),
    steered: t.steered,
    turnStartedAtMs: t.turnStartedAt,
    deadlineMs: t.deadline,
    executor: toNum(EXECUTORS, t.executor),
    owner: t.owner,
    instance: t.instance,
    startedEventId: t.startedEventId,
    calls: t.calls.map(callMsg),
    taken: t.taken.map(inputMsg),
    workerCrashes: t.workerCrashes,
  };
  if (t.checkpoint !== undefined) m['checkpoint'] = payloadMsg(t.checkpoint);
  if (t.marker !== undefined) {
    m['marker'] = { atMs: t.marker.at, graceUntilMs: t.marker.graceUntil, eventId: t.marker.eventId };
  }
  if (t.cancelRequested !== undefined) m['cancelRequested'] = cancelMsg(t.cancelRequested);
  return m;
}

/**
 * Encodes a folded state as a snapshot.
 *
 * @example
 * await store.putSnapshot(id, encodeState(fold(id, events)));
 */
export function encodeState(state: TaskState): Uint8Array {
  const m: Msg = {
    snapshotVersion: SNAPSHOT_VERSION,
    taskId: state.taskId,
    workflow: state.workflow,
    kind: toNum(KINDS, state.kind),
    // Through codec.ts's own mapping, so a policy reads the same in events and snapshots.
    policy: TurnPolicyType.decode(encodePolicy(state.policy)),
    formatVersion: state.formatVersion,
    createdAtMs: state.createdAt,
    updatedAtMs: state.updatedAt,
    lastEventId: state.lastEventId,
    highestGeneration: state.highestGeneration,
    status: toNum(STATUSES, state.status),
    turn: state.turn,
    queue: state.queue.map(inputMsg),
    recoveryCount: state.recoveryCount,
    workerCrashCount: state.workerCrashCount,
  };
  if (state.outcome !== undefined) m['outcome'] = toNum(OUTCOMES, state.outcome);
  if (state.openTurn !== undefined) m['openTurn'] = openTurnMsg(state.openTurn);
  if (state.lastOutput !== undefined) m['lastOutput'] = payloadMsg(state.lastOutput);
  if (state.state !== undefined) m['state'] = payloadMsg(state.state);
  if (state.lastFailure !== undefined) m['lastFailure'] = failureToProto(state.lastFailure);
  if (state.lastTurn !== undefined) {
    const l = state.lastTurn;
    m['lastTurn'] = { turn: l.turn, terminal: toNum(TERMINALS, l.terminal), eventId: l.eventId, attempts: l.attempts };
  }
  if (state.cancelRequested !== undefined) m['cancelRequested'] = cancelMsg(state.cancelRequested);
  if (state.lastInputId !== undefined) m['lastInputId'] = state.lastInputId;
  if (state.stateVersion !== undefined) m['stateVersion'] = state.stateVersion;
  if (state.openTurn?.workflowVersion !== undefined) m['openTurnWorkflowVersion'] = state.openTurn.workflowVersion;
  if (state.parent !== undefined) m['parent'] = { ...state.parent };
  if (state.children !== undefined) {
    m['children'] = state.children.map((c) => {
      const x: Msg = { childId: c.childId, workflow: c.workflow, turn: c.turn, seq: c.seq, detached: c.detached };
      if (c.status !== undefined) x['status'] = toNum(CHILD_STATUSES, c.status);
      return x;
    });
  }
  if (state.signals !== undefined) {
    m['signals'] = state.signals.map((x) => ({ signalId: x.signalId, name: x.name, value: payloadMsg(x.value), eventId: x.eventId, timeMs: x.time }));
  }
  return SnapshotType.encode(m as never).finish();
}

// ---------------------------------------------------------------------------------------------
// Decode

// protobufjs hands out Node Buffers; snapshots promise plain Uint8Arrays (same bytes, no copy).
function bytes(b: unknown): Uint8Array {
  // protobufjs 8 decodes an absent bytes field to a shared JS Array `[]`: not bytes.
  if (!(b instanceof Uint8Array)) return new Uint8Array(0);
  return b.constructor === Uint8Array ? b : new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}

function payloadOf(m: Msg): Payload {
  const metadata: Record<string, Uint8Array> = {};
  const src = (m['metadata'] ?? {}) as Record<string, Uint8Array>;
  for (const k of Object.keys(src)) setOwn(metadata, k, bytes(src[k]));
  return { metadata, data: bytes(m['data']) };
}

function failureOf(m: Msg): FailureInfo {
  return normalizeFailure(failureFromProto(m));
}

function normalizeFailure(f: FailureInfo): FailureInfo {
  if (f.details !== undefined) f.details = payloadOf(f.details as unknown as Msg);
  if (f.encodedAttributes !== undefined) f.encodedAttributes = payloadOf(f.encodedAttributes as unknown as Msg);
  if (f.cause !== undefined) normalizeFailure(f.cause);
  return f;
}

class Reader {
  constructor(
    readonly taskId: string,
    readonly eventId: number,
  ) {}

  input(m: Msg): QueuedInput {
    const q: QueuedInput = {
      inputId: m['inputId'],
      input: payloadOf(m['input'] ?? {}),
      steering: m['steering'],
      eventId: m['eventId'],
      time: m['timeMs'],
    };
    if (m['deliverAtMs']) q.deliverAt = m['deliverAtMs'];
    if (m['trace']?.['traceparent']) q.trace = traceOf(m['trace']['traceparent'], m['trace']['tracestate']);
    return q;
  }

  cancel(m: Msg): { scope: CancelScope; reason: string; eventId: number } {
    return { scope: fromNum(SCOPES, m['scope'], 'cancel scope', this.taskId, this.eventId), reason: m['reason'], eventId: m['eventId'] };
  }

  call(m: Msg): RecordedCall {
    const seq: number = m['seq'];
    const eventId: number = m['eventId'];
    switch (m['call'] as string | undefined) {
      case 'step': {
        const s: Msg = m['step'];
        const c: RecordedCall = { kind: 'step', seq, name: s['name'], eventId, attempt: s['attempt'], durationMs: s['durationMs'] };
        if (s['result']) c.result = payloadOf(s['result']);
        if (s['failure']) c.failure = failureOf(s['failure']);
        return c;
      }
      case 'checkpoint':
        return { kind: 'checkpoint', seq, eventId, data: payloadOf(m['checkpoint']['data'] ?? {}) };
      case 'takeInputs':
        return { kind: 'take-inputs', seq, eventId, inputIds: [...(m['takeInputs']['inputIds'] as string[])] };
      case 'patch':
        return { kind: 'patch', seq, eventId, patchId: m['patch']['patchId'], deprecated: m['patch']['deprecated'] === true };
      case 'sleep':
        return { kind: 'sleep', seq, eventId, durationMs: m['sleep']['durationMs'], fireAt: m['sleep']['fireAtMs'] };
      case 'child': {
        const x: Msg = m['child'];
        if (!x['ended']) return { kind: 'child', seq, eventId, op: 'start', childId: x['childId'], workflow: x['workflow'], detached: x['detached'] === true };
        const outcome: ChildOutcome = { status: fromNum(CHILD_STATUSES, x['status'], 'child status', this.taskId, this.eventId) };
        if (x['output']) outcome.output = payloadOf(x['output']);
        if (x['failure']) outcome.failure = failureOf(x['failure']);
        if (x['reason']) outcome.reason = x['reason'];
        return { kind: 'child', seq, eventId, op: 'await', childId: x['childId'], outcome };
      }
      case 'wait': {
        const w: Msg = m['wait'];
        const c: RecordedCall = { kind: 'wait', seq, eventId, name: w['name'] };
        if (w['timeoutMs'] != null) c.timeoutMs = w['timeoutMs'];
        if (w['deadlineMs'] != null) c.deadline = w['deadlineMs'];
        if (w['ended']) {
          c.ended = { signalId: w['signalId'], timedOut: w['timedOut'] === true, eventId: w['endedEventId'] };
          if (w['value']) c.ended.value = payloadOf(w['value']);
        }
        return c;
      }
      default:
        throw new HistoryFormatError(this.taskId, this.eventId, SNAPSHOT_VERSION, 'snapshot has a recorded call of unknown kind');
    }
  }

  openTurn(m: Msg): OpenTurn {
    const t: OpenTurn = {
      turn: m['turn'],
      attempt: m['attempt'],
      attemptRunning: m['attemptRunning'],
      inputIds: [...(m['inputIds'] as string[])],
      inputs: (m['inputs'] as Msg[]).map((x) => this.input(x)),
      entryMode: fromNum(ENTRY_MODES, m['entryMode'], 'entry mode', this.taskId, this.eventId),
      steered: m['steered'],
      turnStartedAt: m['turnStartedAtMs'],
      deadline: m['deadlineMs'],
      executor: fromNum(EXECUTORS, m['executor'], 'executor', this.taskId, this.eventId),
      owner: m['owner'],
      instance: m['instance'],
      startedEventId: m['startedEventId'],
      calls: (m['calls'] as Msg[]).map((x) => this.call(x)),
      taken: (m['taken'] as Msg[]).map((x) => this.input(x)),
      workerCrashes: m['workerCrashes'],
    };
    if (m['checkpoint']) t.checkpoint = payloadOf(m['checkpoint']);
    if (m['marker']) {
      const k: Msg = m['marker'];
      t.marker = { at: k['atMs'], graceUntil: k['graceUntilMs'], eventId: k['eventId'] };
    }
    if (m['cancelRequested']) t.cancelRequested = this.cancel(m['cancelRequested']);
    return t;
  }
}

/**
 * Decodes a snapshot written by {@link encodeState}. Garbled bytes give HistoryCorruptError;
 * a snapshot of an unknown layout version gives HistoryFormatError (fold the full history instead).
 */
export function decodeState(data: Uint8Array): TaskState {
  let m: Msg;
  try {
    m = SnapshotType.decode(data) as unknown as Msg;
  } catch (err) {
    throw new HistoryCorruptError('snapshot', (err as Error).message, { cause: err });
  }
  const taskId: string = m['taskId'];
  const lastEventId: number = m['lastEventId'];
  if (m['snapshotVersion'] !== SNAPSHOT_VERSION) {
    throw new HistoryFormatError(taskId, lastEventId, m['snapshotVersion'], `snapshot layout version ${m['snapshotVersion']} is not ${SNAPSHOT_VERSION}`);
  }
  const r = new Reader(taskId, lastEventId);
  const s: TaskState = {
    taskId,
    workflow: m['workflow'],
    kind: fromNum(KINDS, m['kind'], 'workflow kind', taskId, lastEventId),
    policy: decodePolicy(TurnPolicyType.encode(m['policy'] ?? {}).finish()),
    formatVersion: m['formatVersion'],
    createdAt: m['createdAtMs'],
    updatedAt: m['updatedAtMs'],
    lastEventId,
    highestGeneration: m['highestGeneration'],
    status: fromNum(STATUSES, m['status'], 'status', taskId, lastEventId),
    turn: m['turn'],
    queue: (m['queue'] as Msg[]).map((x) => r.input(x)),
    recoveryCount: m['recoveryCount'],
    workerCrashCount: m['workerCrashCount'],
  };
  if (m['outcome']) s.outcome = fromNum(OUTCOMES, m['outcome'], 'outcome', taskId, lastEventId);
  if (m['openTurn']) s.openTurn = r.openTurn(m['openTurn']);
  if (m['lastOutput']) s.lastOutput = payloadOf(m['lastOutput']);
  if (m['state']) s.state = payloadOf(m['state']);
  if (m['lastFailure']) s.lastFailure = failureOf(m['lastFailure']);
  if (m['lastTurn']) {
    const l: Msg = m['lastTurn'];
    s.lastTurn = {
      turn: l['turn'],
      terminal: fromNum(TERMINALS, l['terminal'], 'turn terminal', taskId, lastEventId),
      eventId: l['eventId'],
      attempts: l['attempts'],
    };
  }
  if (m['cancelRequested']) s.cancelRequested = r.cancel(m['cancelRequested']);
  if (m['lastInputId'] != null) s.lastInputId = m['lastInputId'];
  if (m['stateVersion'] != null) s.stateVersion = m['stateVersion'];
  if (m['openTurnWorkflowVersion'] != null && s.openTurn) s.openTurn.workflowVersion = m['openTurnWorkflowVersion'];
  if (m['parent']) {
    const p: Msg = m['parent'];
    s.parent = { taskId: p['taskId'], turn: p['turn'], seq: p['seq'], detached: p['detached'] === true };
  }
  const children = m['children'] as Msg[] | undefined;
  if (children && children.length > 0) {
    s.children = children.map((x) => {
      const c: ChildRef = { childId: x['childId'], workflow: x['workflow'], turn: x['turn'], seq: x['seq'], detached: x['detached'] === true };
      if (x['status']) c.status = fromNum(CHILD_STATUSES, x['status'], 'child status', taskId, lastEventId);
      return c;
    });
  }
  const signals = m['signals'] as Msg[] | undefined;
  if (signals?.length) {
    s.signals = signals.map((x) => ({ signalId: x['signalId'], name: x['name'], value: payloadOf(x['value'] ?? {}), eventId: x['eventId'], time: x['timeMs'] }));
  }
  return s;
}
