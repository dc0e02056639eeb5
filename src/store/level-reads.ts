/**
 * The LevelDB store's reads (level-store.ts delegates each public read here): events, with the
 * tail a claim read ahead or, for a loaded head, by keys in one getMany; summaries and leases from
 * the head cache when loaded; a claimed task's start; snapshots; task pages; corrupt marks. They
 * see what is on disk: queued appends become visible once they resolve.
 */
import { HistoryCorruptError, invalidArgument } from '../errors.js';
import type { HistoryEvent, Lease, TaskSummary } from '../history/events.js';
import { summarize } from '../history/summary.js';
import type { CorruptMark, ListOptions, ReadOptions, StoredSnapshot, TaskPage, TaskStart } from './history-store.js';
import {
  Prefix,
  checkTaskId,
  describeKey,
  eventKey,
  eventRange,
  leaseKey,
  payloadKey,
  prefixEnd,
  prefixOnly,
  snapshotKey,
  statusIndexPrefix,
  summaryKey,
  taskIdOfKey,
  workflowIndexPrefix,
} from './keys.js';
import type { HeadEntry, LevelHeads, LevelStoreCalls } from './level-heads.js';
import { decodeEventRecord, decodeSummaryRecord, parseJson } from './level-records.js';
import { MAX_EVENT_ID, decodeCursorBytes, encodeCursor, iterateInPages, pageLimit, readBounds } from './paging.js';
import { resolveAll } from './payload-refs.js';
import { withMark } from './task-head.js';

/** Longest span `readEvents` reads by keys in one `getMany` (#readKnown); longer ones are iterated. Above the engine's snapshot cadence (1,000): a recovered tail is one call. */
const GET_MANY_EVENTS = 2_048;

/** The reads of one LevelHistoryStore, over its head cache; the store checks nothing before calling them. */
export class LevelReads {
  readonly #cache: LevelHeads;
  readonly #store: LevelStoreCalls;
  /** The store's open check (TURNLOG_STORE_CLOSED) and its head lock (level-store.ts). */
  readonly #checkOpen: () => void;
  readonly #withHead: <T>(taskId: string, fn: (h: HeadEntry) => Promise<T>) => Promise<T>;

  constructor(
    cache: LevelHeads,
    store: LevelStoreCalls,
    checkOpen: () => void,
    withHead: <T>(taskId: string, fn: (h: HeadEntry) => Promise<T>) => Promise<T>,
  ) {
    this.#cache = cache;
    this.#store = store;
    this.#checkOpen = checkOpen;
    this.#withHead = withHead;
  }

  async readEvents(taskId: string, options: ReadOptions = {}): Promise<HistoryEvent[]> {
    this.#checkOpen();
    checkTaskId(taskId);
    const { from, to, limit } = readBounds(options);
    if (limit === 0 || from > to) return [];
    const hint = this.#cache.tailHints.get(taskId);
    if (hint) this.#cache.tailHints.delete(taskId);
    let events: HistoryEvent[];
    if (hint && hint.from === from && to === MAX_EVENT_ID && limit > hint.values.length) {
      // The hinted events and the last one: limit ≥ values + 1.
      events = hint.values.map((v, i) => decodeEventRecord(taskId, hint.keys[i]!, v));
      events.push(hint.last);
    } else {
      events = (await this.#readKnown(taskId, from, to, limit)) ?? (await this.#readRange(taskId, from, to, limit));
    }
    return resolveAll(taskId, events, async (hash) => {
      const v = await this.#cache.db.get(payloadKey(taskId, hash));
      return v === undefined ? undefined : new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
    });
  }

  /**
   * Events `from`…`to` of a task whose head is loaded, by their keys in one `getMany` (one
   * snapshot, one native call), when the head bounds the span to at most {@link GET_MANY_EVENTS}
   * keys: undefined otherwise, and the iterator reads. A missing key is a compaction cut (the
   * iterator skips it too); no event lies past the head, as every write goes through it. Under
   * load an iterator's several native round trips cost recovery of a 1,000-event tail 4-79 ms
   * against 1.4-12 ms for one `getMany` (docs/performance.md).
   */
  async #readKnown(taskId: string, from: number, to: number, limit: number): Promise<HistoryEvent[] | undefined> {
    const h = this.#cache.heads.get(taskId);
    if (h === undefined || h.ready !== null) return undefined;
    const last = Math.min(to, h.pending.lastEventId);
    const span = last - from + 1;
    if (span <= 0 || span > GET_MANY_EVENTS || span > limit) return undefined;
    const keys: Buffer[] = new Array<Buffer>(span);
    for (let i = 0; i < span; i++) keys[i] = eventKey(taskId, from + i, h.keys.eventPrefix);
    const cuts = this.#cache.cuts;
    const values = await this.#cache.db.getMany(keys);
    // A compaction or delete across the read: the iterator reads again.
    if (cuts !== this.#cache.cuts) return undefined;
    const events: HistoryEvent[] = [];
    for (let i = 0; i < span; i++) {
      const v = values[i];
      if (v !== undefined) events.push(decodeEventRecord(taskId, keys[i]!, v));
    }
    return events;
  }

  async #readRange(taskId: string, from: number, to: number, limit: number): Promise<HistoryEvent[]> {
    const range = eventRange(taskId, from, to);
    const entries = await this.#cache.db.iterator(Number.isFinite(limit) ? { ...range, limit } : range).all();
    return entries.map(([k, v]) => decodeEventRecord(taskId, k, v));
  }

  iterateEvents(taskId: string, options: ReadOptions = {}): AsyncIterable<HistoryEvent> {
    return iterateInPages((o) => this.#store.readEvents(taskId, o), options);
  }

  async getSummary(taskId: string): Promise<TaskSummary | undefined> {
    this.#checkOpen();
    checkTaskId(taskId);
    const cached = this.#cache.cached(taskId);
    if (cached) return cached.summary && { ...cached.summary };
    return (await this.summaries([taskId]))[0];
  }

  async getLease(taskId: string): Promise<Lease | undefined> {
    this.#checkOpen();
    checkTaskId(taskId);
    const cached = this.#cache.cached(taskId);
    if (cached) return cached.lease && { ...cached.lease };
    // Load the task's head (the engine appends next, e.g. when it recovers the task), so the
    // append reads nothing more. A head that cannot be loaded falls back to the lease alone.
    const viaHead = await this.#withHead(taskId, async (h) => h.durable.lease && { ...h.durable.lease }).then(
      (lease) => ({ lease }),
      () => undefined,
    );
    if (viaHead) return viaHead.lease;
    this.#checkOpen();
    const key = leaseKey(taskId);
    const raw = await this.#cache.db.get(key);
    // Not cached, so written by an earlier process: void, as in LevelHeads.load.
    return raw === undefined ? undefined : { ...(parseJson(raw, key) as Lease), expiresAt: 0 };
  }

  /** The store's readTaskStart: the claim's hand-out (LevelHeads.take) when there is one, else three reads. */
  readTaskStart(taskId: string, limit: number): Promise<TaskStart> {
    const start = this.#store.takeTaskStart(taskId, limit);
    return start === undefined ? this.#readTaskStart(taskId, limit) : Promise.resolve(start);
  }

  async #readTaskStart(taskId: string, limit: number): Promise<TaskStart> {
    const snapshot = await this.#store.getSnapshot(taskId);
    const events = await this.#store.readEvents(taskId, { fromEventId: (snapshot?.eventId ?? 0) + 1, limit });
    return { snapshot, events, lease: await this.#store.getLease(taskId) };
  }

  async getSnapshot(taskId: string): Promise<StoredSnapshot | undefined> {
    this.#checkOpen();
    checkTaskId(taskId);
    const key = snapshotKey(taskId);
    const hinted = this.#cache.snapshotHints.has(taskId);
    const raw = hinted ? this.#cache.snapshotHints.get(taskId) : await this.#cache.db.get(key);
    if (hinted) this.#cache.snapshotHints.delete(taskId);
    if (raw === undefined) return undefined;
    if (raw.length < 4) throw new HistoryCorruptError(describeKey(key), `${raw.length} bytes, need at least 4`);
    return { eventId: raw.readUInt32BE(0), data: new Uint8Array(raw.subarray(4)) };
  }

  /**
   * `rebuild` (listings): a summary that cannot be decoded is rebuilt from the task's history
   * (summaries are derived, invariant 1), so one bad record does not fail every task's listing.
   * It still throws when the history cannot be read either.
   */
  async summaries(taskIds: readonly string[], rebuild = false): Promise<(TaskSummary | undefined)[]> {
    if (taskIds.length === 0) return [];
    const keys = taskIds.map(summaryKey);
    const raws = await this.#cache.db.getMany(keys);
    const out: (TaskSummary | undefined)[] = [];
    for (let i = 0; i < raws.length; i++) {
      const raw = raws[i];
      const id = taskIds[i]!;
      try {
        out.push(raw === undefined ? undefined : decodeSummaryRecord(id, keys[i]!, raw));
      } catch (err) {
        if (!rebuild) throw err;
        const events = await this.#store.readEvents(id).catch(() => Promise.reject(err));
        out.push(events.length > 0 ? summarize(id, undefined, events) : undefined);
      }
    }
    return out;
  }

  async listTasks(options: ListOptions = {}): Promise<TaskPage> {
    this.#checkOpen();
    const limit = pageLimit(options.limit);
    const prefix =
      options.status !== undefined
        ? statusIndexPrefix(options.status, options.workflow)
        : options.workflow !== undefined
          ? workflowIndexPrefix(options.workflow)
          : prefixOnly(Prefix.summary);
    let after: Buffer | undefined;
    if (options.cursor !== undefined) {
      after = decodeCursorBytes(options.cursor);
      if (!after.subarray(0, prefix.length).equals(prefix)) {
        throw invalidArgument(`List cursor ${options.cursor} belongs to another filter. Pass the same status and workflow as the page that returned it.`);
      }
    }
    const range = after ? { gt: after, lt: prefixEnd(prefix) } : { gte: prefix, lt: prefixEnd(prefix) };
    const keys = await this.#cache.db.keys({ ...range, limit: limit + 1 }).all();
    const pageKeys = keys.slice(0, limit);
    const summaries = await this.summaries(pageKeys.map(taskIdOfKey), true);
    const marks = pageKeys.length === 0 ? undefined : await this.marks();
    const page: TaskPage = {
      tasks: summaries.filter((s): s is TaskSummary => s !== undefined).map((s) => withMark(s, marks?.get(s.taskId))),
    };
    if (keys.length > limit) page.next = encodeCursor(pageKeys[pageKeys.length - 1]!);
    return page;
  }

  async listCorrupt(): Promise<CorruptMark[]> {
    this.#checkOpen();
    return [...(await this.marks()).values()];
  }

  /** Corrupt marks by task id: a scan of the `x` prefix, which is empty in a healthy store. */
  async marks(): Promise<Map<string, CorruptMark>> {
    const prefix = prefixOnly(Prefix.corrupt);
    const out = new Map<string, CorruptMark>();
    for (const [k, v] of await this.#cache.db.iterator({ gte: prefix, lt: prefixEnd(prefix) }).all()) {
      const m = parseJson(v, k) as CorruptMark;
      out.set(taskIdOfKey(k), { ...m, taskId: taskIdOfKey(k) });
    }
    return out;
  }
}
