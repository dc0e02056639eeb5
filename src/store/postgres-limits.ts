/**
 * Flow limits shared by every engine of a PostgreSQL store (docs/time.md#flow-limits): a slot is
 * a row of `limit_slots` with a lease that expires on the database clock (a crashed engine's
 * slots free themselves), and the rate is one GCRA time per limit in `limit_buckets` (migration
 * 4). Each acquire is one transaction under an advisory lock per limit.
 */
import type { SlotAnswer, SlotRequest } from './history-store.js';
import type { SqlClient } from './postgres-migrations.js';
import { DB_NOW } from './postgres-rows.js';

export async function acquireSlot(c: SqlClient, s: string, r: SlotRequest): Promise<SlotAnswer> {
  await c.query(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, [`turnlog.limit:${s}:${r.limit}`]);
  const now = Number((await c.query(`SELECT ${DB_NOW} AS now`)).rows[0].now);
  await c.query(`DELETE FROM ${s}.limit_slots WHERE limit_name = $1 AND expires_at <= $2`, [r.limit, now]);
  if (Number.isFinite(r.concurrency)) {
    const n = Number((await c.query(`SELECT count(*) AS n FROM ${s}.limit_slots WHERE limit_name = $1`, [r.limit])).rows[0].n);
    if (n >= r.concurrency) return { granted: false };
  }
  if (r.intervalMs > 0) {
    const row = (await c.query(`SELECT tat FROM ${s}.limit_buckets WHERE limit_name = $1`, [r.limit])).rows[0] as { tat: number } | undefined;
    const tat = row ? Number(row.tat) : -Infinity;
    const allowedAt = tat - r.toleranceMs;
    if (now + 1e-6 < allowedAt) return { granted: false, retryInMs: Math.max(1, Math.ceil(allowedAt - now)) };
    await c.query(
      `INSERT INTO ${s}.limit_buckets (limit_name, tat) VALUES ($1, $2) ON CONFLICT (limit_name) DO UPDATE SET tat = EXCLUDED.tat`,
      [r.limit, Math.max(tat, now) + r.intervalMs],
    );
  }
  await c.query(`INSERT INTO ${s}.limit_slots (limit_name, slot_id, instance, expires_at) VALUES ($1, $2, $3, $4)`, [r.limit, r.slotId, r.instance, now + r.leaseMs]);
  return { granted: true };
}

export async function releaseSlot(c: SqlClient, s: string, limit: string, slotId: string): Promise<void> {
  await c.query(`DELETE FROM ${s}.limit_slots WHERE limit_name = $1 AND slot_id = $2`, [limit, slotId]);
}

export async function renewSlots(c: SqlClient, s: string, instance: string, slotIds: readonly string[], leaseMs: number): Promise<void> {
  await c.query(`UPDATE ${s}.limit_slots SET expires_at = ${DB_NOW} + $3 WHERE instance = $1 AND slot_id = ANY($2::text[])`, [instance, slotIds, leaseMs]);
}
