/**
 * The LevelDB key layout (docs/storage.md). Keys are bytes: a one-byte prefix per concern,
 * then the task id (UTF-8, no NUL), then a NUL separator where something follows it.
 * Event ids are fixed-width big-endian uint32, so byte order is event order.
 */
import type { TaskStatus } from '../history/events.js';
import { invalidArgument } from '../errors.js';
import { illFormedText } from '../history/well-formed.js';

/** Version of the key layout and record encodings; stored under the meta key. */
export const STORE_FORMAT_VERSION = 1;

/** One prefix byte per concern; docs/storage.md has the table. */
export const Prefix = {
  /** `e <task> 0x00 <u32be id>` → protobuf HistoryEvent */
  event: 0x65,
  /** `s <task>` → JSON TaskSummary */
  summary: 0x73,
  /** `l <task>` → JSON Lease */
  lease: 0x6c,
  /** `p <task>` → u32be event id + snapshot bytes */
  snapshot: 0x70,
  /** `i <status> 0x00 <workflow> 0x00 <task>` → empty (listTasks by status, status + workflow) */
  statusIndex: 0x69,
  /** `w <workflow> 0x00 <task>` → empty (listTasks by workflow) */
  workflowIndex: 0x77,
  /** `m <name>` → JSON (store format version) */
  meta: 0x6d,
  /** `x <task>` → JSON CorruptMark (a task the engine isolated as unreadable) */
  corrupt: 0x78,
  /** `b <task> 0x00 <sha256:hex>` → a large payload's data, referenced by the task's events */
  payload: 0x62,
} as const;

const enc = new TextEncoder();
const dec = new TextDecoder();

/** The one task-id rule (engine and stores): 1–200 characters, no control characters U+0000–U+001F. */
export const MAX_TASK_ID_LENGTH = 200;

/**
 * Task ids are key components (NUL separates them); the engine's start/send check the same rule.
 * Well-formed too: a lone surrogate encodes to U+FFFD, so two such ids would share one key and history.
 */
export function checkTaskId(taskId: string): void {
  if (typeof taskId !== 'string' || taskId.length === 0 || taskId.length > MAX_TASK_ID_LENGTH || /[\u0000-\u001f]/.test(taskId)) {
    throw invalidArgument(
      `Task id ${JSON.stringify(taskId)} is invalid. Use a non-empty string of at most ${MAX_TASK_ID_LENGTH} characters without control characters.`,
    );
  }
  if (!taskId.isWellFormed()) throw invalidArgument(`${illFormedText('Task id', taskId)}.`);
}

function concat(parts: readonly (Uint8Array | number)[]): Buffer {
  let len = 0;
  for (const p of parts) len += typeof p === 'number' ? 1 : p.length;
  const out = Buffer.allocUnsafe(len);
  let at = 0;
  for (const p of parts) {
    if (typeof p === 'number') out[at++] = p;
    else {
      out.set(p, at);
      at += p.length;
    }
  }
  return out;
}

/** Precomputed `e <task> 0x00`; eventKey appends the id (the append path builds many). */
export function eventPrefix(taskId: string): Buffer {
  return concat([Prefix.event, enc.encode(taskId), 0]);
}

export function eventKey(taskId: string, eventId: number, prefix = eventPrefix(taskId)): Buffer {
  const key = Buffer.allocUnsafe(prefix.length + 4);
  prefix.copy(key, 0);
  key.writeUInt32BE(eventId, prefix.length);
  return key;
}

/** The range holding every event of a task: [gte, lt). */
export function eventRange(taskId: string, from = 1, to = 0xffffffff): { gte: Buffer; lte: Buffer } {
  const prefix = eventPrefix(taskId);
  return { gte: eventKey(taskId, from, prefix), lte: eventKey(taskId, to, prefix) };
}

export function eventIdOfKey(key: Uint8Array): number {
  return Buffer.from(key.buffer, key.byteOffset, key.byteLength).readUInt32BE(key.length - 4);
}

export function summaryKey(taskId: string): Buffer {
  return concat([Prefix.summary, enc.encode(taskId)]);
}
/** {@link summaryKey} from the task id's UTF-8 bytes (a claim has them in its index keys: no encoding). */
export function summaryKeyOf(task: Uint8Array): Buffer {
  return concat([Prefix.summary, task]);
}
/** {@link snapshotKey} from the task id's UTF-8 bytes. */
export function snapshotKeyOf(task: Uint8Array): Buffer {
  return concat([Prefix.snapshot, task]);
}
export function leaseKey(taskId: string): Buffer {
  return concat([Prefix.lease, enc.encode(taskId)]);
}
export function snapshotKey(taskId: string): Buffer {
  return concat([Prefix.snapshot, enc.encode(taskId)]);
}
export function payloadKey(taskId: string, hash: string): Buffer {
  return concat([Prefix.payload, enc.encode(taskId), 0x00, enc.encode(hash)]);
}
/** Every large payload of one task. */
export function payloadRange(taskId: string): { gte: Buffer; lt: Buffer } {
  const p = concat([Prefix.payload, enc.encode(taskId), 0x00]);
  return { gte: p, lt: concat([Prefix.payload, enc.encode(taskId), 0x01]) };
}
export function corruptKey(taskId: string): Buffer {
  return concat([Prefix.corrupt, enc.encode(taskId)]);
}
export function metaKey(name: string): Buffer {
  return concat([Prefix.meta, enc.encode(name)]);
}

export function statusIndexPrefix(status: TaskStatus, workflow?: string): Buffer {
  return workflow === undefined
    ? concat([Prefix.statusIndex, enc.encode(status), 0])
    : concat([Prefix.statusIndex, enc.encode(status), 0, enc.encode(workflow), 0]);
}
export function statusIndexKey(status: TaskStatus, workflow: string, taskId: string): Buffer {
  return concat([Prefix.statusIndex, enc.encode(status), 0, enc.encode(workflow), 0, enc.encode(taskId)]);
}
export function workflowIndexPrefix(workflow: string): Buffer {
  return concat([Prefix.workflowIndex, enc.encode(workflow), 0]);
}
export function workflowIndexKey(workflow: string, taskId: string): Buffer {
  return concat([Prefix.workflowIndex, enc.encode(workflow), 0, enc.encode(taskId)]);
}
export function prefixOnly(prefix: number): Buffer {
  return Buffer.from([prefix]);
}

/** Task id of an index or summary key: the bytes after the last NUL (or after the prefix byte). */
export function taskIdOfKey(key: Uint8Array): string {
  return dec.decode(taskBytesOfKey(key));
}

/** The task id's UTF-8 bytes in an index or summary key (a view): what {@link taskIdOfKey} decodes. */
export function taskBytesOfKey(key: Uint8Array): Uint8Array {
  const at = key.lastIndexOf(0);
  return key.subarray(at < 0 ? 1 : at + 1);
}

/** Smallest key greater than every key starting with `prefix` (for `lt` bounds). */
export function prefixEnd(prefix: Uint8Array): Buffer {
  const end = Buffer.from(prefix);
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i]! < 0xff) {
      end[i]!++;
      return end.subarray(0, i + 1);
    }
  }
  return Buffer.from([0xff, 0xff, 0xff, 0xff]);
}

/** A key as text for error messages: `events/<task>/<id>`, `summary/<task>`, … */
export function describeKey(key: Uint8Array): string {
  const body = dec.decode(key.subarray(1));
  switch (key[0]) {
    case Prefix.event:
      return `events/${dec.decode(key.subarray(1, key.length - 5))}/${eventIdOfKey(key)}`;
    case Prefix.summary:
      return `summary/${body}`;
    case Prefix.lease:
      return `lease/${body}`;
    case Prefix.snapshot:
      return `snapshot/${body}`;
    case Prefix.meta:
      return `meta/${body}`;
    case Prefix.corrupt:
      return `corrupt/${body}`;
    default:
      return `index/${body.replaceAll('\0', '/')}`;
  }
}

const STATUSES: readonly TaskStatus[] = ['pending', 'in_progress', 'suspended', 'completed'];
const STATUS_BYTES = new Map<string, Uint8Array>(STATUSES.map((st) => [st, enc.encode(st)]));

/** Workflow names as UTF-8, shared by every task's keys (a deployment has few names; a bounded cache). */
const WORKFLOW_BYTES = new Map<string, Uint8Array>();
const MAX_WORKFLOW_NAMES = 1_024;
function workflowBytes(workflow: string): Uint8Array {
  let bytes = WORKFLOW_BYTES.get(workflow);
  if (bytes === undefined) {
    bytes = enc.encode(workflow);
    if (WORKFLOW_BYTES.size < MAX_WORKFLOW_NAMES) WORKFLOW_BYTES.set(workflow, bytes);
  }
  return bytes;
}

/**
 * The keys of one task, UTF-8-encoded once: the append path writes the summary key on every
 * append and moves the status index on every turn start and end, and encoding the task id and
 * workflow again each time (TextEncoder) was the store's largest CPU item. Same bytes as the
 * functions above (test/store/keys.test.ts). The Level store keeps one per cached task head, so
 * it holds no more than it needs: the task id's bytes are read from the event prefix, the
 * workflow's are shared, and only the last two status index keys are kept (a task moves between
 * two statuses at a time). A Map and two encoded arrays per task were ~600 of the ~5,000 bytes a
 * recovered task kept (heap snapshot, 10,000 tasks).
 */
export class TaskKeys {
  readonly taskId: string;
  /** `e <task> 0x00`: {@link eventKey} appends the id. */
  readonly eventPrefix: Buffer;
  readonly summary: Buffer;
  readonly lease: Buffer;
  #workflow: string | undefined;
  #workflowIndex: Buffer | undefined;
  #status: TaskStatus | undefined;
  #statusKey: Buffer | undefined;
  #otherStatus: TaskStatus | undefined;
  #otherStatusKey: Buffer | undefined;

  /** `task`: the id's UTF-8 bytes when the caller has them (a claim reads them in index keys). */
  constructor(taskId: string, task: Uint8Array = enc.encode(taskId)) {
    this.taskId = taskId;
    this.eventPrefix = concat([Prefix.event, task, 0]);
    this.summary = concat([Prefix.summary, task]);
    this.lease = concat([Prefix.lease, task]);
  }

  /** The task id's bytes: a view of the event prefix. */
  #task(): Uint8Array {
    return this.eventPrefix.subarray(1, this.eventPrefix.length - 1);
  }

  #useWorkflow(workflow: string): void {
    if (workflow === this.#workflow) return;
    this.#workflow = workflow;
    this.#workflowIndex = undefined;
    this.#status = this.#otherStatus = undefined;
    this.#statusKey = this.#otherStatusKey = undefined;
  }

  /** {@link statusIndexKey} of this task; the last two are cached for the current workflow. */
  statusIndex(status: TaskStatus, workflow: string): Buffer {
    this.#useWorkflow(workflow);
    if (status === this.#status) return this.#statusKey!;
    if (status === this.#otherStatus) return this.#otherStatusKey!;
    const st = STATUS_BYTES.get(status) ?? enc.encode(status);
    const key = concat([Prefix.statusIndex, st, 0, workflowBytes(workflow), 0, this.#task()]);
    this.#otherStatus = this.#status;
    this.#otherStatusKey = this.#statusKey;
    this.#status = status;
    this.#statusKey = key;
    return key;
  }

  /** {@link workflowIndexKey} of this task. */
  workflowIndex(workflow: string): Buffer {
    this.#useWorkflow(workflow);
    return (this.#workflowIndex ??= concat([Prefix.workflowIndex, workflowBytes(workflow), 0, this.#task()]));
  }
}

/** Task ids in key order (their UTF-8 bytes), sorted in place. */
export function sortIds(ids: string[]): string[] {
  return ids.sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
}
