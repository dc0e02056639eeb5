/**
 * The PostgreSQL store's answer to a lost connection during an append: a COMMIT may have reached
 * the server while its reply never came back. Before each retry, and before reporting a retry's
 * refusal, the stored events decide whether the append landed (compared as written), so a retry
 * never writes twice and a landed append is never reported as a lost race.
 */
import { TurnlogError } from '../errors.js';
import { encodeEvent } from '../history/codec.js';
import type { HistoryEvent } from '../history/events.js';
import { summarize } from '../history/summary.js';
import type { AppendResult } from './history-store.js';
import { externalize } from './payload-refs.js';
import { routine, type AppendRequest } from './postgres-append-request.js';
import type { PgStoreContext } from './postgres-context.js';
import { getSummary, readEvents } from './postgres-reads.js';
import { CONNECTION_TRIES, asBuffer, isConnectionLoss } from './postgres-rows.js';

/**
 * An append (`again` tries it once) after a try failed with `first` (`lost`: an earlier try lost
 * its connection): retried while the connection is lost, up to CONNECTION_TRIES, each time first
 * checking whether the lost try landed. After a lost connection, a later try's refusal (the head
 * moved: TURNLOG_CONCURRENCY) may be the lost try itself, committed after the check looked (its
 * statement still waited on a lock, or was on its way): the stored events decide (test:
 * store/postgres-lost-reply-tcp).
 */
export async function retryAfterLoss(ctx: PgStoreContext, a: AppendRequest, first: unknown, again: (a: AppendRequest) => Promise<AppendResult>, lost = false): Promise<AppendResult> {
  let err = first;
  for (let attempt = 1; ; attempt++) {
    if (!isConnectionLoss(err)) {
      if (!lost) throw err;
      let landed: AppendResult | undefined;
      try {
        landed = await findLanded(ctx, a);
      } catch (checkErr) {
        // The refusal may be the lost try itself: with no answer from the stored events, "nothing
        // was written" would be a guess. Unavailable (retryable) says what is known.
        throw new TurnlogError(
          'TURNLOG_STORE_UNAVAILABLE',
          `Store ${ctx.location}: task ${a.taskId}'s append lost its connection, a retry was refused (${(err as Error)?.message ?? String(err)}), and whether the lost try landed could not be checked (${(checkErr as Error)?.message ?? String(checkErr)}). Read the task's history once PostgreSQL is reachable before appending again.`,
          { cause: checkErr },
        );
      }
      if (landed) return landed;
      throw err;
    }
    lost = true;
    const landed = await findLanded(ctx, a).catch(() => null);
    if (landed) return landed;
    if (attempt >= CONNECTION_TRIES) {
      throw new TurnlogError(
        'TURNLOG_STORE_UNAVAILABLE',
        `Store ${ctx.location}: task ${a.taskId}'s append lost its connection ${attempt} times (${(err as Error).message})${landed === null ? '; whether the last try landed could not be checked' : ''}. Retry once PostgreSQL is reachable.`,
        { cause: err },
      );
    }
    await new Promise((r) => setTimeout(r, 100 * 2 ** attempt));
    try {
      return await again(a);
    } catch (e) {
      err = e;
    }
  }
}

/**
 * The result of `a` if its events are stored exactly (a commit whose reply was lost; its notice goes
 * now), else undefined: its last event id and the summary as of that event, as the append returns.
 */
export async function findLanded(ctx: PgStoreContext, a: AppendRequest): Promise<AppendResult | undefined> {
  const from = a.options.expectedLastEventId + 1;
  const rows = await ctx.query(`SELECT data FROM ${ctx.s}.events WHERE task_id = $1 AND event_id BETWEEN $2 AND $3 ORDER BY event_id`, [a.taskId, from, from + a.events.length - 1]);
  // Compared as written: a large payload is stored by reference (externalize), not inline.
  const stored = (e: HistoryEvent): Buffer => asBuffer(encodeEvent(externalize(e, ctx.refBytes, new Map())));
  if (rows.length !== a.events.length || !rows.every((r: { data: Buffer }, i) => stored(a.events[i]!).equals(r.data))) return undefined;
  let summary = await getSummary(ctx, a.taskId);
  if (!summary) return undefined;
  const lastEventId = from + a.events.length - 1;
  // Appends landed after this one (another store's, while the reply was lost): the current summary
  // is theirs. The result is the summary this append made, folded from the history through it
  // (a compacted history gives the same: summarize reads HistoryCompacted's state).
  if (summary.lastEventId !== lastEventId) summary = summarize(a.taskId, undefined, await readEvents(ctx, a.taskId, { toEventId: lastEventId }));
  ctx.notifier!.add(a.taskId, lastEventId, routine(a.events));
  return { lastEventId, summary };
}
