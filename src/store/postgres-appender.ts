/**
 * The PostgreSQL store's write path for appends: validation, the lone one-statement append on the
 * kept connection (pg's callback form), one append alone on the head the store last saw
 * (postgres-append.ts) or, when that head moved, in the locked transaction that decides. Group
 * commit's batches are postgres-batch.ts's, the retry after a lost connection is
 * postgres-lost-reply.ts's. Fencing is applyAppend's (task-head.ts) on every path.
 */
import { createHash } from 'node:crypto';
import { ConcurrencyError, invalidArgument } from '../errors.js';
import { encodeEvent } from '../history/codec.js';
import type { HistoryEvent } from '../history/events.js';
import { Batcher } from './batcher.js';
import type { AppendOptions, AppendResult } from './history-store.js';
import { checkTaskId } from './keys.js';
import { externalize } from './payload-refs.js';
import { cancelValues, cancelWrite, casReply, casSql, casStatement, fenceRefused, planCas, type CasPlan } from './postgres-append.js';
import { SUMMARY_UPSERT, queryConfig, routine, type AppendRequest, type PendingAppend, type PreparingClient, type Statement } from './postgres-append-request.js';
import { PgBatchWriter } from './postgres-batch.js';
import type { PgStoreContext } from './postgres-context.js';
import { retryAfterLoss } from './postgres-lost-reply.js';
import type { PgClientLike } from './postgres-options.js';
import { ClockFrame, LEASE_UPSERT, asBuffer, isConnectionLoss, unavailable } from './postgres-rows.js';
import { applyAppend, type TaskHead } from './task-head.js';

export { queryConfig, type Statement } from './postgres-append-request.js';

/** Appends of one store (its `append`), with the counters the benchmark and tests read. */
export class PgAppender {
  readonly #ctx: PgStoreContext;
  /** Group commit across tasks (`groupCommit`, default on). */
  readonly #batcher: Batcher<PendingAppend> | undefined;
  /** The one-statement append's text and prepared-statement name per shape key (postgres-append.ts). */
  readonly #casStatements = new Map<number, Statement>();
  /** Appends written by the one-statement path and by the locked path, for the benchmark and tests. */
  readonly appendPaths = { oneStatement: 0, locked: 0 };
  /** Group commit's batches (postgres-batch.ts). */
  readonly #batches: PgBatchWriter;
  /**
   * A connection kept out of the pool for lone one-statement appends (a sequential writer's
   * steps): no pool checkout and release per append (docs/decisions.md, "Where a PostgreSQL
   * step's time goes"). Only with the store's own pool of 3 or more; given back on close or loss.
   */
  #kept: PgClientLike | undefined;
  /** Whether an append is on `#kept` now (a second lone append meanwhile takes a pool connection). */
  #keptBusy = false;
  readonly #mayKeep: boolean;

  constructor(ctx: PgStoreContext) {
    this.#ctx = ctx;
    this.#batches = new PgBatchWriter(ctx, {
      appendPaths: this.appendPaths,
      appendOne: (a) => this.#appendOne(a),
      appendOnce: (a) => this.#appendOnce(a),
      retry: (a, err, lost) => this.#retry(a, err, lost),
      statement: (key, text) => this.#casStatement(key, text),
    });
    const { groupCommit, max } = ctx.options;
    this.#mayKeep = ctx.options.pool === undefined && (max ?? 10) >= 3;
    if (groupCommit !== false) {
      // Two batches in flight at most (one with a pool of 2 or 3): while they are written the next
      // one gathers, and the fewer the statements the less CPU an append costs both sides
      // (docs/decisions.md); two, so one batch waiting on a row lock does not stall every append.
      this.#batcher = new Batcher((entries, written) => this.#batches.write(entries, written), Math.max(1, Math.min(2, Math.floor((max ?? 10) / 2))));
    }
  }

  /** Batch statements that failed other than by contention or a lost connection (their appends took the locked path). */
  get batchFallbacks(): number {
    return this.#batches.fallbacks;
  }

  /** Group-commit counters: batches written and appends in them (0 and 0 with `groupCommit: false`). */
  groupCommitStats(): { batches: number; appends: number } {
    return { batches: this.#batcher?.batches ?? 0, appends: this.#batcher?.entries ?? 0 };
  }

  /** Gives the kept connection back to the pool (the store's close, once its writes are done). */
  releaseKept(): void {
    const kept = this.#kept;
    this.#kept = undefined;
    if (kept !== undefined && !this.#keptBusy) kept.release();
  }

  /**
   * After a lone append: the kept connection stays kept unless it broke or the store closed; a
   * pool connection becomes the kept one if there is none, else goes back to the pool.
   */
  #giveBack(client: PgClientLike, broken: Error | undefined): void {
    const open = this.#ctx.state === 'open';
    if (client === this.#kept) {
      this.#keptBusy = false;
      if (broken === undefined && open) return;
      this.#kept = undefined;
    } else if (this.#kept === undefined && this.#mayKeep && broken === undefined && open) {
      this.#kept = client;
      // Dropped while idle (server restart, pg_terminate_backend): back to the pool, which discards it.
      const drop = (err?: Error): void => {
        if (this.#kept !== client || this.#keptBusy) return;
        this.#kept = undefined;
        client.release(err ?? true);
      };
      const on = (client as { on?(e: string, f: (err?: Error) => void): void }).on;
      on?.call(client, 'error', drop);
      on?.call(client, 'end', () => drop());
      return;
    }
    client.release(broken);
  }

  /** Each group commit's number of appends, as it goes out (none with `groupCommit: false`). */
  onCommit(listener: (appends: number) => void): () => void {
    return this.#batcher?.listen(listener) ?? (() => undefined);
  }

  /**
   * An append: validated, then written after this store's earlier writes to the task, in a group
   * commit unless `groupCommit: false`. Not an async function, nor are the steps of a lone append
   * below: each async layer and each await costs a promise (and the step scope's async hooks).
   */
  append(taskId: string, events: readonly HistoryEvent[], options: AppendOptions): Promise<AppendResult> {
    try {
      this.#ctx.checkedPool();
      checkTaskId(taskId);
      // Validate shape before taking a connection (applyAppend repeats it under the lock).
      if (!Array.isArray(events) || events.length === 0) throw invalidArgument(`Task ${taskId}: append needs at least one event.`);
      let callerNow = 0;
      for (const e of events) if (e.time > callerNow) callerNow = e.time;
      const lone = this.#lone({ taskId, events, options, callerNow });
      if (lone !== undefined) return lone;
      const batcher = this.#batcher;
      if (!batcher) return this.#ctx.serial(taskId, () => this.#appendOne({ taskId, events, options, callerNow }));
      return this.#ctx.serial(taskId, () => new Promise<AppendResult>((resolve, reject) => batcher.submit({ taskId, events, options, callerNow, resolve, reject })));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * A lone append on the kept connection, by pg's callback form of query: no earlier write to the
   * task queued, no batch out, the head known. One promise from here to the reply (the usual path
   * makes nine, each running the step scope's async hooks); the result is built while the
   * statement is out. Undefined: the usual path decides. Outcomes are #appendOne's.
   */
  #lone(a: AppendRequest): Promise<AppendResult> | undefined {
    const kept = this.#kept;
    const ctx = this.#ctx;
    if (kept === undefined || this.#keptBusy || ctx.queues.has(a.taskId)) return undefined;
    const plan = planCas(a.taskId, ctx.heads.get(a.taskId), a.events, a.options, a.callerNow);
    if (plan === undefined) return undefined;
    const blobs = new Map<string, Uint8Array>();
    const bytes = a.events.map((e) => encodeEvent(externalize(e, ctx.refBytes, blobs)));
    const { shape, key, values } = casStatement(a.taskId, plan, a.events, bytes, blobs, !(a.options.sync ?? ctx.options.sync ?? true));
    const st = this.#casStatement(key, () => casSql(ctx.s, shape));
    const batcher = this.#batcher;
    if (batcher !== undefined && !batcher.claim()) return undefined;
    this.#keptBusy = true;
    let settle!: (r: AppendResult | Promise<AppendResult>) => void;
    const out = new Promise<AppendResult>((resolve) => (settle = resolve));
    ctx.queues.set(a.taskId, out);
    // After a fallback (the locked path, a retry): the task's queue and the batch slot are held until it settles.
    const fallback = (p: Promise<AppendResult>): void => {
      const done = (): void => {
        if (ctx.queues.get(a.taskId) === out) ctx.queues.delete(a.taskId);
        batcher?.settled();
      };
      p.then(done, done);
      settle(p);
    };
    const reply = (err: Error | null | undefined, res: { rows: any[]; rowCount?: number | null }): void => {
      const row = err ? undefined : casReply(shape, res);
      if (row?.ok) {
        ctx.remember(a.taskId, plan.leaseMs !== undefined ? { ...plan.next, lease: { ...plan.next.lease!, expiresAt: row.now + plan.leaseMs } } : plan.next);
        this.appendPaths.oneStatement++;
        ctx.notifier!.add(a.taskId, plan.next.lastEventId, routine(a.events));
        this.#giveBack(kept, undefined);
        if (ctx.queues.get(a.taskId) === out) ctx.queues.delete(a.taskId);
        batcher?.settled();
        settle(result ?? { lastEventId: plan.next.lastEventId, summary: { ...plan.next.summary! } });
        return;
      }
      ctx.remember(a.taskId, undefined);
      const code = (err as { code?: unknown } | undefined)?.code;
      // Nothing written (the head or the lease moved) or a concurrent creator's row: the locked path decides.
      if (!err || code === '23505' || fenceRefused(err)) {
        this.#giveBack(kept, undefined);
        return fallback(this.#locked(a, !shape.async));
      }
      this.#giveBack(kept, isConnectionLoss(err) ? err : undefined);
      fallback(this.#retry(a, unavailable(err, ctx.location, 'a write')));
    };
    let result: AppendResult | undefined;
    try {
      (kept as unknown as PreparingClient).query(queryConfig(st, values), reply);
    } catch (err) {
      reply(err as Error, { rows: [] });
    }
    // Built while the statement is out (pg replies on a later turn of the event loop).
    result = { lastEventId: plan.next.lastEventId, summary: { ...plan.next.summary! } };
    return out;
  }

  /**
   * One append, retried when the connection is lost: first it checks whether the lost write
   * landed (a COMMIT whose reply never came), so a retry never writes twice.
   */
  #appendOne(a: AppendRequest): Promise<AppendResult> {
    return this.#appendOnce(a).catch((err: unknown) => this.#retry(a, err));
  }

  /** The retry after a try of `a` failed with `err` (postgres-lost-reply.ts). */
  #retry(a: AppendRequest, err: unknown, lost = false): Promise<AppendResult> {
    return retryAfterLoss(this.#ctx, a, err, (x) => this.#appendOnce(x), lost);
  }
  /**
   * One append: one autocommit statement when the head this store last saw still holds
   * (postgres-append.ts), else the locked transaction, which decides on the head it reads.
   */
  #appendOnce(a: AppendRequest): Promise<AppendResult> {
    const sync = a.options.sync ?? this.#ctx.options.sync ?? true;
    const plan = planCas(a.taskId, this.#ctx.heads.get(a.taskId), a.events, a.options, a.callerNow);
    return plan ? this.#casAppend(a, plan, sync) : this.#locked(a, sync);
  }

  /** The locked transaction's append, then its notice. */
  #locked(a: AppendRequest, sync: boolean): Promise<AppendResult> {
    return this.#lockedAppend(a, sync).then((out) => {
      this.#ctx.notifier!.add(a.taskId, out.lastEventId, routine(a.events));
      return out;
    });
  }

  /** The one-statement append of `plan`, then its notice; the locked path when the head moved (nothing written). */
  async #casAppend(a: AppendRequest, plan: CasPlan, sync: boolean): Promise<AppendResult> {
    const { taskId, events } = a;
    const blobs = new Map<string, Uint8Array>();
    const bytes = events.map((e) => encodeEvent(externalize(e, this.#ctx.refBytes, blobs)));
    const { shape, key, values } = casStatement(taskId, plan, events, bytes, blobs, !sync);
    const st = this.#casStatement(key, () => casSql(this.#ctx.s, shape));
    let client: PgClientLike;
    const kept = this.#keptBusy ? undefined : this.#kept;
    if (kept !== undefined) {
      this.#ctx.checkedPool(); // a closed store refuses the kept connection too
      this.#keptBusy = true;
      client = kept;
    } else {
      client = await this.#ctx.connect('a write');
    }
    let broken: Error | undefined;
    try {
      const row = casReply(shape, await (client as unknown as PreparingClient).query(queryConfig(st, values)));
      if (row.ok) {
        const { next, leaseMs } = plan;
        this.#ctx.remember(taskId, { ...next, lease: leaseMs !== undefined ? { ...next.lease!, expiresAt: row.now + leaseMs } : next.lease });
        this.appendPaths.oneStatement++;
        this.#ctx.notifier!.add(taskId, next.lastEventId, routine(events));
        return { lastEventId: next.lastEventId, summary: { ...next.summary! } };
      }
      this.#ctx.remember(taskId, undefined);
    } catch (err) {
      this.#ctx.remember(taskId, undefined);
      // A concurrent creator's row or events, or a moved lease: the locked path decides against them.
      if ((err as { code?: unknown }).code !== '23505' && !fenceRefused(err)) {
        if (isConnectionLoss(err)) broken = err as Error;
        throw unavailable(err, this.#ctx.location, 'a write');
      }
    } finally {
      this.#giveBack(client, broken);
    }
    // The head moved (another engine wrote, a lease was taken): the locked path decides, on a connection of its own.
    return this.#locked(a, sync);
  }

  /**
   * A statement's text and prepared-statement name (undefined with `preparedStatements: false`),
   * built once per store and key (the schema is in the text: one name per store and shape).
   */
  #casStatement(key: number, text: () => string): Statement {
    let st = this.#casStatements.get(key);
    if (st === undefined) {
      const t = text();
      st = { name: this.#ctx.options.preparedStatements === false ? undefined : `turnlog_append_${createHash('sha256').update(t).digest('hex').slice(0, 24)}`, text: t };
      this.#casStatements.set(key, st);
    }
    return st;
  }

  /** One append in its own transaction (three round trips: BEGIN with the lock, the write, COMMIT). */
  #lockedAppend(a: AppendRequest, sync: boolean): Promise<AppendResult> {
    const { taskId, events, options, callerNow } = a;
    this.appendPaths.locked++;
    let refused = false;
    return this.#ctx.tx(async (c) => {
      const locked = await this.#ctx.lockHead(c, taskId);
      const clock = new ClockFrame(locked.dbNow, callerNow);
      let next: TaskHead;
      try {
        next = applyAppend(taskId, clock.headToCaller(locked.head), events, options, true);
      } catch (err) {
        refused = true;
        this.#ctx.remember(taskId, locked.head);
        throw err;
      }
      this.#ctx.remember(taskId, { ...next, lease: options.lease ? clock.leaseToDb(next.lease!) : locked.head.lease });
      const ids = events.map((e) => e.eventId);
      const blobs = new Map<string, Uint8Array>();
      const bytes = events.map((e) => asBuffer(encodeEvent(externalize(e, this.#ctx.refBytes, blobs))));
      if (blobs.size > 0) {
        await c.query(
          `INSERT INTO ${this.#ctx.s}.payloads (task_id, hash, data) SELECT $1, * FROM unnest($2::text[], $3::bytea[]) ON CONFLICT DO NOTHING`,
          [taskId, [...blobs.keys()], [...blobs.values()].map(asBuffer)],
        );
      }
      const s = next.summary!;
      const values: unknown[] = [taskId, ids, bytes, s.workflow, s.kind, s.status, s.outcome ?? null, s.lastEventId, next.maxGeneration, s.turn, s.queued, s.lastInputId ?? null, s.createdAt, s.updatedAt];
      values.push(...cancelValues(cancelWrite(events, s, locked.exists), s.lastEventId));
      let leaseCte = '';
      if (options.lease) {
        const l = clock.leaseToDb(next.lease!);
        values.push(l.owner, l.instance, l.generation, l.expiresAt);
        leaseCte = `, l AS (INSERT INTO ${this.#ctx.s}.leases (task_id, owner, instance, generation, expires_at) VALUES ($1, $17, $18, $19, $20)${locked.hasLease ? LEASE_UPSERT : ''})`;
      }
      // One statement: events, summary and lease. A row this transaction did not see is inserted,
      // never upserted: if a concurrent creator committed it meanwhile, the insert fails and #tx
      // retries against the fresh row.
      await c.query(
        `WITH e AS (INSERT INTO ${this.#ctx.s}.events (task_id, event_id, data) SELECT $1, * FROM unnest($2::bigint[], $3::bytea[]))${leaseCte}
         INSERT INTO ${this.#ctx.s}.summaries (task_id, workflow, kind, status, outcome, last_event_id, max_generation, turn, queued, last_input_id, created_at, updated_at, cancel_requested, cancel_known_through)
         VALUES ($1, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)${locked.exists ? SUMMARY_UPSERT : ''}`,
        values,
      );
      return { lastEventId: next.lastEventId, summary: { ...s } };
    }, sync).catch((err: unknown) => {
      // Refused by the rules: the head read stands. Anything else: the head is unknown.
      if (!refused) this.#ctx.remember(taskId, undefined);
      throw this.#raceError(err, taskId, options.expectedLastEventId);
    });
  }

  /** A unique violation that outlived the retries: still a lost race, reported as the contract's error. */
  #raceError(err: unknown, taskId: string, expected: number): unknown {
    if ((err as { code?: unknown }).code === '23505') return new ConcurrencyError(taskId, expected, expected + 1);
    return err;
  }
}
