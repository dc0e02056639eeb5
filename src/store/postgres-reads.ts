/**
 * The PostgreSQL store's reads: events (payload references resolved), summaries, leases,
 * snapshots, task pages, corrupt marks, sizes and the database clock. Each is one statement on
 * a guarded client (PgStoreContext.query), so reads never block writers and see committed data only.
 */
import { createHash } from 'node:crypto';
import { HistoryCorruptError, invalidArgument } from '../errors.js';
import { decodeEvent } from '../history/codec.js';
import type { HistoryEvent, Lease, TaskSummary } from '../history/events.js';
import type { CorruptMark, ListOptions, ReadOptions, StoredSnapshot, TaskPage, TaskStart } from './history-store.js';
import { checkTaskId } from './keys.js';
import { MAX_EVENT_ID, decodeCursor, encodeCursor, pageLimit, readBounds } from './paging.js';
import { resolveAll } from './payload-refs.js';
import type { PgStoreContext } from './postgres-context.js';
import { DB_NOW, toLease, toSummary, type LeaseRow, type SummaryRow } from './postgres-rows.js';
import { withMark } from './task-head.js';

export async function readEvents(ctx: PgStoreContext, taskId: string, options: ReadOptions): Promise<HistoryEvent[]> {
  ctx.checkedPool();
  checkTaskId(taskId);
  const { from, to, limit } = readBounds(options);
  if (limit === 0 || from > to) return [];
  const rows = await ctx.query(
    `SELECT event_id, data FROM ${ctx.s}.events WHERE task_id = $1 AND event_id BETWEEN $2 AND $3 ORDER BY event_id${Number.isFinite(limit) ? ' LIMIT $4' : ''}`,
    Number.isFinite(limit) ? [taskId, from, to, limit] : [taskId, from, to],
  );
  return toEvents(ctx, taskId, rows);
}

/** Event rows (in order) decoded, each checked to hold its own id, payload references resolved. */
function toEvents(ctx: PgStoreContext, taskId: string, rows: { event_id: string; data: Buffer }[]): Promise<HistoryEvent[]> {
  const events = rows.map((r) => {
    const name = `${ctx.location} events(${JSON.stringify(taskId)}, ${r.event_id})`;
    // A plain Uint8Array view makes protobufjs return Uint8Array bytes fields, as the types say.
    const e = decodeEvent(new Uint8Array(r.data.buffer, r.data.byteOffset, r.data.byteLength), taskId, name);
    if (e.eventId !== Number(r.event_id)) throw new HistoryCorruptError(name, `holds event ${e.eventId}`);
    return e;
  });
  return resolveAll(taskId, events, async (hash) => {
    const [row] = await ctx.query(`SELECT data FROM ${ctx.s}.payloads WHERE task_id = $1 AND hash = $2`, [taskId, hash]);
    return row ? new Uint8Array((row.data as Buffer).buffer, (row.data as Buffer).byteOffset, (row.data as Buffer).byteLength) : undefined;
  });
}

/**
 * The snapshot, the first `limit` events after it and the lease in one statement (one snapshot of
 * the database, one round trip where a task's first load made three): the head row first (k = 0,
 * the snapshot's and the lease's columns, null where there is none), then the events (k = 1).
 */
/** readTaskStart's statement per store: prepared (planned once a connection) unless `preparedStatements: false`. */
const startStatements = new WeakMap<PgStoreContext, { text: string; name: string | undefined }>();

export async function readTaskStart(ctx: PgStoreContext, taskId: string, limit: number): Promise<TaskStart> {
  ctx.checkedPool();
  checkTaskId(taskId);
  readBounds({ limit });
  let st = startStatements.get(ctx);
  if (st === undefined) {
    const text = `WITH snap AS (SELECT event_id, data FROM ${ctx.s}.snapshots WHERE task_id = $1)
     SELECT 0 AS k, s.event_id, s.data, l.owner, l.instance, l.generation, l.expires_at
       FROM (SELECT 1) one LEFT JOIN snap s ON true LEFT JOIN ${ctx.s}.leases l ON l.task_id = $1
     UNION ALL
     (SELECT 1, e.event_id, e.data, NULL, NULL, NULL, NULL FROM ${ctx.s}.events e
       WHERE e.task_id = $1 AND e.event_id BETWEEN coalesce((SELECT event_id FROM snap), 0) + 1 AND $3
       ORDER BY e.event_id LIMIT $2)
     ORDER BY k, event_id`;
    const name = ctx.options.preparedStatements === false ? undefined : `turnlog_start_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`;
    startStatements.set(ctx, (st = { text, name }));
  }
  const rows = await ctx.query(st.text, [taskId, limit, MAX_EVENT_ID], 'a read', st.name);
  const head = rows[0] as { event_id: string | null; data: Buffer | null; owner: string | null };
  const snapshot = head.event_id === null ? undefined : { eventId: Number(head.event_id), data: new Uint8Array(head.data!) };
  const lease = head.owner === null ? undefined : toLease(rows[0] as LeaseRow);
  return { snapshot, events: await toEvents(ctx, taskId, rows.slice(1)), lease };
}

export async function getSummary(ctx: PgStoreContext, taskId: string): Promise<TaskSummary | undefined> {
  ctx.checkedPool();
  checkTaskId(taskId);
  const rows = await ctx.query(`SELECT row_to_json(s) AS s FROM ${ctx.s}.summaries s WHERE task_id = $1`, [taskId]);
  return rows.length ? toSummary(rows[0].s as SummaryRow) : undefined;
}

/** The lease with `expiresAt` on the database clock (ms since the epoch). */
export async function getLease(ctx: PgStoreContext, taskId: string): Promise<Lease | undefined> {
  ctx.checkedPool();
  checkTaskId(taskId);
  const rows = await ctx.query(`SELECT owner, instance, generation, expires_at FROM ${ctx.s}.leases WHERE task_id = $1`, [taskId]);
  return rows.length ? toLease(rows[0] as LeaseRow) : undefined;
}

export async function getSnapshot(ctx: PgStoreContext, taskId: string): Promise<StoredSnapshot | undefined> {
  ctx.checkedPool();
  checkTaskId(taskId);
  const rows = await ctx.query(`SELECT event_id, data FROM ${ctx.s}.snapshots WHERE task_id = $1`, [taskId]);
  if (!rows.length) return undefined;
  return { eventId: Number(rows[0].event_id), data: new Uint8Array(rows[0].data as Buffer) };
}

export async function listTasks(ctx: PgStoreContext, options: ListOptions): Promise<TaskPage> {
  ctx.checkedPool();
  const limit = pageLimit(options.limit);
  const { status, workflow } = options;
  // Same orders as the Level store's indexes: status alone lists by workflow, then id.
  const byWorkflow = status !== undefined && workflow === undefined;
  const where: string[] = [];
  const values: unknown[] = [];
  if (status !== undefined) where.push(`status = $${values.push(status)}`);
  if (workflow !== undefined) where.push(`workflow = $${values.push(workflow)}`);
  if (options.cursor !== undefined) {
    const key = cursorKey(options.cursor, status, workflow);
    if (byWorkflow) where.push(`(workflow, task_id) > ($${values.push(key[0])}, $${values.push(key[1])})`);
    else where.push(`task_id > $${values.push(key[0])}`);
  }
  const rows = await ctx.query(
    `SELECT row_to_json(s) AS s FROM ${ctx.s}.summaries s ${where.length ? 'WHERE ' + where.join(' AND ') : ''}
     ORDER BY ${byWorkflow ? 'workflow, task_id' : 'task_id'} LIMIT $${values.push(limit + 1)}`,
    values,
  );
  let tasks = rows.slice(0, limit).map((r: { s: SummaryRow }) => toSummary(r.s));
  if (tasks.length) {
    const marks = await corruptMarks(ctx, tasks.map((t) => t.taskId));
    if (marks.size) tasks = tasks.map((t) => withMark(t, marks.get(t.taskId)));
  }
  const page: TaskPage = { tasks };
  if (rows.length > limit) {
    const last = tasks[tasks.length - 1]!;
    const key = byWorkflow ? [last.workflow, last.taskId] : [last.taskId];
    page.next = encodeCursor(JSON.stringify([status ?? null, workflow ?? null, ...key]));
  }
  return page;
}

function cursorKey(cursor: string, status: string | undefined, workflow: string | undefined): string[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(decodeCursor(cursor));
  } catch {
    parsed = undefined;
  }
  const a = parsed as unknown[];
  if (!Array.isArray(a) || a[0] !== (status ?? null) || a[1] !== (workflow ?? null) || a.length < 3 || !a.slice(2).every((k) => typeof k === 'string')) {
    throw invalidArgument(`List cursor ${cursor} belongs to another filter. Pass the same status and workflow as the page that returned it.`);
  }
  return a.slice(2) as string[];
}

/** Corrupt marks by task id (of `ids`, or all), in task-id byte order. */
export async function corruptMarks(ctx: PgStoreContext, ids?: string[]): Promise<Map<string, CorruptMark>> {
  const rows = await ctx.query(
    `SELECT task_id, key, code, message, time FROM ${ctx.s}.corrupt_marks${ids ? ' WHERE task_id = ANY($1::text[])' : ''} ORDER BY task_id`,
    ids ? [ids] : [],
  );
  return new Map(rows.map((r: { task_id: string; key: string; code: string; message: string; time: number }) => [r.task_id, { taskId: r.task_id, key: r.key, code: r.code, message: r.message, time: Number(r.time) }]));
}

/** Bytes the store's tables use on the server, with indexes and TOAST (`turnlog stats`). */
export async function sizeBytes(ctx: PgStoreContext): Promise<number> {
  const rows = await ctx.query(
    `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::float8 AS n FROM pg_class c
     JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'`,
    [ctx.schema],
  );
  return Number(rows[0].n);
}

/** The database clock, ms since the epoch (what lease expiry is measured against). */
export async function databaseNow(ctx: PgStoreContext): Promise<number> {
  const rows = await ctx.query(`SELECT ${DB_NOW} AS now`, []);
  return Number(rows[0].now);
}
