/**
 * The PostgreSQL store's claims, for many engines on one schema: orphaned turns get this engine's
 * lease (docs/scale-out.md#orphans), other due work a row in `due_claims` (migration 5) that
 * expires `claimMs` after the database clock (#due-claims). Both lock the summaries
 * `FOR UPDATE SKIP LOCKED`, so engines claiming at once get disjoint tasks.
 */
import { invalidArgument } from '../errors.js';
import { decodeEvent } from '../history/codec.js';
import type { HistoryEvent, Lease } from '../history/events.js';
import { summarize } from '../history/summary.js';
import type { ClaimRequest, DueBatch, DueReason } from './history-store.js';
import { checkClaim } from './due-work.js';
import type { SqlClient } from './postgres-migrations.js';
import { DB_NOW, LEASE_UPSERT, toLease, type LeaseRow } from './postgres-rows.js';
import { applyClaim, type TaskHead } from './task-head.js';


/** A claim's default duration when the request names none. */
export const DEFAULT_CLAIM_MS = 60_000;

const REASONS: readonly DueReason[] = ['in-progress', 'pending', 'queued', 'retention'];
const PHASE = `CASE s.status WHEN 'in_progress' THEN 0 WHEN 'pending' THEN 1 WHEN 'suspended' THEN 2 ELSE 3 END`;

function parseCursor(cursor: string | undefined): [number, string] {
  if (cursor === undefined) return [0, ''];
  const dot = cursor.indexOf('.');
  const phase = Number(cursor.slice(0, dot));
  if (dot < 1 || !Number.isInteger(phase) || phase < 0 || phase >= REASONS.length) {
    throw invalidArgument(`claimDueWork cursor ${cursor} is not one this store returned. Pass the \`next\` of the previous batch, or none to start over.`);
  }
  return [phase, cursor.slice(dot + 1)];
}

/**
 * Claims a batch in the transaction `c` (schema `s` quoted). The insert's `ON CONFLICT … WHERE`
 * re-checks each claim row as committed, so a claimer whose snapshot predates another's commit
 * still never takes a task that claimer holds (test: "two stores racing").
 */
export async function claimDue(c: SqlClient, s: string, request: ClaimRequest): Promise<DueBatch> {
  checkClaim(request);
  const [phase, after] = parseCursor(request.cursor);
  const want = (r: DueReason) => request.reasons === undefined || request.reasons.includes(r);
  const retention = request.retentionMs === undefined || !want('retention') ? null : request.now - request.retentionMs;
  const claimable = `(c.task_id IS NULL OR c.expires_at <= ${DB_NOW} OR c.instance = $2)`;
  let rows: DueRow[] = [];
  if (phase < 3) {
    rows = (
      await c.query(
        `SELECT s.task_id, ${PHASE} AS phase, ${UNKNOWN} AS unknown, s.queued > 0 AS queued
           FROM ${s}.summaries s
           LEFT JOIN ${s}.leases l ON l.task_id = s.task_id
           LEFT JOIN ${s}.due_claims c ON c.task_id = s.task_id
          WHERE ((s.status = 'in_progress' AND $5::boolean AND (l.task_id IS NULL OR l.expires_at <= ${DB_NOW}))
                 OR (s.status = 'pending' AND $6::boolean)
                 OR (s.status = 'suspended' AND (s.queued > 0 OR s.cancel_requested OR ${UNKNOWN}) AND $7::boolean))
            AND ${claimable}
            AND (${PHASE}, s.task_id) > ($1::int, $3::text COLLATE "C")
          ORDER BY 2, s.task_id LIMIT $4
          FOR UPDATE OF s SKIP LOCKED`,
        [phase, request.instance, after, request.limit + 1, want('in-progress'), want('pending'), want('queued')],
      )
    ).rows;
  }
  // Retention (phase 3) reads completions (migration 6), not a summaries index on updated_at.
  if (retention !== null && rows.length <= request.limit) {
    const more = await c.query(
      `${retainedSql(s)}
          AND NOT EXISTS (SELECT 1 FROM ${s}.due_claims c WHERE c.task_id = s.task_id AND NOT ${claimable})
          AND ($3::text IS NULL OR s.task_id > $3::text COLLATE "C")
        ORDER BY s.task_id LIMIT $4
        FOR UPDATE OF s SKIP LOCKED`,
      [retention, request.instance, phase === 3 ? after : null, request.limit + 1 - rows.length],
    );
    for (const r of more.rows as { task_id: string }[]) rows.push({ task_id: r.task_id, phase: 3, unknown: false, queued: false });
  }
  const page = rows.slice(0, request.limit);
  const batch: DueBatch = { tasks: [] };
  const due = await deriveCancels(c, s, page);
  if (due.length > 0) {
    const claimed = await c.query(
      `INSERT INTO ${s}.due_claims (task_id, instance, expires_at)
       SELECT id, $2, ${DB_NOW} + $3::bigint FROM unnest($1::text[]) id
       ON CONFLICT (task_id) DO UPDATE SET instance = EXCLUDED.instance, expires_at = EXCLUDED.expires_at
        WHERE due_claims.expires_at <= ${DB_NOW} OR due_claims.instance = EXCLUDED.instance
       RETURNING task_id`,
      [due.map((r) => r.task_id), request.instance, request.claimMs ?? DEFAULT_CLAIM_MS],
    );
    const mine = new Set(claimed.rows.map((r: { task_id: string }) => r.task_id));
    batch.tasks = due.filter((r) => mine.has(r.task_id)).map((r) => ({ taskId: r.task_id, reason: REASONS[r.phase]! }));
  }
  const last = page[page.length - 1];
  if (rows.length > request.limit && last) batch.next = `${last.phase}.${last.task_id}`;
  return batch;
}

/** A row of the claim's select: `unknown`, its cancel_requested is not known for its last event. */
interface DueRow {
  task_id: string;
  phase: number;
  unknown: boolean;
  queued: boolean;
}

/** A summary whose cancel_requested does not hold for its last event (migration 7). */
const UNKNOWN = `s.cancel_known_through IS DISTINCT FROM s.last_event_id`;

/**
 * The rows of `page` that are due: a suspended task whose pending task cancel is not known (a row
 * from before migration 7, or last written by an older build) gets it from its events, written
 * back under the claim's row lock; it is due only if one is pending (or an input is queued). A
 * history that cannot be decoded stays due, for the engine to isolate.
 */
async function deriveCancels(c: SqlClient, s: string, page: DueRow[]): Promise<DueRow[]> {
  const unknown = page.filter((r) => r.phase === 2 && r.unknown);
  if (unknown.length === 0) return page;
  const ids = unknown.map((r) => r.task_id);
  const res = await c.query(`SELECT task_id, event_id, data FROM ${s}.events WHERE task_id = ANY($1::text[]) ORDER BY task_id, event_id`, [ids]);
  const events = new Map<string, HistoryEvent[]>();
  const unreadable = new Set<string>();
  for (const r of res.rows as { task_id: string; event_id: string; data: Buffer }[]) {
    if (unreadable.has(r.task_id)) continue;
    try {
      const e = decodeEvent(new Uint8Array(r.data.buffer, r.data.byteOffset, r.data.byteLength), r.task_id, `events(${JSON.stringify(r.task_id)}, ${r.event_id})`);
      let list = events.get(r.task_id);
      if (!list) events.set(r.task_id, (list = []));
      list.push(e);
    } catch {
      unreadable.add(r.task_id);
    }
  }
  const known = ids.filter((id) => !unreadable.has(id));
  const pending = new Set(known.filter((id) => summarize(id, undefined, events.get(id) ?? []).cancelRequested));
  if (known.length > 0) {
    await c.query(
      `UPDATE ${s}.summaries s SET cancel_requested = v.c, cancel_known_through = s.last_event_id
         FROM unnest($1::text[], $2::boolean[]) AS v(id, c) WHERE s.task_id = v.id COLLATE "C"`,
      [known, known.map((id) => pending.has(id))],
    );
  }
  const settled = new Set(known.filter((id) => !pending.has(id)));
  return page.filter((r) => !(r.phase === 2 && r.unknown && settled.has(r.task_id) && !r.queued));
}

/** Ends `instance`'s claims on `taskIds` (one statement; others' claims untouched). */
export async function releaseDue(c: SqlClient, s: string, taskIds: readonly string[], instance: string): Promise<void> {
  if (taskIds.length === 0) return;
  await c.query(`DELETE FROM ${s}.due_claims WHERE task_id = ANY($1::text[]) AND instance = $2`, [[...taskIds], instance]);
}

/** What {@link PostgresHistoryStore.claimOrphans} claims, and for whom. */
export interface OrphanClaim {
  owner: string;
  instance: string;
  /** The claimed lease's duration, from the database clock at the claim. */
  durationMs: number;
  /** At most this many tasks (the engine's free turn slots). */
  limit: number;
}

/** A task claimed by {@link PostgresHistoryStore.claimOrphans}: its new lease and the dead one it replaced. */
export interface ClaimedOrphan {
  taskId: string;
  lease: Lease;
  previous?: Lease;
}

/** Claims orphans in the transaction `c` (schema `s` quoted); see PostgresHistoryStore.claimOrphans. */
export async function claimOrphans(c: SqlClient, s: string, request: OrphanClaim): Promise<ClaimedOrphan[]> {
  const locked = await c.query(`${recoverableSql(s)} LIMIT $1 FOR UPDATE OF s SKIP LOCKED`, [request.limit]);
  const ids = locked.rows.map((r: { task_id: string }) => r.task_id);
  if (ids.length === 0) return [];
  // Re-read under the locks: a renewal committed after this transaction's first snapshot counts.
  const heads = await c.query(
    `SELECT s.task_id, s.max_generation, row_to_json(l) AS l, ${DB_NOW} AS now FROM ${s}.summaries s
       LEFT JOIN (SELECT task_id, owner, instance, generation, expires_at FROM ${s}.leases) l ON l.task_id = s.task_id
      WHERE s.task_id = ANY($1::text[]) ORDER BY s.task_id`,
    [ids],
  );
  const out: ClaimedOrphan[] = [];
  for (const r of heads.rows as { task_id: string; max_generation: number; l: LeaseRow | null; now: number }[]) {
    const previous = r.l ? toLease(r.l) : undefined;
    const head: TaskHead = { lastEventId: 0, maxGeneration: Number(r.max_generation), lease: previous, summary: undefined };
    const req = { owner: request.owner, instance: request.instance, durationMs: request.durationMs, now: Number(r.now) };
    try {
      const lease = applyClaim(r.task_id, head, req, true);
      out.push(previous ? { taskId: r.task_id, lease, previous } : { taskId: r.task_id, lease });
    } catch {
      // Renewed meanwhile (LeaseHeldError): its holder is alive, leave it.
    }
  }
  if (out.length) {
    await c.query(
      `INSERT INTO ${s}.leases (task_id, owner, instance, generation, expires_at)
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[])${LEASE_UPSERT}`,
      [out.map((o) => o.taskId), out.map((o) => o.lease.owner), out.map((o) => o.lease.instance), out.map((o) => o.lease.generation), out.map((o) => o.lease.expiresAt)],
    );
  }
  return out;
}

/**
 * Completed tasks last updated at or before `$1` (engine time) and not marked corrupt: what
 * retention deletes. Index-backed by completions (migration 6); the summary row is re-checked
 * under the caller's `FOR UPDATE OF s`. Callers append their own conditions and order.
 */
export function retainedSql(s: string): string {
  return `SELECT s.task_id FROM ${s}.completions d JOIN ${s}.summaries s ON s.task_id = d.task_id
       WHERE d.updated_at <= $1::bigint AND s.status = 'completed' AND s.updated_at <= $1::bigint
         AND NOT EXISTS (SELECT 1 FROM ${s}.corrupt_marks m WHERE m.task_id = s.task_id)`;
}

/**
 * The recoverable tasks, in id order. Index-backed: the partial index of in-progress summaries
 * finds them, the leases' primary key joins (test: "listRecoverable is index-backed"). The engine
 * claims orphans with `claimOrphans` (`FOR UPDATE SKIP LOCKED`) instead; this stays for tools.
 */
export function recoverableSql(s: string): string {
  return `SELECT s.task_id FROM ${s}.summaries s LEFT JOIN ${s}.leases l ON l.task_id = s.task_id
       WHERE s.status = 'in_progress' AND (l.task_id IS NULL OR l.expires_at <= ${DB_NOW})
       ORDER BY s.task_id`;
}
