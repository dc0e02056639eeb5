/**
 * The PostgreSQL store's write path for appends: group commit across tasks (Batcher), the
 * one-statement append on the head the store last saw (postgres-append.ts) alone or batched, the
 * locked transaction that decides when that head moved, and the retry after a lost connection
 * that first checks whether the write landed. Fencing is applyAppend's (task-head.ts) on every path.
 */
import { createHash } from 'node:crypto';
import { ConcurrencyError, TurnlogError, invalidArgument } from '../errors.js';
import { encodeEvent } from '../history/codec.js';
import type { HistoryEvent } from '../history/events.js';
import { Batcher } from './batcher.js';
import type { AppendOptions, AppendResult } from './history-store.js';
import { checkTaskId } from './keys.js';
import { externalize } from './payload-refs.js';
import { batchKey, casBatchSql, casBatchValues, casReply, casSql, casStatement, planCas, type CasItem, type CasPlan } from './postgres-append.js';
import { CONTENTION, type PgStoreContext } from './postgres-context.js';
import type { SqlClient } from './postgres-migrations.js';
import type { PgClientLike, StoreLogger } from './postgres-options.js';
import { getSummary } from './postgres-reads.js';
import { CONNECTION_TRIES, ClockFrame, DB_NOW, LEASE_UPSERT, asBuffer, guard, isConnectionLoss, quoteLiteral, toLease, toSummary, unavailable, type LeaseRow, type SummaryRow } from './postgres-rows.js';
import { applyAppend, type TaskHead } from './task-head.js';

/** A `pg` client's prepared-statement form of query (a `name` is parsed once per connection). */
interface PreparingClient {
  query(config: { name?: string | undefined; text: string; values: unknown[] }): Promise<{ rows: any[]; rowCount?: number | null }>;
  query(config: { name?: string | undefined; text: string; values: unknown[] }, callback: (err: Error | null | undefined, res: { rows: any[]; rowCount?: number | null }) => void): void;
}

/** A prepared statement's text and name (undefined: unnamed, parsed each time). */
export interface Statement {
  readonly name: string | undefined;
  readonly text: string;
}

/**
 * A query config of `st` with `values`: name and text inherited from `st`, values its own (pg
 * 8.23.1 copies a config keeping its prototype: 3.0 vs 5.8 µs a `new Query`). Safe in ^8.11:
 * 8.11.0-8.23.0 read the config in place; test/store/postgres-query-config.test.ts pins it.
 */
export function queryConfig(st: Statement, values: unknown[]): { name?: string | undefined; text: string; values: unknown[] } {
  const config = Object.create(st) as { name?: string | undefined; text: string; values: unknown[] };
  config.values = values;
  return config;
}

/** The default: stderr, one line, as the engine's default logger writes a warning. */
const stderrLogger: StoreLogger = {
  warn: (message, fields) =>
    console.error(`[turnlog] warn ${message}${Object.entries(fields ?? {}).map(([k, v]) => ` ${k}=${v instanceof Error ? v.message : String(v)}`).join('')}`),
};

/** Distinct causes of a batch fallback warned about, at most (then no more warnings). */
const FALLBACK_CAUSES_KEPT = 100;

/**
 * Events only the running turn's own engine acts on (recorded steps, checkpoints): an append of
 * nothing else is a routine notice, which may wait ten intervals for company (postgres-notifier.ts).
 */
const ROUTINE_EVENTS: ReadonlySet<HistoryEvent['type']> = new Set(['StepCompleted', 'Checkpointed']);

function routine(events: readonly HistoryEvent[]): boolean {
  for (const e of events) if (!ROUTINE_EVENTS.has(e.type)) return false;
  return true;
}

/** An append waiting for its batch. */
interface PendingAppend {
  taskId: string;
  events: readonly HistoryEvent[];
  options: AppendOptions;
  /** The latest event time: the caller's clock, rebased onto the database's for leases. */
  callerNow: number;
  resolve(r: AppendResult): void;
  reject(err: unknown): void;
}

const SUMMARY_UPSERT = ` ON CONFLICT (task_id) DO UPDATE SET workflow = EXCLUDED.workflow, kind = EXCLUDED.kind,
  status = EXCLUDED.status, outcome = EXCLUDED.outcome, last_event_id = EXCLUDED.last_event_id,
  max_generation = EXCLUDED.max_generation, turn = EXCLUDED.turn, queued = EXCLUDED.queued,
  last_input_id = EXCLUDED.last_input_id, created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at`;

/** Appends of one store (its `append`), with the counters the benchmark and tests read. */
export class PgAppender {
  readonly #ctx: PgStoreContext;
  /** Group commit across tasks (`groupCommit`, default on). */
  readonly #batcher: Batcher<PendingAppend> | undefined;
  /** The one-statement append's text and prepared-statement name per shape key (postgres-append.ts). */
  readonly #casStatements = new Map<number, Statement>();
  /** Appends written by the one-statement path and by the locked path, for the benchmark and tests. */
  readonly appendPaths = { oneStatement: 0, locked: 0 };
  /** Batch statements that failed other than by contention or a lost connection (their appends took the locked path). */
  batchFallbacks = 0;
  /** The causes of those already warned about (`sqlstate: message`). */
  readonly #fallbackCauses = new Set<string>();
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
    const { groupCommit, max } = ctx.options;
    this.#mayKeep = ctx.options.pool === undefined && (max ?? 10) >= 3;
    if (groupCommit !== false) {
      // Two batches in flight at most (one with a pool of 2 or 3): while they are written the next
      // one gathers, and the fewer the statements the less CPU an append costs both sides
      // (docs/decisions.md); two, so one batch waiting on a row lock does not stall every append.
      this.#batcher = new Batcher((entries, written) => this.#appendBatch(entries, written), Math.max(1, Math.min(2, Math.floor((max ?? 10) / 2))));
    }
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
  #lone(a: Omit<PendingAppend, 'resolve' | 'reject'>): Promise<AppendResult> | undefined {
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
      // Nothing written (the head moved) or a concurrent creator's row: the locked path decides.
      if (!err || code === '23505') {
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

  /** Writes a batch of appends to distinct tasks (the per-task queue keeps one in flight per task); never rejects. */
  #appendBatch(entries: PendingAppend[], written: () => void): Promise<void> {
    if (entries.length === 1) {
      const e = entries[0]!;
      try {
        return this.#appendOne(e).then(
          (r) => {
            written();
            e.resolve(r);
          },
          (err: unknown) => {
            written();
            e.reject(err);
          },
        );
      } catch (err) {
        // Not expected (every step below settles its promise), but a throw here would hold the batcher's slot forever.
        e.reject(err);
        return Promise.resolve();
      }
    }
    return this.#appendMany(entries);
  }

  async #appendMany(entries: PendingAppend[]): Promise<void> {
    const sync = entries.some((e) => e.options.sync ?? this.#ctx.options.sync ?? true);
    // Appends whose head this store knows go in one statement (postgres-append.ts); the others,
    // and those whose head moved, take the locked batch.
    const items: (CasItem & { entry: PendingAppend })[] = [];
    let rest: PendingAppend[] = [];
    for (const e of entries) {
      const plan = planCas(e.taskId, this.#ctx.heads.get(e.taskId), e.events, e.options, e.callerNow);
      if (!plan) {
        rest.push(e);
        continue;
      }
      const blobs = new Map<string, Uint8Array>();
      const bytes = e.events.map((x) => encodeEvent(externalize(x, this.#ctx.refBytes, blobs)));
      items.push({ taskId: e.taskId, plan, events: e.events, bytes, blobs, entry: e });
    }
    if (items.length > 1) {
      let written: Set<string>;
      let now = 0;
      try {
        [written, now] = await this.#casBatch(items, sync);
      } catch (err) {
        for (const it of items) this.#ctx.remember(it.taskId, undefined);
        if (isConnectionLoss(err)) return this.#alone(items.map((it) => it.entry), true);
        // Contention (a concurrent creator's row, a deadlock): the locked batch decides. Anything
        // else is a fault (a server setting such as statement_timeout, a bug): the locked batch
        // still decides, and the cause is warned about once.
        if (!CONTENTION.has(String((err as { code?: unknown }).code))) this.#batchFellBack(err);
        written = new Set();
      }
      for (const it of items) {
        if (!written.has(it.taskId)) {
          this.#ctx.remember(it.taskId, undefined);
          rest.push(it.entry);
          continue;
        }
        const { next, leaseMs } = it.plan;
        this.#ctx.remember(it.taskId, { ...next, lease: leaseMs !== undefined ? { ...next.lease!, expiresAt: now + leaseMs } : next.lease });
        this.appendPaths.oneStatement++;
        this.#ctx.notifier!.add(it.taskId, next.lastEventId, routine(it.events));
        it.entry.resolve({ lastEventId: next.lastEventId, summary: { ...next.summary! } });
      }
    } else {
      rest = entries;
    }
    if (rest.length === 0) return;
    if (rest.length === 1) {
      const e = rest[0]!;
      return this.#appendOne(e).then(e.resolve, e.reject);
    }
    let results: (AppendResult | Error)[];
    try {
      results = await this.#ctx.tx((c) => this.#writeBatch(c, rest), sync);
      this.appendPaths.locked += rest.length;
    } catch (err) {
      for (const e of rest) this.#ctx.remember(e.taskId, undefined);
      // The batch failed as a whole (a lost connection, a deadlock that outlived the retries):
      // each append goes again alone, and reports its own outcome (after a lost COMMIT reply, landed).
      return this.#alone(rest, isConnectionLoss(err));
    }
    results.forEach((r, i) => {
      const e = rest[i]!;
      if (r instanceof Error) return e.reject(r);
      this.#ctx.notifier!.add(e.taskId, r.lastEventId, routine(e.events));
      e.resolve(r);
    });
  }

  /** Counts a batch statement's fault and warns once per cause (sqlstate and message). */
  #batchFellBack(err: unknown): void {
    this.batchFallbacks++;
    const sqlstate = String((err as { code?: unknown }).code ?? '');
    const cause = `${sqlstate}: ${(err as Error)?.message ?? String(err)}`;
    if (this.#fallbackCauses.has(cause) || this.#fallbackCauses.size >= FALLBACK_CAUSES_KEPT) return;
    this.#fallbackCauses.add(cause);
    (this.#ctx.options.logger ?? stderrLogger).warn('a group commit statement failed; its appends took the locked path (warned once per cause)', {
      store: this.#ctx.location,
      sqlstate,
      error: err,
    });
  }

  /** Each append of a failed batch again alone (after a lost connection, first: did it land? and again if refused). */
  async #alone(entries: PendingAppend[], lost: boolean): Promise<void> {
    await Promise.all(
      entries.map(async (e) => {
        const landed = lost ? await this.#landed(e).catch(() => undefined) : undefined;
        return landed ?? this.#appendOnce(e).catch((err: unknown) => this.#retry(e, err, lost));
      }).map((p, i) => p.then(entries[i]!.resolve, entries[i]!.reject)),
    );
  }

  /** The batch statement: the tasks it wrote (their heads held) and the database's now. */
  async #casBatch(items: CasItem[], sync: boolean): Promise<[Set<string>, number]> {
    const st = this.#casStatement(batchKey(!sync), () => casBatchSql(this.#ctx.s, !sync));
    const pool = this.#ctx.checkedPool();
    let client: PgClientLike;
    try {
      client = await pool.connect();
    } catch (err) {
      throw unavailable(err, this.#ctx.location, 'a write');
    }
    guard(client);
    let broken: Error | undefined;
    try {
      const values = casBatchValues(items);
      const res = await (client as unknown as PreparingClient).query(queryConfig(st, values));
      const row = res.rows[0] as { ok: string[]; now: string | number };
      return [new Set(row.ok), Number(row.now)];
    } catch (err) {
      if (isConnectionLoss(err)) broken = err as Error;
      if (CONTENTION.has(String((err as { code?: unknown }).code))) throw err;
      throw unavailable(err, this.#ctx.location, 'a write');
    } finally {
      client.release(broken);
    }
  }

  /**
   * One transaction for many tasks' appends: lock every head (summaries then leases, each in task
   * id order, so batches never deadlock), apply each append's rules alone (a rejection is that
   * append's, never its neighbours'), then write all events, summaries and leases in one statement.
   */
  async #writeBatch(c: SqlClient, entries: PendingAppend[]): Promise<(AppendResult | Error)[]> {
    const list = [...entries.map((e) => e.taskId)].sort().map(quoteLiteral).join(',');
    const res = await c.query(
      `WITH s AS (SELECT * FROM ${this.#ctx.s}.summaries WHERE task_id = ANY(ARRAY[${list}]::text[]) ORDER BY task_id FOR UPDATE),
            l AS (SELECT task_id, owner, instance, generation, expires_at FROM ${this.#ctx.s}.leases WHERE task_id = ANY(ARRAY[${list}]::text[]) ORDER BY task_id FOR UPDATE)
       SELECT (SELECT coalesce(json_agg(row_to_json(s)), '[]'::json) FROM s) AS s, (SELECT coalesce(json_agg(row_to_json(l)), '[]'::json) FROM l) AS l, ${DB_NOW} AS now`,
    );
    const row = res.rows[0] as { s: SummaryRow[]; l: (LeaseRow & { task_id: string })[]; now: number };
    const dbNow = Number(row.now);
    const summaries = new Map(row.s.map((r) => [r.task_id, r]));
    const leases = new Map(row.l.map((r) => [r.task_id, r]));
    const ev: [string[], number[], Buffer[]] = [[], [], []];
    const ls: [string[], string[], string[], number[], number[]] = [[], [], [], [], []];
    const sm: unknown[][] = Array.from({ length: 12 }, () => []);
    const out: (AppendResult | Error)[] = [];
    for (const e of entries) {
      const sr = summaries.get(e.taskId);
      const lr = leases.get(e.taskId);
      const head: TaskHead = {
        lastEventId: sr ? Number(sr.last_event_id) : 0,
        maxGeneration: sr ? Number(sr.max_generation) : 0,
        lease: lr ? toLease(lr) : undefined,
        summary: sr ? toSummary(sr) : undefined,
      };
      const clock = new ClockFrame(dbNow, e.callerNow);
      let next: TaskHead;
      try {
        next = applyAppend(e.taskId, clock.headToCaller(head), e.events, e.options, true);
      } catch (err) {
        this.#ctx.remember(e.taskId, head);
        out.push(err as Error);
        continue;
      }
      this.#ctx.remember(e.taskId, { ...next, lease: e.options.lease ? clock.leaseToDb(next.lease!) : head.lease });
      for (const x of e.events) {
        ev[0].push(e.taskId);
        ev[1].push(x.eventId);
        ev[2].push(asBuffer(encodeEvent(x)));
      }
      const s = next.summary!;
      [e.taskId, s.workflow, s.kind, s.status, s.outcome ?? null, s.lastEventId, next.maxGeneration, s.turn, s.queued, s.lastInputId ?? null, s.createdAt, s.updatedAt].forEach((v, i) => sm[i]!.push(v));
      if (e.options.lease) {
        const l = clock.leaseToDb(next.lease!);
        [e.taskId, l.owner, l.instance, l.generation, l.expiresAt].forEach((v, i) => (ls[i] as unknown[]).push(v));
      }
      out.push({ lastEventId: next.lastEventId, summary: { ...s } });
    }
    if (ev[0].length === 0) return out;
    // Upserts are safe for rows this transaction did not see: a concurrent creator's event 1
    // fails the events insert on its primary key, and #tx retries the batch against its row.
    await c.query(
      `WITH e AS (INSERT INTO ${this.#ctx.s}.events (task_id, event_id, data) SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])),
            l AS (INSERT INTO ${this.#ctx.s}.leases (task_id, owner, instance, generation, expires_at) SELECT * FROM unnest($4::text[], $5::text[], $6::text[], $7::bigint[], $8::bigint[])${LEASE_UPSERT})
       INSERT INTO ${this.#ctx.s}.summaries (task_id, workflow, kind, status, outcome, last_event_id, max_generation, turn, queued, last_input_id, created_at, updated_at)
       SELECT * FROM unnest($9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::bigint[], $15::bigint[], $16::bigint[], $17::bigint[], $18::text[], $19::bigint[], $20::bigint[])${SUMMARY_UPSERT}`,
      [...ev, ...ls, ...sm],
    );
    return out;
  }

  /**
   * One append, retried when the connection is lost: first it checks whether the lost write
   * landed (a COMMIT whose reply never came), so a retry never writes twice.
   */
  #appendOne(a: Omit<PendingAppend, 'resolve' | 'reject'>): Promise<AppendResult> {
    return this.#appendOnce(a).catch((err: unknown) => this.#retry(a, err));
  }

  /**
   * #appendOne after its first try failed with `first` (`lost`: an earlier try lost its connection).
   * After a lost connection, a later try's refusal (the head moved: TURNLOG_CONCURRENCY) may be the
   * lost try itself, committed after the check before it looked (its statement still waited on a
   * lock, or was still on its way): the events as stored decide (test: store/postgres-lost-reply-tcp).
   */
  async #retry(a: Omit<PendingAppend, 'resolve' | 'reject'>, first: unknown, lost = false): Promise<AppendResult> {
    let err = first;
    for (let attempt = 1; ; attempt++) {
      if (!isConnectionLoss(err)) {
        const landed = lost ? await this.#landed(a).catch(() => undefined) : undefined;
        if (landed) return landed;
        throw err;
      }
      lost = true;
      const landed = await this.#landed(a).catch(() => null);
      if (landed) return landed;
      if (attempt >= CONNECTION_TRIES) {
        throw new TurnlogError(
          'TURNLOG_STORE_UNAVAILABLE',
          `Store ${this.#ctx.location}: task ${a.taskId}'s append lost its connection ${attempt} times (${(err as Error).message})${landed === null ? '; whether the last try landed could not be checked' : ''}. Retry once PostgreSQL is reachable.`,
          { cause: err },
        );
      }
      await new Promise((r) => setTimeout(r, 100 * 2 ** attempt));
      try {
        return await this.#appendOnce(a);
      } catch (e) {
        err = e;
      }
    }
  }

  /** The result of `a` if its events are stored exactly (a commit whose reply was lost; its notice goes now), else undefined. */
  async #landed(a: Omit<PendingAppend, 'resolve' | 'reject'>): Promise<AppendResult | undefined> {
    const from = a.options.expectedLastEventId + 1;
    const rows = await this.#ctx.query(`SELECT data FROM ${this.#ctx.s}.events WHERE task_id = $1 AND event_id BETWEEN $2 AND $3 ORDER BY event_id`, [a.taskId, from, from + a.events.length - 1]);
    // Compared as written: a large payload is stored by reference (externalize), not inline.
    const stored = (e: HistoryEvent): Buffer => asBuffer(encodeEvent(externalize(e, this.#ctx.refBytes, new Map())));
    if (rows.length !== a.events.length || !rows.every((r: { data: Buffer }, i) => stored(a.events[i]!).equals(r.data))) return undefined;
    const summary = await getSummary(this.#ctx, a.taskId);
    if (!summary) return undefined;
    const lastEventId = from + a.events.length - 1;
    this.#ctx.notifier!.add(a.taskId, lastEventId, routine(a.events));
    return { lastEventId, summary };
  }

  /**
   * One append: one autocommit statement when the head this store last saw still holds
   * (postgres-append.ts), else the locked transaction, which decides on the head it reads.
   */
  #appendOnce(a: Omit<PendingAppend, 'resolve' | 'reject'>): Promise<AppendResult> {
    const sync = a.options.sync ?? this.#ctx.options.sync ?? true;
    const plan = planCas(a.taskId, this.#ctx.heads.get(a.taskId), a.events, a.options, a.callerNow);
    return plan ? this.#casAppend(a, plan, sync) : this.#locked(a, sync);
  }

  /** The locked transaction's append, then its notice. */
  #locked(a: Omit<PendingAppend, 'resolve' | 'reject'>, sync: boolean): Promise<AppendResult> {
    return this.#lockedAppend(a, sync).then((out) => {
      this.#ctx.notifier!.add(a.taskId, out.lastEventId, routine(a.events));
      return out;
    });
  }

  /** The one-statement append of `plan`, then its notice; the locked path when the head moved (nothing written). */
  async #casAppend(a: Omit<PendingAppend, 'resolve' | 'reject'>, plan: CasPlan, sync: boolean): Promise<AppendResult> {
    const { taskId, events } = a;
    const blobs = new Map<string, Uint8Array>();
    const bytes = events.map((e) => encodeEvent(externalize(e, this.#ctx.refBytes, blobs)));
    const { shape, key, values } = casStatement(taskId, plan, events, bytes, blobs, !sync);
    const st = this.#casStatement(key, () => casSql(this.#ctx.s, shape));
    const pool = this.#ctx.checkedPool();
    let client: PgClientLike;
    const kept = this.#keptBusy ? undefined : this.#kept;
    if (kept !== undefined) {
      this.#keptBusy = true;
      client = kept;
    } else {
      try {
        client = await pool.connect();
      } catch (err) {
        throw unavailable(err, this.#ctx.location, 'a write');
      }
      guard(client);
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
      // A concurrent creator's row or events: the locked path decides against them.
      if ((err as { code?: unknown }).code !== '23505') {
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
  #lockedAppend(a: Omit<PendingAppend, 'resolve' | 'reject'>, sync: boolean): Promise<AppendResult> {
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
      let leaseCte = '';
      if (options.lease) {
        const l = clock.leaseToDb(next.lease!);
        values.push(l.owner, l.instance, l.generation, l.expiresAt);
        leaseCte = `, l AS (INSERT INTO ${this.#ctx.s}.leases (task_id, owner, instance, generation, expires_at) VALUES ($1, $15, $16, $17, $18)${locked.hasLease ? LEASE_UPSERT : ''})`;
      }
      // One statement: events, summary and lease. A row this transaction did not see is inserted,
      // never upserted: if a concurrent creator committed it meanwhile, the insert fails and #tx
      // retries against the fresh row.
      await c.query(
        `WITH e AS (INSERT INTO ${this.#ctx.s}.events (task_id, event_id, data) SELECT $1, * FROM unnest($2::bigint[], $3::bytea[]))${leaseCte}
         INSERT INTO ${this.#ctx.s}.summaries (task_id, workflow, kind, status, outcome, last_event_id, max_generation, turn, queued, last_input_id, created_at, updated_at)
         VALUES ($1, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)${locked.exists ? SUMMARY_UPSERT : ''}`,
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
