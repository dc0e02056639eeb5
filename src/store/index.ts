/**
 * The store module's public surface: the contract, the two implementations and `openStore`.
 * Only this folder imports `level` (docs/storage.md).
 */
export type {
  CorruptMark,
  AppendOptions,
  AppendResult,
  HistoryStore,
  ListOptions,
  ReadOptions,
  StoredSnapshot,
  TaskPage,
} from './history-store.js';
export { LevelHistoryStore, type LevelHistoryStoreOptions } from './level-store.js';
export { MemoryHistoryStore } from './memory-store.js';
export { STORE_FORMAT_VERSION } from './keys.js';

import type { HistoryStore } from './history-store.js';
import { LevelHistoryStore, type LevelHistoryStoreOptions } from './level-store.js';

/**
 * Opens a store: a directory path becomes a {@link LevelHistoryStore}; a store object is
 * opened and returned as is.
 *
 * @example
 * const store = await openStore('./data/turnlog');
 */
export async function openStore(
  pathOrStore: string | HistoryStore,
  options: LevelHistoryStoreOptions = {},
): Promise<HistoryStore> {
  const store = typeof pathOrStore === 'string' ? new LevelHistoryStore(pathOrStore, options) : pathOrStore;
  await store.open();
  return store;
}
