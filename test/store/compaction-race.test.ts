// Review: two compactions of one task race (engines on a shared store: one computed its cut
// from an older read, e.g. a zombie or a stalled engine). The later cut lands first; the older
// one must not overwrite event 2 with a state that ends before the events already deleted,
// which would leave a hole (events through+1..later cut gone) and a corrupt task.
import { afterEach, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import type { HistoryEvent } from '../../src/history/events.js';
import { compaction } from '../../src/replay/compact.js';
import { fold } from '../../src/replay/fold.js';
import type { HistoryStore } from '../../src/store/history-store.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { encodeState } from '../../src/history/state-codec.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { PG_URL, dropSchema, pgEnabled, uniqueSchema } from '../helpers/postgres.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

function chat(turns: number): HistoryEvent[] {
  const b = historyBuilder('t', { tick: 10 }).created({ kind: 'multi-turn' });
  const m: string[] = [];
  for (let i = 1; i <= turns; i++) {
    m.push(`m${i}`);
    b.input(`m${i}`).turnStarted().step('model', `r${i}`).suspended('waiting', { output: `r${i}`, state: { m: [...m] } });
  }
  return b.build();
}

const stores: [string, () => Promise<HistoryStore>][] = [
  ['memory', async () => {
    const s = new MemoryHistoryStore();
    await s.open();
    return s;
  }],
  ['level', async () => {
    const d = await makeTmpDir('turnlog-review-cr-');
    const s = new LevelHistoryStore(join(d.path, 'store'));
    await s.open();
    cleanups.push(() => d.remove());
    cleanups.push(() => s.close());
    return s;
  }],
];
if (pgEnabled) {
  stores.push(['postgres', async () => {
    const schema = uniqueSchema('turnlog_review_cr');
    cleanups.push(() => dropSchema(schema));
    const s = createPostgresStore({ connectionString: PG_URL, schema, max: 2 });
    await s.open();
    cleanups.push(() => s.close());
    return s;
  }]);
}

describe.each(stores)('compactHistory race (%s)', (_name, make) => {
  it('an older cut applied after a later one changes nothing: the history stays whole and folds to the same state', async () => {
    const store = await make();
    const events = chat(8);
    await store.append('t', events, { expectedLastEventId: 0, generation: 1 });
    const stale = compaction('t', events, 4)!; // computed from the full history: cut at turn 4
    const later = compaction('t', events, 2)!; // cut at turn 6
    expect(stale.throughEventId).toBeLessThan(later.throughEventId);
    await store.compactHistory!('t', later);
    await store.compactHistory!('t', stale);
    const after = await store.readEvents('t');
    expect(Buffer.from(encodeState(fold('t', after)))).toEqual(Buffer.from(encodeState(fold('t', events))));
  });
});
