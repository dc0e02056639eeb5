/**
 * Encodings of the derived records the Level store keeps beside events. The summary is
 * written with every append, so it is a compact JSON array (about a third of the object form's
 * bytes); docs/storage.md lists the fields. The store format version covers these encodings.
 */
import type { Lease, TaskOutcome, TaskStatus, TaskSummary, WorkflowKind } from '../history/events.js';

const KINDS: readonly WorkflowKind[] = ['one-shot', 'multi-turn'];
const STATUSES: readonly TaskStatus[] = ['pending', 'in_progress', 'suspended', 'completed'];
const OUTCOMES: readonly TaskOutcome[] = ['succeeded', 'failed', 'cancelled', 'timed_out'];

type SummaryRow = [string, number, number, number, number, number, number, string | null, number, number];

// The last workflow name and its JSON text as bytes: tasks share a handful of workflows.
let lastWorkflow = '';
let lastWorkflowJson = Buffer.from('""');

/**
 * Where the usual summary is written before its bytes are copied out (a summary is ~60 bytes).
 * Encoding is synchronous and calls no user code, so one scratch buffer serves every call.
 */
const scratch = Buffer.allocUnsafe(512);

/**
 * Writes a non-negative safe integer's decimal digits (what String(n) and JSON.stringify give it)
 * at `at`; returns the position after them.
 */
function writeNat(b: Buffer, at: number, n: number): number {
  let end = at;
  for (let v = n; v >= 10; v = Math.floor(v / 10)) end++;
  const after = end + 1;
  for (let v = n; ; ) {
    const q = Math.floor(v / 10);
    b[end--] = 48 + (v - q * 10);
    if (q === 0) break;
    v = q;
  }
  return after;
}

function isNat(n: unknown): n is number {
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0;
}

/** A string whose JSON text is itself in quotes: printable ASCII without `"` or `\` (generated ids are). */
function isPlainAscii(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c > 0x7e || c === 0x22 || c === 0x5c) return false;
  }
  return true;
}

/**
 * Encodes a summary row. Written with every append, so the usual case (whole non-negative numbers,
 * a plain ASCII last input id) is written byte by byte into a scratch buffer and copied out: no
 * row array and no intermediate strings (building it as text made ~20 strings and ~0.9 KB of
 * garbage an append; docs/performance.md). Anything else goes through JSON.stringify of the row.
 * Both give the same bytes (test/store/records.test.ts).
 */
export function encodeSummary(s: TaskSummary): Buffer {
  const workflow = s.workflow;
  const lastInputId = s.lastInputId;
  if (
    typeof workflow !== 'string' ||
    !(lastInputId === undefined || (typeof lastInputId === 'string' && isPlainAscii(lastInputId))) ||
    !isNat(s.lastEventId) ||
    !isNat(s.turn) ||
    !isNat(s.queued) ||
    !isNat(s.createdAt) ||
    !isNat(s.updatedAt) ||
    s.scheduled !== undefined ||
    s.cancelRequested !== undefined
  ) {
    return encodeSummaryRow(s);
  }
  if (workflow !== lastWorkflow) {
    lastWorkflowJson = Buffer.from(JSON.stringify(workflow));
    lastWorkflow = workflow;
  }
  const kind = KINDS.indexOf(s.kind);
  const status = STATUSES.indexOf(s.status);
  const w = lastWorkflowJson;
  // Brackets, commas, three one-digit codes, -1, five numbers of at most 16 digits, the id or null.
  if (kind < 0 || status < 0 || w.length + (lastInputId?.length ?? 0) + 110 > scratch.length) return encodeSummaryRow(s);
  const b = scratch;
  b[0] = 0x5b; // [
  w.copy(b, 1);
  let at = 1 + w.length;
  b[at++] = 0x2c;
  b[at++] = 48 + kind;
  b[at++] = 0x2c;
  b[at++] = 48 + status;
  b[at++] = 0x2c;
  const outcome = s.outcome === undefined ? -1 : OUTCOMES.indexOf(s.outcome);
  if (outcome < 0) b[at++] = 0x2d; // -
  b[at++] = 48 + Math.abs(outcome);
  b[at++] = 0x2c;
  at = writeNat(b, at, s.lastEventId);
  b[at++] = 0x2c;
  at = writeNat(b, at, s.turn);
  b[at++] = 0x2c;
  at = writeNat(b, at, s.queued);
  b[at++] = 0x2c;
  if (lastInputId === undefined) {
    b[at++] = 0x6e; // null
    b[at++] = 0x75;
    b[at++] = 0x6c;
    b[at++] = 0x6c;
  } else {
    b[at++] = 0x22;
    for (let i = 0; i < lastInputId.length; i++) b[at++] = lastInputId.charCodeAt(i);
    b[at++] = 0x22;
  }
  b[at++] = 0x2c;
  at = writeNat(b, at, s.createdAt);
  b[at++] = 0x2c;
  at = writeNat(b, at, s.updatedAt);
  b[at++] = 0x5d; // ]
  return copyOut(b, at);
}

/** The first `n` bytes of the scratch buffer in a pooled Buffer of their size (`allocUnsafe`). */
function copyOut(b: Buffer, n: number): Buffer {
  const out = Buffer.allocUnsafe(n);
  // A byte loop copies ~60–150 bytes faster than `copy`, and no subarray is made (wire.ts's finish).
  for (let i = 0; i < n; i++) out[i] = b[i]!;
  return out;
}

/** The reference encoding: JSON.stringify of the row (the fast path must give the same bytes). */
export function encodeSummaryRow(s: TaskSummary): Buffer {
  const row: SummaryRow = [
    s.workflow,
    KINDS.indexOf(s.kind),
    STATUSES.indexOf(s.status),
    s.outcome === undefined ? -1 : OUTCOMES.indexOf(s.outcome),
    s.lastEventId,
    s.turn,
    s.queued,
    s.lastInputId ?? null,
    s.createdAt,
    s.updatedAt,
  ];
  // A 12th member (1) only for a pending task cancel, an 11th (or null) only for scheduled
  // inputs: rows written before either still decode.
  if (s.cancelRequested) return Buffer.from(JSON.stringify([...row, s.scheduled ?? null, 1]));
  if (s.scheduled !== undefined) return Buffer.from(JSON.stringify([...row, s.scheduled]));
  return Buffer.from(JSON.stringify(row));
}

/** Decodes a summary row; throws a plain Error on a malformed one (the caller names the key). */
export function decodeSummary(taskId: string, raw: Uint8Array): TaskSummary {
  const row = JSON.parse(Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).toString('utf8')) as unknown;
  if (!Array.isArray(row) || row.length < 10 || row.length > 12) throw new Error('not a summary row');
  const [workflow, kind, status, outcome, lastEventId, turn, queued, lastInputId, createdAt, updatedAt] = row as SummaryRow;
  const k = KINDS[kind];
  const st = STATUSES[status];
  if (typeof workflow !== 'string' || k === undefined || st === undefined) throw new Error('bad summary fields');
  const s: TaskSummary = { taskId, workflow, kind: k, status: st, lastEventId, turn, queued, createdAt, updatedAt };
  const o = OUTCOMES[outcome];
  if (o !== undefined) s.outcome = o;
  if (typeof lastInputId === 'string') s.lastInputId = lastInputId;
  const scheduled: unknown = row[10];
  if (typeof scheduled === 'object' && scheduled !== null && !Array.isArray(scheduled)) s.scheduled = { ...(scheduled as Record<string, number>) };
  if (row[11] === 1) s.cancelRequested = true;
  return s;
}

// The last owner and instance and their JSON text as bytes: one engine writes every lease.
let lastOwner = '';
let lastOwnerJson = Buffer.from('""');
let lastInstance = '';
let lastInstanceJson = Buffer.from('""');
const OWNER = Buffer.from('{"owner":');
const INSTANCE = Buffer.from(',"instance":');
const GENERATION = Buffer.from(',"generation":');
const EXPIRES_AT = Buffer.from(',"expiresAt":');

/**
 * Encodes a lease record as the JSON object `{"owner","instance","generation","expiresAt"}`:
 * the bytes of JSON.stringify of a lease object with exactly these keys in this order (the
 * object the append path builds). Written byte by byte as {@link encodeSummary} is, with the
 * owner's and instance's JSON cached; anything else (a number that is not a whole non-negative
 * one, a non-string) goes through JSON.stringify of such an object.
 */
export function encodeLease(l: Lease): Buffer {
  const { owner, instance, generation, expiresAt } = l;
  if (typeof owner !== 'string' || typeof instance !== 'string' || !isNat(generation) || !isNat(expiresAt)) {
    return encodeLeaseObject(l);
  }
  if (owner !== lastOwner) {
    lastOwnerJson = Buffer.from(JSON.stringify(owner));
    lastOwner = owner;
  }
  if (instance !== lastInstance) {
    lastInstanceJson = Buffer.from(JSON.stringify(instance));
    lastInstance = instance;
  }
  const o = lastOwnerJson;
  const i = lastInstanceJson;
  if (o.length + i.length + 100 > scratch.length) return encodeLeaseObject(l);
  const b = scratch;
  let at = OWNER.copy(b, 0);
  at += o.copy(b, at);
  at += INSTANCE.copy(b, at);
  at += i.copy(b, at);
  at += GENERATION.copy(b, at);
  at = writeNat(b, at, generation);
  at += EXPIRES_AT.copy(b, at);
  at = writeNat(b, at, expiresAt);
  b[at++] = 0x7d; // }
  return copyOut(b, at);
}

/** The reference: JSON.stringify of `{ owner, instance, generation, expiresAt }`. */
export function encodeLeaseObject(l: Lease): Buffer {
  return Buffer.from(JSON.stringify({ owner: l.owner, instance: l.instance, generation: l.generation, expiresAt: l.expiresAt }));
}
