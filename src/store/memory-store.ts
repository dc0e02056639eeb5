/**
 * An in-memory {@link HistoryStore} with the Level store's semantics (same contract suite).
 * For tests and ephemeral engines; nothing survives the process.
 */
import { TurnlogError, invalidArgument } from '../errors.js';
import { checkRefBytes, externalize, resolveAll } from './payload-refs.js';
import { isLaterCut } from './task-head.js';
import type { HistoryEvent, Lease, TaskSummary } from '../history/events.js';
import type { LeaseRequest } from '../history/lease.js';
import type {
  CorruptMark,
  AppendOptions,
  AppendResult,
  ClaimRequest,
  DueBatch,
  HistoryStore,
  ListOptions,
  ReadOptions,
  StoredSnapshot,
  TaskPage,
} from './history-store.js';
import { checkTaskId } from './keys.js';
import { wellFormedEvent } from '../history/well-formed.js';
import {
  EMPTY_HEAD,
  applyAppend,
  applyClaim,
  applyRelease,
  applyRenew,
  isPurgeable,
  isRecoverable,
  withMark,
  type TaskHead,
} from './task-head.js';
import { decodeCursor, encodeCursor, pageLimit, readBounds } from './paging.js';
import { claimFromIndex } from './due-work.js';

interface MemoryTask {
  head: TaskHead;
  /** By event id - 1; undefined where compaction removed an event. */
  events: (HistoryEvent | undefined)[];
  snapshot: StoredSnapshot | undefined;
}

/**
 * Keeps every task in a Map. Values are copied in and out (structuredClone), so a caller that
 * mutates an event or summary it passed or received cannot change what the store holds.
 *
 * @example
 * const store = new MemoryHistoryStore();
 * await store.open();
 */
export class MemoryHistoryStore implements HistoryStore {
  readonly location: string;
  readonly exclusive = true;
  readonly supports = { exclusive: true, watch: false, claim: false, groupCommit: false, flowLimits: false } as const;
  #tasks = new Map<string, MemoryTask>();
  #corrupt = new Map<string, CorruptMark>();
  #open = false;

  /** Payloads above this many bytes are kept once per task by hash, events keep a reference. */
  readonly #refBytes: number | undefined;
  /** Per task: hash → data of its large payloads (deleted with the task). */
  #blobs = new Map<string, Map<string, Uint8Array>>();

  constructor(options: { location?: string; payloadRefBytes?: number } = {}) {
    this.location = options.location ?? 'memory:';
    this.#refBytes = checkRefBytes(options.payloadRefBytes);
  }

  /** How many distinct large payloads a task's history references (tests, docs). */
  payloadRefCount(taskId: string): number {
    return this.#blobs.get(taskId)?.size ?? 0;
  }

  async open(): Promise<void> {
    this.#open = true;
  }

  async close(): Promise<void> {
    this.#open = false;
  }

  #check(): void {
    if (!this.#open) {
      throw new TurnlogError('TURNLOG_STORE_CLOSED', `Store ${this.location} is not open. Call open() first.`);
    }
  }

  #task(taskId: string): MemoryTask | undefined {
    this.#check();
    checkTaskId(taskId);
    return this.#tasks.get(taskId);
  }

  async append(taskId: string, events: readonly HistoryEvent[], options: AppendOptions): Promise<AppendResult> {
    const t = this.#task(taskId);
    const head = applyAppend(taskId, t?.head ?? EMPTY_HEAD, events, options);
    // Free text is stored well-formed, as the Level store's codec stores it (same contract).
    const blobs = new Map<string, Uint8Array>();
    const copies = structuredClone(events.map((e) => externalize(wellFormedEvent(e, taskId), this.#refBytes, blobs))) as HistoryEvent[];
    if (blobs.size > 0) {
      const mine = this.#blobs.get(taskId) ?? new Map<string, Uint8Array>();
      for (const [h, d] of blobs) if (!mine.has(h)) mine.set(h, d.slice());
      this.#blobs.set(taskId, mine);
    }
    if (t) {
      t.events.push(...copies);
      t.head = head;
    } else {
      this.#tasks.set(taskId, { head, events: copies, snapshot: undefined });
    }
    return { lastEventId: head.lastEventId, summary: structuredClone(head.summary!) };
  }

  async readEvents(taskId: string, options: ReadOptions = {}): Promise<HistoryEvent[]> {
    const t = this.#task(taskId);
    if (!t) return [];
    const { from, to, limit } = readBounds(options);
    const out: HistoryEvent[] = [];
    for (let id = from; id <= Math.min(to, t.events.length) && out.length < limit; id++) {
      const e = t.events[id - 1];
      if (e !== undefined) out.push(e); // undefined: compacted away
    }
    const blobs = this.#blobs.get(taskId);
    return resolveAll(taskId, structuredClone(out), async (h) => blobs?.get(h)?.slice());
  }

  async *iterateEvents(taskId: string, options: ReadOptions = {}): AsyncIterable<HistoryEvent> {
    const { from, to, limit } = readBounds(options);
    let next = from;
    let left = limit;
    while (left > 0 && next <= to) {
      const page = await this.readEvents(taskId, { fromEventId: next, toEventId: to, limit: Math.min(256, left) });
      if (page.length === 0) return;
      for (const e of page) yield e;
      next = page[page.length - 1]!.eventId + 1;
      left -= page.length;
    }
  }

  async getSummary(taskId: string): Promise<TaskSummary | undefined> {
    const s = this.#task(taskId)?.head.summary;
    return s && structuredClone(s);
  }

  async listTasks(options: ListOptions = {}): Promise<TaskPage> {
    this.#check();
    const limit = pageLimit(options.limit);
    const after = options.cursor === undefined ? undefined : decodeCursor(options.cursor);
    // Same order as the Level store's indexes: by task id (status + workflow: by workflow, then id).
    const rows: [string, TaskSummary][] = [];
    for (const [id, t] of this.#tasks) {
      const s = t.head.summary;
      if (!s) continue;
      if (options.status !== undefined && s.status !== options.status) continue;
      if (options.workflow !== undefined && s.workflow !== options.workflow) continue;
      const sortKey = options.status !== undefined && options.workflow === undefined ? `${s.workflow}\0${id}` : id;
      rows.push([sortKey, s]);
    }
    rows.sort((a, b) => compareBytes(a[0], b[0]));
    const start = after === undefined ? 0 : rows.findIndex(([k]) => compareBytes(k, after) > 0);
    const slice = start < 0 ? [] : rows.slice(start, start + limit);
    const page: TaskPage = { tasks: structuredClone(slice.map(([, s]) => withMark(s, this.#corrupt.get(s.taskId)))) };
    if (start >= 0 && start + limit < rows.length) page.next = encodeCursor(slice[slice.length - 1]![0]);
    return page;
  }

  async getLease(taskId: string): Promise<Lease | undefined> {
    const l = this.#task(taskId)?.head.lease;
    return l && { ...l };
  }

  async claimLease(taskId: string, request: LeaseRequest): Promise<Lease> {
    const t = this.#task(taskId);
    const lease = applyClaim(taskId, t?.head ?? EMPTY_HEAD, request);
    this.#setLease(taskId, t, lease);
    return { ...lease };
  }

  async renewLease(taskId: string, lease: Lease, durationMs: number, now: number): Promise<Lease> {
    const t = this.#task(taskId);
    const next = applyRenew(taskId, t?.head ?? EMPTY_HEAD, lease, durationMs, now);
    this.#setLease(taskId, t, next);
    return { ...next };
  }

  async releaseLease(taskId: string, lease: Lease, now: number): Promise<void> {
    const t = this.#task(taskId);
    if (!t) return;
    const next = applyRelease(taskId, t.head, lease, now);
    if (next) this.#setLease(taskId, t, next);
  }

  #setLease(taskId: string, t: MemoryTask | undefined, lease: Lease): void {
    if (t) t.head = { ...t.head, lease: { ...lease } };
    else this.#tasks.set(taskId, { head: { ...EMPTY_HEAD, lease: { ...lease } }, events: [], snapshot: undefined });
  }

  async listRecoverable(now: number, instance: string): Promise<string[]> {
    this.#check();
    const ids: string[] = [];
    for (const [id, t] of this.#tasks) {
      if (t.head.summary && isRecoverable(t.head.summary, t.head.lease, now, instance)) ids.push(id);
    }
    return ids.sort(compareBytes);
  }

  /** By task id within each status (store/due-work.ts has the rules). */
  async claimDueWork(request: ClaimRequest): Promise<DueBatch> {
    this.#check();
    return claimFromIndex(request, async (status, cursor, limit) => {
      const after = cursor === undefined ? undefined : decodeCursor(cursor);
      const ids: string[] = [];
      for (const [id, t] of this.#tasks) {
        if (t.head.summary?.status === status && (after === undefined || compareBytes(id, after) > 0)) ids.push(id);
      }
      ids.sort(compareBytes);
      const entries = ids.slice(0, limit).map((taskId) => {
        const head = this.#tasks.get(taskId)!.head;
        return { taskId, summary: { ...head.summary! }, lease: head.lease && { ...head.lease }, marked: this.#corrupt.has(taskId) };
      });
      return ids.length > limit ? { entries, next: encodeCursor(entries[entries.length - 1]!.taskId) } : { entries };
    });
  }

  async putSnapshot(taskId: string, snapshot: StoredSnapshot): Promise<void> {
    const t = this.#task(taskId);
    if (!t || snapshot.eventId < 1 || snapshot.eventId > t.head.lastEventId) {
      throw invalidArgument(
        `Task ${taskId}: snapshot at event ${snapshot.eventId} is beyond the history (last event ${t?.head.lastEventId ?? 0}). Snapshot only appended events.`,
      );
    }
    t.snapshot = { eventId: snapshot.eventId, data: snapshot.data.slice() };
  }

  async getSnapshot(taskId: string): Promise<StoredSnapshot | undefined> {
    const s = this.#task(taskId)?.snapshot;
    return s && { eventId: s.eventId, data: s.data.slice() };
  }

  /** Compaction: event 2 becomes `compacted`, events 3..throughEventId go. */
  async compactHistory(taskId: string, compacted: HistoryEvent): Promise<void> {
    const t = this.#task(taskId);
    if (!t || compacted.type !== 'HistoryCompacted' || compacted.eventId !== 2) throw invalidArgument(`Task ${taskId}: compactHistory takes a HistoryCompacted event 2 of a stored task.`);
    const cur = t.events[1];
    if (cur !== undefined && isLaterCut(cur, compacted.throughEventId)) return; // a later cut stands (level-store.ts)
    t.events[1] = structuredClone(compacted);
    for (let id = 3; id <= compacted.throughEventId; id++) t.events[id - 1] = undefined;
  }

  async deleteTask(taskId: string): Promise<void> {
    this.#task(taskId);
    this.#tasks.delete(taskId);
    this.#blobs.delete(taskId);
    this.#corrupt.delete(taskId);
  }

  async markCorrupt(mark: CorruptMark): Promise<void> {
    this.#check();
    checkTaskId(mark.taskId);
    this.#corrupt.set(mark.taskId, { ...mark });
  }

  async listCorrupt(): Promise<CorruptMark[]> {
    this.#check();
    return [...this.#corrupt.values()].map((m) => ({ ...m })).sort((a, b) => compareBytes(a.taskId, b.taskId));
  }

  async purgeCompleted(olderThanMs: number, now: number): Promise<string[]> {
    this.#check();
    const ids: string[] = [];
    for (const [id, t] of this.#tasks) {
      if (t.head.summary && isPurgeable(t.head.summary, olderThanMs, now) && !this.#corrupt.has(id)) ids.push(id);
    }
    for (const id of ids) this.#tasks.delete(id);
    return ids.sort(compareBytes);
  }
}

const utf8 = new TextEncoder();
/** Byte order of UTF-8, as LevelDB sorts keys (differs from UTF-16 `<` for astral characters). */
function compareBytes(a: string, b: string): number {
  return Buffer.compare(utf8.encode(a), utf8.encode(b));
}
