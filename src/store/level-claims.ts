/**
 * The LevelDB store's recovery scans (level-store.ts delegates both here): `claimDueWork`, a page
 * of the status index at a time with the page's summaries (and, for in-progress tasks, their heads
 * primed in one read), and the older `listRecoverable`, every in-progress task whose lease is dead.
 */
import type { CorruptMark, ClaimRequest, DueBatch } from './history-store.js';
import { claimFromIndex, type IndexEntry } from './due-work.js';
import { prefixEnd, sortIds, statusIndexPrefix, summaryKey, summaryKeyOf, taskBytesOfKey, taskIdOfKey } from './keys.js';
import type { LevelHeads, LevelStoreCalls } from './level-heads.js';
import type { LevelReads } from './level-reads.js';
import { decodeSummaryRecord } from './level-records.js';
import { decodeCursorBytes, encodeCursor } from './paging.js';
import { isRecoverable } from './task-head.js';

/** The recovery scans of one LevelHistoryStore; the store checks it is open before calling them. */
export class LevelClaims {
  readonly #cache: LevelHeads;
  readonly #reads: LevelReads;
  readonly #store: LevelStoreCalls;

  constructor(cache: LevelHeads, reads: LevelReads, store: LevelStoreCalls) {
    this.#cache = cache;
    this.#reads = reads;
    this.#store = store;
  }

  /** From the status index, a page at a time (store/due-work.ts has the rules). */
  claimDueWork(request: ClaimRequest): Promise<DueBatch> {
    const cache = this.#cache;
    let marks: Map<string, CorruptMark> | undefined;
    return claimFromIndex(request, async (status, cursor, limit) => {
      const prefix = statusIndexPrefix(status);
      const range = cursor === undefined ? { gte: prefix, lt: prefixEnd(prefix) } : { gt: decodeCursorBytes(cursor), lt: prefixEnd(prefix) };
      const keys = await cache.db.keys({ ...range, limit: limit + 1 }).all();
      const pageKeys = keys.slice(0, limit);
      const ids = pageKeys.map(taskIdOfKey);
      // Every key of the page's tasks from the id bytes in their index keys, each built once.
      const tasks = pageKeys.map(taskBytesOfKey);
      const summaryKeys = tasks.map(summaryKeyOf);
      const raws = ids.length ? await cache.db.getMany(summaryKeys) : [];
      if (status === 'completed' && ids.length) marks ??= await this.#reads.marks();
      const entries = ids.map((id, i): IndexEntry => {
        const raw = raws[i];
        if (raw === undefined) return { taskId: id };
        try {
          return { taskId: id, summary: decodeSummaryRecord(id, summaryKeys[i]!, raw), marked: marks?.has(id) ?? false };
        } catch {
          return { taskId: id, unreadable: true };
        }
      });
      // Leases matter only to in-progress tasks: the engine recovers these next, so their heads are
      // loaded here for the whole page in one read (LevelHeads.prime) and their appends read nothing.
      if (status === 'in_progress') {
        await cache.prime(entries, tasks);
        for (const e of entries) if (e.summary) e.lease = cache.cached(e.taskId)?.lease;
      }
      return keys.length > limit ? { entries, next: encodeCursor(pageKeys[pageKeys.length - 1]!) } : { entries };
    });
  }

  async listRecoverable(now: number, instance: string): Promise<string[]> {
    const prefix = statusIndexPrefix('in_progress');
    const keys = await this.#cache.db.keys({ gte: prefix, lt: prefixEnd(prefix) }).all();
    const ids = keys.map(taskIdOfKey);
    const raws = await this.#cache.db.getMany(ids.map(summaryKey));
    const out: string[] = [];
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      const raw = raws[i];
      if (raw === undefined) continue;
      try {
        if (isRecoverable(decodeSummaryRecord(id, summaryKey(id), raw), await this.#store.getLease(id), now, instance)) out.push(id);
      } catch {
        // An unreadable summary or lease: return the task, so the engine loads it, finds what
        // is corrupt and isolates that one task instead of the whole scan failing.
        out.push(id);
      }
    }
    return sortIds(out);
  }
}
