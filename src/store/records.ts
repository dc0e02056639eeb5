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

/** A number JSON.stringify writes as String(n) does (finite); anything else is left to it. */
function isJsonNumber(n: unknown): n is number {
  return typeof n === 'number' && Number.isFinite(n);
}

// The last workflow name and its JSON text: tasks share a handful of workflows.
let lastWorkflow = '';
let lastWorkflowJson = '""';

/**
 * Encodes a summary row. Written with every append, so the usual case is built as text directly
 * (no row array, the workflow's JSON cached); anything unusual (a non-finite number, a value of
 * the wrong type) goes through JSON.stringify of the row. Both give the same bytes
 * (test/store/records.test.ts).
 */
export function encodeSummary(s: TaskSummary): Buffer {
  const workflow = s.workflow;
  const lastInputId = s.lastInputId;
  if (
    typeof workflow === 'string' &&
    (lastInputId === undefined || typeof lastInputId === 'string') &&
    isJsonNumber(s.lastEventId) &&
    isJsonNumber(s.turn) &&
    isJsonNumber(s.queued) &&
    isJsonNumber(s.createdAt) &&
    isJsonNumber(s.updatedAt) &&
    s.scheduled === undefined
  ) {
    if (workflow !== lastWorkflow) {
      lastWorkflowJson = JSON.stringify(workflow);
      lastWorkflow = workflow;
    }
    const outcome = s.outcome === undefined ? -1 : OUTCOMES.indexOf(s.outcome);
    const text =
      '[' +
      lastWorkflowJson +
      ',' +
      KINDS.indexOf(s.kind) +
      ',' +
      STATUSES.indexOf(s.status) +
      ',' +
      outcome +
      ',' +
      s.lastEventId +
      ',' +
      s.turn +
      ',' +
      s.queued +
      ',' +
      (lastInputId === undefined ? 'null' : JSON.stringify(lastInputId)) +
      ',' +
      s.createdAt +
      ',' +
      s.updatedAt +
      ']';
    return Buffer.from(text);
  }
  return encodeSummaryRow(s);
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
  // An 11th member only for a task with scheduled inputs: rows written before it still decode.
  if (s.scheduled !== undefined) return Buffer.from(JSON.stringify([...row, s.scheduled]));
  return Buffer.from(JSON.stringify(row));
}

/** Decodes a summary row; throws a plain Error on a malformed one (the caller names the key). */
export function decodeSummary(taskId: string, raw: Uint8Array): TaskSummary {
  const row = JSON.parse(Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).toString('utf8')) as unknown;
  if (!Array.isArray(row) || (row.length !== 10 && row.length !== 11)) throw new Error('not a summary row');
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
  return s;
}

// The last owner and instance and their JSON text: one engine writes every lease.
let lastOwner = '';
let lastOwnerJson = '""';
let lastInstance = '';
let lastInstanceJson = '""';

/**
 * Encodes a lease record as the JSON object `{"owner","instance","generation","expiresAt"}`:
 * the bytes of JSON.stringify of a lease object with exactly these keys in this order (the
 * object the append path builds), with the owner's and instance's JSON cached. Unusual values
 * (a non-finite number, a non-string) go through JSON.stringify of such an object.
 */
export function encodeLease(l: Lease): Buffer {
  const { owner, instance, generation, expiresAt } = l;
  if (typeof owner !== 'string' || typeof instance !== 'string' || !isJsonNumber(generation) || !isJsonNumber(expiresAt)) {
    return encodeLeaseObject(l);
  }
  if (owner !== lastOwner) {
    lastOwnerJson = JSON.stringify(owner);
    lastOwner = owner;
  }
  if (instance !== lastInstance) {
    lastInstanceJson = JSON.stringify(instance);
    lastInstance = instance;
  }
  return Buffer.from(
    '{"owner":' + lastOwnerJson + ',"instance":' + lastInstanceJson + ',"generation":' + generation + ',"expiresAt":' + expiresAt + '}',
  );
}

/** The reference: JSON.stringify of `{ owner, instance, generation, expiresAt }`. */
export function encodeLeaseObject(l: Lease): Buffer {
  return Buffer.from(JSON.stringify({ owner: l.owner, instance: l.instance, generation: l.generation, expiresAt: l.expiresAt }));
}
