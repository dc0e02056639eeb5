/**
 * retryAfterLoss when a retry after a lost connection is refused (the head moved) and the check of
 * the stored events cannot run either: the refusal may be the lost try itself, committed late, so
 * the caller gets TURNLOG_STORE_UNAVAILABLE (retryable, "could not be checked"), never
 * TURNLOG_CONCURRENCY ("nothing was written"). A fake context: no server needed.
 */
import { describe, expect, it } from 'vitest';
import { TurnlogError } from '../../src/errors.js';
import type { AppendRequest } from '../../src/store/postgres-append-request.js';
import type { PgStoreContext } from '../../src/store/postgres-context.js';
import { retryAfterLoss } from '../../src/store/postgres-lost-reply.js';
import { step } from './events.js';

const request: AppendRequest = { taskId: 'task-lost', events: [step(2, 1)], options: { expectedLastEventId: 1, generation: 1 }, callerNow: 0 };
const refused = new TurnlogError('TURNLOG_CONCURRENCY', 'task task-lost: the head moved');
const never = (): Promise<never> => Promise.reject(new Error('no retry expected'));

function context(query: () => Promise<unknown[]>): { ctx: PgStoreContext; queries: () => number } {
  let n = 0;
  const ctx = { location: 'postgres://test', s: 'turnlog', refBytes: 1 << 20, query: () => (n++, query()) } as unknown as PgStoreContext;
  return { ctx, queries: () => n };
}

describe('retryAfterLoss: a refused retry after a lost connection', () => {
  it('the check itself losing its connection gives TURNLOG_STORE_UNAVAILABLE naming the task', async () => {
    const { ctx, queries } = context(() => Promise.reject(Object.assign(new Error('Connection terminated unexpectedly'), { code: '57P01' })));
    const err = await retryAfterLoss(ctx, request, refused, never, true).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TurnlogError);
    expect((err as TurnlogError).code).toBe('TURNLOG_STORE_UNAVAILABLE');
    expect((err as Error).message).toContain('task-lost');
    expect((err as Error).message).toContain('could not be checked');
    expect(queries()).toBe(1);
  });

  it('a check that finds the events not stored passes the refusal on', async () => {
    const { ctx } = context(() => Promise.resolve([]));
    await expect(retryAfterLoss(ctx, request, refused, never, true)).rejects.toBe(refused);
  });

  it('with no lost connection before it, a refusal is passed on without a check', async () => {
    const { ctx, queries } = context(() => Promise.reject(new Error('no query expected')));
    await expect(retryAfterLoss(ctx, request, refused, never, false)).rejects.toBe(refused);
    expect(queries()).toBe(0);
  });
});
