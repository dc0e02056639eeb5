/**
 * The LevelDB store's checks at open (level-store.ts's open): the directory before LevelDB writes
 * a byte (store-dir.ts), a failure to open as the caller's error, and the store's format record.
 */
import type { Level } from 'level';
import { HistoryCorruptError, StoreLockedError, TurnlogError, isTurnlogError } from '../errors.js';
import { HISTORY_FORMAT_VERSION } from '../history/events.js';
import type { HistoryEvent } from '../history/events.js';
import { summarize } from '../history/summary.js';
import { STORE_FORMAT_VERSION, describeKey, metaKey, prefixEnd, statusIndexPrefix, summaryKey, taskIdOfKey } from './keys.js';
import { parseJson } from './level-records.js';
import { decodeSummary, encodeSummary } from './records.js';
import { inspectStoreDir } from './store-dir.js';

const FORMAT_META = 'format';
/** Present once every summary carries `cancelRequested` (written by this build, or derived at open). */
const CANCEL_META = 'summary-cancel-requested';

/** Refuses, before LevelDB writes a byte, a directory that is not a turnlog store (store-dir.ts). */
export async function checkDirectory(location: string, create: boolean): Promise<void> {
  const state = await inspectStoreDir(location);
  if (state === 'store' || (create && (state === 'missing' || state === 'empty'))) return;
  const what =
    state === 'not-directory'
      ? 'is not a directory'
      : state === 'foreign'
        ? 'is a non-empty directory that holds no turnlog store'
        : 'holds no turnlog store';
  throw new TurnlogError(
    'TURNLOG_STORE_NOT_FOUND',
    `Store ${location} ${what}; nothing was written to it. Point the store at its own directory (default .turnlog), or at an existing store.`,
  );
}

/** Writes the format record into a new store; refuses a LevelDB that is not turnlog's, or a newer store format. */
export async function checkFormat(db: Level<Buffer, Buffer>, location: string): Promise<void> {
  const key = metaKey(FORMAT_META);
  const raw = await db.get(key);
  if (raw === undefined) {
    // A LevelDB with data but no turnlog meta record belongs to something else: leave it alone.
    if ((await db.keys({ limit: 1 }).all()).length > 0) {
      throw new TurnlogError(
        'TURNLOG_STORE_NOT_FOUND',
        `Store ${location} is a LevelDB written by something other than turnlog (it has no turnlog format record); nothing was written to it. Point the store at its own directory.`,
      );
    }
    const meta = { store: STORE_FORMAT_VERSION, history: HISTORY_FORMAT_VERSION };
    await db.put(key, Buffer.from(JSON.stringify(meta)), { sync: true });
    return;
  }
  const meta = parseJson(raw, key) as { store?: unknown };
  if (typeof meta.store !== 'number') throw new HistoryCorruptError(describeKey(key), 'no store format version');
  if (meta.store > STORE_FORMAT_VERSION) {
    throw new TurnlogError(
      'TURNLOG_HISTORY_FORMAT',
      `Store ${location} has store format version ${meta.store}; this build reads up to ${STORE_FORMAT_VERSION}. Upgrade turnlog to open it.`,
    );
  }
}

/**
 * Once per store: summaries written before `cancelRequested` existed get it from their history
 * (a task cancel left pending by an older build, docs/recovery.md#a-task-cancel-left-pending).
 * Reads the history of every task not completed, once; a history that cannot be read is skipped
 * (the claim of due work isolates it). Returns how many summaries it marked.
 */
export async function deriveCancelRequested(db: Level<Buffer, Buffer>, readEvents: (taskId: string) => Promise<HistoryEvent[]>): Promise<number> {
  const key = metaKey(CANCEL_META);
  if ((await db.get(key)) !== undefined) return 0;
  let marked = 0;
  for (const status of ['pending', 'in_progress', 'suspended'] as const) {
    const prefix = statusIndexPrefix(status);
    for await (const k of db.keys({ gte: prefix, lt: prefixEnd(prefix) })) {
      const taskId = taskIdOfKey(k);
      const raw = await db.get(summaryKey(taskId));
      if (raw === undefined) continue;
      try {
        const stored = decodeSummary(taskId, raw);
        if (stored.cancelRequested) continue;
        const rebuilt = summarize(taskId, undefined, await readEvents(taskId));
        if (!rebuilt.cancelRequested || rebuilt.lastEventId !== stored.lastEventId) continue;
        await db.put(summaryKey(taskId), encodeSummary({ ...stored, cancelRequested: true }));
        marked++;
      } catch {
        // Unreadable: left as it is, for the engine to isolate.
      }
    }
  }
  await db.put(key, Buffer.from('{}'), { sync: true });
  return marked;
}

/** Why `location` could not be opened: a lock another process holds, else the OS's reason. */
export function openError(location: string, err: unknown): Error {
  if (isTurnlogError(err)) return err as Error;
  if (isLockedError(err)) return new StoreLockedError(location, { cause: err });
  return new TurnlogError(
    'TURNLOG_STORE_OPEN',
    `Store ${location} could not be opened: ${osCause(err)}. Check that the path names a directory this process may create and write.`,
    { cause: err },
  );
}

/** The innermost cause's message (`ENOTDIR: not a directory, mkdir '…'`): LevelDB's own is generic. */
function osCause(err: unknown): string {
  let e = err as { message?: unknown; cause?: unknown } | undefined;
  for (let i = 0; i < 5 && e && typeof e.cause === 'object' && e.cause !== null; i++) e = e.cause as typeof e;
  return typeof e?.message === 'string' ? e.message : String(err);
}

/** classic-level reports a held lock as LEVEL_LOCKED, directly or as the open error's cause. */
function isLockedError(err: unknown): boolean {
  for (let e = err as { code?: unknown; cause?: unknown } | undefined, i = 0; e && i < 5; e = e.cause as typeof e, i++) {
    if (e.code === 'LEVEL_LOCKED') return true;
  }
  return false;
}
