/**
 * Strings in history events must survive UTF-8: a lone UTF-16 surrogate (text cut in the middle
 * of an emoji) has no UTF-8 form, and protobuf's decoder refuses what the encoder wrote for it.
 * Ids (names matched on replay, keys) are refused; free text becomes its well-formed version
 * (each lone surrogate → U+FFFD), so what is read back is what was stored. docs/history.md.
 */
import { invalidArgument } from '../errors.js';
import type { EventType, FailureInfo, HistoryEvent, Payload, TurnPolicy } from './events.js';

type Fields<T extends EventType> = readonly (keyof Extract<HistoryEvent, { type: T }> & string)[];

/**
 * Per event type: `ids` are identities (refused when ill-formed), `text` is free text
 * (replaced). Payloads, failures and the policy are walked by {@link wellFormedEvent} itself.
 */
const STRING_FIELDS: { [T in EventType]: { ids: Fields<T>; text: Fields<T> } } = {
  TaskCreated: { ids: ['workflow'], text: [] },
  HistoryCompacted: { ids: ['droppedInputIds'], text: [] },
  StateMigrated: { ids: [], text: [] },
  InputQueued: { ids: ['inputId'], text: [] },
  InputWithdrawn: { ids: ['inputId'], text: ['reason'] },
  TurnStarted: { ids: ['inputIds', 'owner', 'instance'], text: [] },
  StepCompleted: { ids: ['name', 'limit'], text: [] },
  InputsTaken: { ids: ['inputIds'], text: [] },
  Checkpointed: { ids: [], text: [] },
  PatchMarked: { ids: ['patchId'], text: [] },
  TimerStarted: { ids: [], text: [] },
  ChildStarted: { ids: ['childId', 'workflow'], text: [] },
  ChildEnded: { ids: ['childId'], text: ['reason'] },
  SignalReceived: { ids: ['signalId', 'name'], text: [] },
  WaitStarted: { ids: ['name'], text: [] },
  WaitEnded: { ids: ['signalId'], text: [] },
  TimeoutCancelRequested: { ids: [], text: [] },
  CancelRequested: { ids: [], text: ['reason'] },
  WorkerKilled: { ids: [], text: ['signal', 'reason'] },
  WorkerCrashed: { ids: [], text: ['signal', 'message'] },
  TurnCompleted: { ids: [], text: [] },
  TurnFailed: { ids: [], text: [] },
  TurnSuspended: { ids: [], text: ['reason'] },
  TurnCancelled: { ids: [], text: ['reason'] },
  TurnTimedOut: { ids: [], text: [] },
  TurnExitedForRecovery: { ids: [], text: ['reason'] },
  LeaseClaimed: { ids: ['owner', 'instance'], text: ['reason'] },
  TaskCompleted: { ids: [], text: [] },
  OperatorAction: { ids: ['inputId', 'newInputId'], text: ['by', 'reason'] },
};

const PAYLOAD_FIELDS = ['input', 'result', 'data', 'output', 'state', 'value'] as const;

/** True for a string with no lone surrogate (one UTF-8 form, round-trips through any store). */
export function isWellFormed(s: string): boolean {
  return s.isWellFormed();
}

/** The message part shared by every refusal of an ill-formed id. */
export function illFormedText(what: string, value: string): string {
  return `${what} ${JSON.stringify(value)} is not a well-formed string: it holds a lone UTF-16 surrogate (text cut in the middle of a character such as an emoji) and has no UTF-8 form. Pass a well-formed string, for example value.toWellFormed()`;
}

/** Throws TURNLOG_INVALID_ARGUMENT if an id field of `e` is ill-formed; nothing else is checked. */
export function checkEventIds(e: HistoryEvent, taskId?: string): void {
  const f = STRING_FIELDS[e.type] as { ids: readonly string[] } | undefined;
  if (f === undefined) return;
  const rec = e as unknown as Record<string, unknown>;
  for (const k of f.ids) {
    const v = rec[k];
    if (typeof v === 'string') {
      if (!v.isWellFormed()) throw idError(e, k, v, taskId);
    } else if (Array.isArray(v)) {
      for (const x of v) if (typeof x === 'string' && !x.isWellFormed()) throw idError(e, k, x, taskId);
    }
  }
}

function idError(e: HistoryEvent, field: string, value: string, taskId: string | undefined): Error {
  const where = `${taskId === undefined ? '' : `Task ${taskId}, `}event ${e.eventId} (${e.type})`;
  return invalidArgument(`${where}: ${illFormedText(field, value)}. Nothing was written.`);
}

/**
 * `e` with every free-text string made well-formed; `e` itself when nothing needed it (the usual
 * case, no copy). Throws TURNLOG_INVALID_ARGUMENT, before anything is written, for an ill-formed id.
 */
export function wellFormedEvent<E extends HistoryEvent>(e: E, taskId?: string): E {
  // Every append encodes (and the engine folds) each event: check first, without allocating.
  return allWellFormed(e) ? e : fixEvent(e, taskId);
}

/**
 * True when every string of `e` is well-formed: the per-type fields read directly (a walk of
 * {@link STRING_FIELDS} cost as much as encoding the event). test/history/well-formed.test.ts
 * checks, on every event type, that this misses no field of the table.
 */
function allWellFormed(e: HistoryEvent): boolean {
  switch (e.type) {
    case 'TaskCreated':
      return ok(e.workflow) && policyOk(e.policy);
    case 'InputQueued':
      return ok(e.inputId) && payloadOk(e.input);
    case 'InputWithdrawn':
      return ok(e.inputId) && ok(e.reason);
    case 'OperatorAction':
      return ok(e.inputId) && ok(e.newInputId) && ok(e.by) && ok(e.reason);
    case 'TurnStarted':
      return listOk(e.inputIds) && ok(e.owner) && ok(e.instance);
    case 'StepCompleted':
      return ok(e.name) && ok(e.limit) && payloadOk(e.result) && failureOk(e.failure);
    case 'InputsTaken':
      return listOk(e.inputIds);
    case 'Checkpointed':
      return payloadOk(e.data);
    case 'PatchMarked':
      return ok(e.patchId);
    case 'SignalReceived':
      return ok(e.signalId) && ok(e.name) && payloadOk(e.value);
    case 'WaitStarted':
      return ok(e.name);
    case 'WaitEnded':
      return ok(e.signalId);
    case 'CancelRequested':
    case 'TurnCancelled':
    case 'TurnExitedForRecovery':
      return ok(e.reason);
    case 'WorkerKilled':
      return ok(e.signal) && ok(e.reason);
    case 'WorkerCrashed':
      return ok(e.signal) && ok(e.message);
    case 'TurnCompleted':
      return payloadOk(e.output) && payloadOk(e.state);
    case 'TurnFailed':
      return failureOk(e.failure);
    case 'TurnSuspended':
      return ok(e.reason) && payloadOk(e.output) && payloadOk(e.state);
    case 'LeaseClaimed':
      return ok(e.owner) && ok(e.instance) && ok(e.reason);
    case 'ChildStarted':
      return ok(e.childId) && ok(e.workflow);
    case 'ChildEnded':
      return ok(e.childId) && (e.reason === undefined || ok(e.reason)) && payloadOk(e.output) && failureOk(e.failure);
    case 'HistoryCompacted':
      return listOk(e.droppedInputIds);
    case 'StateMigrated':
      return payloadOk(e.state);
    default:
      // TimeoutCancelRequested, TurnTimedOut, TaskCompleted: no strings.
      return true;
  }
}

function ok(s: unknown): boolean {
  return typeof s !== 'string' || s.isWellFormed();
}
function listOk(a: unknown): boolean {
  if (!Array.isArray(a)) return true;
  for (let i = 0; i < a.length; i++) if (!ok(a[i])) return false;
  return true;
}
function payloadOk(p: Payload | undefined | null): boolean {
  const md = p?.metadata;
  if (md == null) return true;
  for (const k in md) if (!k.isWellFormed()) return false;
  return true;
}
function failureOk(f: FailureInfo | undefined | null): boolean {
  for (let c = f; c != null; c = c.cause) {
    if (!ok(c.message) || !ok(c.type) || !ok(c.stack) || !ok(c.code) || !payloadOk(c.details) || !payloadOk(c.encodedAttributes)) return false;
  }
  return true;
}
function policyOk(p: TurnPolicy | undefined | null): boolean {
  return p == null || listOk(p.stepRetry?.nonRetryableTypes);
}

/** The slow path: refuse an ill-formed id, copy what holds ill-formed free text. */
function fixEvent<E extends HistoryEvent>(e: E, taskId: string | undefined): E {
  checkEventIds(e, taskId);
  const f = STRING_FIELDS[e.type] as { text: readonly string[] } | undefined;
  if (f === undefined) return e;
  const rec = e as unknown as Record<string, unknown>;
  let out: Record<string, unknown> | undefined;
  for (const k of f.text) {
    const v = rec[k];
    if (typeof v === 'string' && !v.isWellFormed()) (out ??= { ...rec })[k] = v.toWellFormed();
  }
  for (const k of PAYLOAD_FIELDS) {
    const p = rec[k] as Payload | undefined;
    if (p == null || typeof p !== 'object') continue;
    const q = wellFormedPayload(p);
    if (q !== p) (out ??= { ...rec })[k] = q;
  }
  const failure = rec['failure'] as FailureInfo | undefined;
  if (failure != null && typeof failure === 'object') {
    const g = wellFormedFailure(failure);
    if (g !== failure) (out ??= { ...rec })['failure'] = g;
  }
  const policy = rec['policy'] as TurnPolicy | undefined;
  if (policy != null && typeof policy === 'object') {
    const q = wellFormedPolicy(policy);
    if (q !== policy) (out ??= { ...rec })['policy'] = q;
  }
  return (out ?? e) as E;
}

/** A payload whose metadata keys are well-formed (`p` itself when they are). */
export function wellFormedPayload(p: Payload): Payload {
  const md = p.metadata;
  if (md == null) return p;
  const keys = Object.keys(md);
  if (keys.every((k) => k.isWellFormed())) return p;
  const metadata: Record<string, Uint8Array> = {};
  for (const k of keys) {
    const w = k.toWellFormed();
    // A `__proto__` key stays an own property, as protobufjs decodes it.
    Object.defineProperty(metadata, w, { value: md[k], enumerable: true, writable: true, configurable: true });
  }
  return { ...p, metadata };
}

/** A failure (and its causes) with well-formed message, type, stack, code, details and encoded attributes. */
export function wellFormedFailure(f: FailureInfo): FailureInfo {
  let out: FailureInfo | undefined;
  for (const k of ['message', 'type', 'stack', 'code'] as const) {
    const v = f[k];
    if (typeof v === 'string' && !v.isWellFormed()) (out ??= { ...f })[k] = v.toWellFormed();
  }
  if (f.details != null) {
    const d = wellFormedPayload(f.details);
    if (d !== f.details) (out ??= { ...f }).details = d;
  }
  if (f.encodedAttributes != null) {
    const a = wellFormedPayload(f.encodedAttributes);
    if (a !== f.encodedAttributes) (out ??= { ...f }).encodedAttributes = a;
  }
  if (f.cause != null) {
    const c = wellFormedFailure(f.cause);
    if (c !== f.cause) (out ??= { ...f }).cause = c;
  }
  return out ?? f;
}

/** A policy whose non-retryable type names are well-formed (they are matched against failure types). */
export function wellFormedPolicy(p: TurnPolicy): TurnPolicy {
  const types = p.stepRetry?.nonRetryableTypes;
  if (!Array.isArray(types) || types.every((t) => typeof t !== 'string' || t.isWellFormed())) return p;
  return { ...p, stepRetry: { ...p.stepRetry, nonRetryableTypes: types.map((t) => (typeof t === 'string' ? t.toWellFormed() : t)) } };
}
