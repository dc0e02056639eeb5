import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { storeContract } from './contract.js';

storeContract('MemoryHistoryStore', async () => {
  const store = new MemoryHistoryStore();
  await store.open();
  return { store, dispose: () => store.close() };
}, { callerClock: true });
