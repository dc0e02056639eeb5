/**
 * The LevelDB store's checks at open (level-store.ts's open): the directory before LevelDB writes
 * a byte (store-dir.ts), a failure to open as the caller's error, and the store's format record.
 */
import type { Level } from 'level';
import { HistoryCorruptError, StoreLockedError, TurnlogError, isTurnlogError } from '../errors.js';
import { HISTORY_FORMAT_VERSION } from '../history/events.js';
import { STORE_FORMAT_VERSION, describeKey, metaKey } from './keys.js';
import { parseJson } from './level-records.js';
import { inspectStoreDir } from './store-dir.js';

const FORMAT_META = 'format';

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
