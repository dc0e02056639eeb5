/**
 * The PostgreSQL store's writes that keep histories small or set them aside, apart from appends:
 * snapshots (recovery reads only the tail after one), compaction, deletion of tasks and their
 * rows, and corrupt marks. Each write to a task runs after this store's earlier writes to it
 * (PgStoreContext.serial) under its row locks.
 */
import { invalidArgument } from '../errors.js';
import { decodeEvent, encodeEvent } from '../history/codec.js';
import type { HistoryEvent } from '../history/events.js';
import type { CorruptMark, StoredSnapshot } from './history-store.js';
import { checkTaskId } from './keys.js';
import { retainedSql } from './postgres-claims.js';
import type { PgStoreContext } from './postgres-context.js';
import type { SqlClient } from './postgres-migrations.js';
import { asBuffer } from './postgres-rows.js';
import { isLaterCut } from './task-head.js';

export async function putSnapshot(ctx: PgStoreContext, taskId: string, snapshot: StoredSnapshot): Promise<void> {
  ctx.checkedPool();
  checkTaskId(taskId);
  await ctx.serial(taskId, () => ctx.tx(async (c) => {
    const res = await c.query(`SELECT last_event_id FROM ${ctx.s}.summaries WHERE task_id = $1 FOR SHARE`, [taskId]);
    const last = res.rows.length ? Number(res.rows[0].last_event_id) : 0;
    if (!Number.isInteger(snapshot.eventId) || snapshot.eventId < 1 || snapshot.eventId > last) {
      throw invalidArgument(
        `Task ${taskId}: snapshot at event ${snapshot.eventId} is beyond the history (last event ${last}). Snapshot only appended events.`,
      );
    }
    await c.query(
      `INSERT INTO ${ctx.s}.snapshots (task_id, event_id, data) VALUES ($1, $2, $3)
       ON CONFLICT (task_id) DO UPDATE SET event_id = EXCLUDED.event_id, data = EXCLUDED.data`,
      [taskId, snapshot.eventId, Buffer.from(snapshot.data)],
    );
  }));
}

/** Compaction: event 2 becomes `compacted`, events 3..throughEventId go, in one transaction. */
export async function compactHistory(ctx: PgStoreContext, taskId: string, compacted: HistoryEvent): Promise<void> {
  ctx.checkedPool();
  checkTaskId(taskId);
  if (compacted.type !== 'HistoryCompacted' || compacted.eventId !== 2) throw invalidArgument(`Task ${taskId}: compactHistory takes a HistoryCompacted event 2.`);
  await ctx.serial(taskId, () => ctx.tx(async (c) => {
    await ctx.lockHead(c, taskId);
    // A later cut already written (another engine's) stands (level-store.ts).
    const cur = await c.query(`SELECT data FROM ${ctx.s}.events WHERE task_id = $1 AND event_id = 2`, [taskId]);
    const row = cur.rows[0] as { data: Buffer } | undefined;
    if (row && isLaterCut(decodeEvent(new Uint8Array(row.data.buffer, row.data.byteOffset, row.data.byteLength), taskId, `${ctx.location} events(${JSON.stringify(taskId)}, 2)`), compacted.throughEventId)) return;
    await c.query(`UPDATE ${ctx.s}.events SET data = $2 WHERE task_id = $1 AND event_id = 2`, [taskId, asBuffer(encodeEvent(compacted))]);
    await c.query(`DELETE FROM ${ctx.s}.events WHERE task_id = $1 AND event_id BETWEEN 3 AND $2`, [taskId, compacted.throughEventId]);
  }));
}

export async function deleteTask(ctx: PgStoreContext, taskId: string): Promise<void> {
  ctx.checkedPool();
  checkTaskId(taskId);
  ctx.remember(taskId, undefined);
  await ctx.serial(taskId, () => ctx.tx(async (c) => {
    await ctx.lockHead(c, taskId);
    await deleteIds(ctx, c, [taskId]);
  }));
}

export async function purgeCompleted(ctx: PgStoreContext, olderThanMs: number, now: number): Promise<string[]> {
  ctx.checkedPool();
  // updatedAt is the engine's event time, so retention compares it with the caller's clock.
  return ctx.tx(async (c) => {
    const res = await c.query(
      // A task the engine isolated as corrupt is kept for inspection, whatever its age.
      `${retainedSql(ctx.s)} ORDER BY s.task_id FOR UPDATE OF s SKIP LOCKED`,
      [now - olderThanMs],
    );
    const ids = res.rows.map((r: { task_id: string }) => r.task_id);
    if (ids.length) await deleteIds(ctx, c, ids);
    return ids;
  });
}

/** Deletes every row of `ids` in the transaction `c`, and forgets their heads. */
async function deleteIds(ctx: PgStoreContext, c: SqlClient, ids: string[]): Promise<void> {
  for (const id of ids) ctx.remember(id, undefined);
  for (const table of ['events', 'payloads', 'snapshots', 'leases', 'summaries', 'corrupt_marks', 'due_claims']) {
    await c.query(`DELETE FROM ${ctx.s}.${table} WHERE task_id = ANY($1::text[])`, [ids]);
  }
}

export async function markCorrupt(ctx: PgStoreContext, mark: CorruptMark): Promise<void> {
  ctx.checkedPool();
  checkTaskId(mark.taskId);
  // Not through the task's rows: reading them may be what fails. Only this row is written.
  await ctx.query(
    `INSERT INTO ${ctx.s}.corrupt_marks (task_id, key, code, message, time) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (task_id) DO UPDATE SET key = EXCLUDED.key, code = EXCLUDED.code, message = EXCLUDED.message, time = EXCLUDED.time`,
    [mark.taskId, mark.key, mark.code, mark.message, mark.time],
    'a write',
  );
}
