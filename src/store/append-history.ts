/**
 * Writes a whole history into a store through its `append` (imports and forks), so summaries
 * and indexes are derived the normal way (invariant 1).
 */
import type { HistoryEvent } from '../history/events.js';
import type { AppendOptions, HistoryStore } from './history-store.js';

/** Events per append; each append is one atomic batch. */
export const APPEND_HISTORY_CHUNK = 1000;

/**
 * Appends `events` in chunks. A chunk never spans two generations: the store requires every
 * event of an append to carry the append's generation (fencing, invariant 3). The last chunk
 * also writes a void (expired) lease for `leaseOwner` at the history's generation, so the first
 * claim afterwards is a new owner's and takes a new generation.
 */
export async function appendHistory(store: HistoryStore, taskId: string, events: readonly HistoryEvent[], leaseOwner: string, instance: string): Promise<void> {
  let i = 0;
  let last = 0;
  while (i < events.length) {
    const generation = events[i]!.generation;
    let j = i + 1;
    while (j < events.length && j - i < APPEND_HISTORY_CHUNK && events[j]!.generation === generation) j++;
    const options: AppendOptions = { expectedLastEventId: last, generation };
    if (j === events.length) options.lease = { owner: leaseOwner, instance, generation, expiresAt: 0 };
    last = (await store.append(taskId, events.slice(i, j), options)).lastEventId;
    i = j;
  }
}
