import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import * as vitest from 'vitest';
import { storeContract } from '../../src/testing/index.js';

storeContract(vitest, 'MemoryHistoryStore', async () => {
  const store = new MemoryHistoryStore();
  await store.open();
  return { store, dispose: () => store.close() };
}, { callerClock: true });
