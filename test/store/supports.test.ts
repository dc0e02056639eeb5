/**
 * The `supports` manifest of each store, as the table of docs/storage.md#the-interface-for-future-backends
 * lists it (no I/O: the manifest is known before open).
 */
import { expect, it } from 'vitest';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';

it('every store states each capability of the table, flowLimits included', () => {
  const url = 'postgres://nobody@127.0.0.1:1/none';
  expect({ ...new LevelHistoryStore('/nonexistent/turnlog-supports').supports }).toEqual({ exclusive: true, watch: false, claim: false, groupCommit: true, flowLimits: false });
  expect({ ...new MemoryHistoryStore().supports }).toEqual({ exclusive: true, watch: false, claim: false, groupCommit: false, flowLimits: false });
  expect({ ...createPostgresStore({ connectionString: url }).supports }).toEqual({ exclusive: false, watch: true, claim: true, groupCommit: true, flowLimits: true });
  expect(createPostgresStore({ connectionString: url, groupCommit: false }).supports.groupCommit).toBe(false);
  for (const s of [new MemoryHistoryStore(), createPostgresStore({ connectionString: url })]) expect(s.exclusive).toBe(s.supports.exclusive);
});
