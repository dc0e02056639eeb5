/**
 * The store module's public surface: the contract, the implementations and `openStore`.
 * Only this folder imports `level` (docs/storage.md).
 */
export type {
  AppendNotice,
  CorruptMark,
  AppendOptions,
  AppendResult,
  HistoryStore,
  ListOptions,
  ReadOptions,
  StoredSnapshot,
  TaskPage,
  TaskStart,
} from './history-store.js';
export { LevelHistoryStore, type LevelHistoryStoreOptions } from './level-store.js';
export { MemoryHistoryStore } from './memory-store.js';
export { STORE_FORMAT_VERSION } from './keys.js';
export { PostgresHistoryStore, createPostgresStore, type PostgresStoreOptions } from './postgres-store.js';

import type { HistoryStore } from './history-store.js';
import { LevelHistoryStore, type LevelHistoryStoreOptions } from './level-store.js';
import { createPostgresStore, isPostgresUrl, parsePostgresUrl } from './postgres-store.js';

/**
 * Opens a store: a `postgres://…[?schema=name]` URL becomes a PostgreSQL store, a directory
 * path a {@link LevelHistoryStore}; a store object is opened and returned as is.
 *
 * @example
 * const store = await openStore('./data/turnlog');
 */
export async function openStore(
  pathOrStore: string | HistoryStore,
  options: LevelHistoryStoreOptions = {},
): Promise<HistoryStore> {
  const store =
    typeof pathOrStore !== 'string'
      ? pathOrStore
      : isPostgresUrl(pathOrStore)
        ? createPostgresStore(parsePostgresUrl(pathOrStore))
        : new LevelHistoryStore(pathOrStore, options);
  await store.open();
  return store;
}
