/**
 * The PostgreSQL store's claim of due work (docs/scale-out.md#due-claims): the due tasks'
 * summaries are locked `FOR UPDATE SKIP LOCKED` and each gets a row in `due_claims` (migration 5)
 * that expires `claimMs` after the database clock, so engines claiming at once get disjoint tasks.
 */
import { invalidArgument } from '../errors.js';
import type { ClaimRequest, DueBatch, DueReason } from './history-store.js';
import { checkClaim } from './due-work.js';
import type { SqlClient } from './postgres-migrations.js';
import { DB_NOW } from './postgres-rows.js';


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
  const rows = (
    await c.query(
      `SELECT s.task_id, ${PHASE} AS phase
         FROM ${s}.summaries s
         LEFT JOIN ${s}.leases l ON l.task_id = s.task_id
         LEFT JOIN ${s}.due_claims c ON c.task_id = s.task_id
        WHERE ((s.status = 'in_progress' AND $5::boolean AND (l.task_id IS NULL OR l.expires_at <= ${DB_NOW}))
               OR (s.status = 'pending' AND $6::boolean)
               OR (s.status = 'suspended' AND s.queued > 0 AND $7::boolean)
               OR ($1::bigint IS NOT NULL AND s.status = 'completed' AND s.updated_at <= $1::bigint
                   AND NOT EXISTS (SELECT 1 FROM ${s}.corrupt_marks m WHERE m.task_id = s.task_id)))
          AND (c.task_id IS NULL OR c.expires_at <= ${DB_NOW} OR c.instance = $8)
          AND (${PHASE}, s.task_id) > ($2::int, $3::text COLLATE "C")
        ORDER BY 2, s.task_id LIMIT $4
        FOR UPDATE OF s SKIP LOCKED`,
      [retention, phase, after, request.limit + 1, want('in-progress'), want('pending'), want('queued'), request.instance],
    )
  ).rows as { task_id: string; phase: number }[];
  const page = rows.slice(0, request.limit);
  const batch: DueBatch = { tasks: [] };
  if (page.length > 0) {
    const claimed = await c.query(
      `INSERT INTO ${s}.due_claims (task_id, instance, expires_at)
       SELECT id, $2, ${DB_NOW} + $3::bigint FROM unnest($1::text[]) id
       ON CONFLICT (task_id) DO UPDATE SET instance = EXCLUDED.instance, expires_at = EXCLUDED.expires_at
        WHERE due_claims.expires_at <= ${DB_NOW} OR due_claims.instance = EXCLUDED.instance
       RETURNING task_id`,
      [page.map((r) => r.task_id), request.instance, request.claimMs ?? DEFAULT_CLAIM_MS],
    );
    const mine = new Set(claimed.rows.map((r: { task_id: string }) => r.task_id));
    batch.tasks = page.filter((r) => mine.has(r.task_id)).map((r) => ({ taskId: r.task_id, reason: REASONS[r.phase]! }));
  }
  const last = page[page.length - 1];
  if (rows.length > request.limit && last) batch.next = `${last.phase}.${last.task_id}`;
  return batch;
}

/** Ends `instance`'s claims on `taskIds` (one statement; others' claims untouched). */
export async function releaseDue(c: SqlClient, s: string, taskIds: readonly string[], instance: string): Promise<void> {
  if (taskIds.length === 0) return;
  await c.query(`DELETE FROM ${s}.due_claims WHERE task_id = ANY($1::text[]) AND instance = $2`, [[...taskIds], instance]);
}
