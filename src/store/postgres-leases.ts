/**
 * The PostgreSQL store's lease writes: claim, renew and release, each one transaction under the
 * task's row locks that runs task-head.ts's rule with the caller's `now` rebased onto the
 * database clock, and stores the lease with its expiry on that clock (DESIGN 12).
 */
import type { Lease } from '../history/events.js';
import type { LeaseRequest } from '../history/lease.js';
import { checkTaskId } from './keys.js';
import type { PgStoreContext } from './postgres-context.js';
import type { SqlClient } from './postgres-migrations.js';
import { ClockFrame, LEASE_UPSERT } from './postgres-rows.js';
import { applyClaim, applyRelease, applyRenew, type TaskHead } from './task-head.js';

export async function claimLease(ctx: PgStoreContext, taskId: string, request: LeaseRequest): Promise<Lease> {
  return (await leaseOp(ctx, taskId, request.now, (h) => applyClaim(taskId, h, request, true)))!;
}

export async function renewLease(ctx: PgStoreContext, taskId: string, lease: Lease, durationMs: number, now: number): Promise<Lease> {
  return (await leaseOp(ctx, taskId, now, (h) => applyRenew(taskId, h, lease, durationMs, now)))!;
}

export async function releaseLease(ctx: PgStoreContext, taskId: string, lease: Lease, now: number): Promise<void> {
  await leaseOp(ctx, taskId, now, (h) => applyRelease(taskId, h, lease, now));
}

/** Runs a lease rule under the row locks with the caller's `now` rebased onto the database clock. */
async function leaseOp(ctx: PgStoreContext, taskId: string, now: number, rule: (head: TaskHead) => Lease | undefined): Promise<Lease | undefined> {
  ctx.checkedPool();
  checkTaskId(taskId);
  return ctx.serial(taskId, () => ctx.tx(async (c) => {
    const locked = await ctx.lockHead(c, taskId);
    const clock = new ClockFrame(locked.dbNow, now);
    // The head read stands (a stale one only costs an append the locked path).
    ctx.remember(taskId, locked.head);
    const next = rule(clock.headToCaller(locked.head));
    if (!next) return undefined;
    const stored = clock.leaseToDb(next);
    await putLease(ctx, c, taskId, stored, locked.hasLease);
    ctx.remember(taskId, { ...locked.head, lease: stored });
    return stored;
  }));
}

/** Writes the lease row; insert-only when the transaction saw none (a concurrent creator's then fails the insert, and tx retries). */
async function putLease(ctx: PgStoreContext, c: SqlClient, taskId: string, l: Lease, exists: boolean): Promise<void> {
  await c.query(
    `INSERT INTO ${ctx.s}.leases (task_id, owner, instance, generation, expires_at) VALUES ($1, $2, $3, $4, $5)${exists ? LEASE_UPSERT : ''}`,
    [taskId, l.owner, l.instance, l.generation, l.expiresAt],
  );
}
