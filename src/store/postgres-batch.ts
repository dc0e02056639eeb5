/**
 * Group commit of the PostgreSQL store (docs/scale-out.md#group-commit): a batch of appends to
 * distinct tasks, gathered by the Batcher, goes as one statement when the store knows their heads
 * (postgres-append.ts, each checked alone, a moved head leaves only its own append out), else as
 * one locked transaction; a failed batch's appends go again alone, after a lost connection first
 * checking whether they landed (postgres-lost-reply.ts). Fencing is applyAppend's on every path.
 */
import { encodeEvent } from '../history/codec.js';
import type { AppendResult } from './history-store.js';
import { externalize } from './payload-refs.js';
import { batchKey, cancelValues, cancelWrite, casBatchSql, casBatchValues, planCas, type CasItem } from './postgres-append.js';
import { SUMMARY_UPSERT, queryConfig, routine, type AppendRequest, type PendingAppend, type PreparingClient, type Statement } from './postgres-append-request.js';
import { CONTENTION, type PgStoreContext } from './postgres-context.js';
import { findLanded } from './postgres-lost-reply.js';
import type { SqlClient } from './postgres-migrations.js';
import type { StoreLogger } from './postgres-options.js';
import { ClockFrame, DB_NOW, LEASE_UPSERT, asBuffer, isConnectionLoss, quoteLiteral, toLease, toSummary, unavailable, type LeaseRow, type SummaryRow } from './postgres-rows.js';
import { applyAppend, type TaskHead } from './task-head.js';

/** The default: stderr, one line, as the engine's default logger writes a warning. */
const stderrLogger: StoreLogger = {
  warn: (message, fields) =>
    console.error(`[turnlog] warn ${message}${Object.entries(fields ?? {}).map(([k, v]) => ` ${k}=${v instanceof Error ? v.message : String(v)}`).join('')}`),
};

/** Distinct causes of a batch fallback warned about, at most (then no more warnings). */
const FALLBACK_CAUSES_KEPT = 100;

/** What a batch takes from the appender (postgres-appender.ts): its lone paths, counters and statements. */
export interface BatchHost {
  readonly appendPaths: { oneStatement: number; locked: number };
  /** One append, retried after a lost connection. */
  appendOne(a: AppendRequest): Promise<AppendResult>;
  /** One try of one append. */
  appendOnce(a: AppendRequest): Promise<AppendResult>;
  /** The retry after a try failed with `err` (`lost`: an earlier try lost its connection). */
  retry(a: AppendRequest, err: unknown, lost: boolean): Promise<AppendResult>;
  /** A prepared statement per key. */
  statement(key: number, text: () => string): Statement;
}

/** Writes the Batcher's batches of one store. */
export class PgBatchWriter {
  readonly #ctx: PgStoreContext;
  readonly #host: BatchHost;
  /** Batch statements that failed other than by contention or a lost connection (their appends took the locked path). */
  fallbacks = 0;
  /** The causes of those already warned about (`sqlstate: message`). */
  readonly #fallbackCauses = new Set<string>();

  constructor(ctx: PgStoreContext, host: BatchHost) {
    this.#ctx = ctx;
    this.#host = host;
  }

  /** Writes a batch of appends to distinct tasks (the per-task queue keeps one in flight per task); never rejects. */
  write(entries: PendingAppend[], written: () => void): Promise<void> {
    if (entries.length === 1) {
      const e = entries[0]!;
      try {
        return this.#host.appendOne(e).then(
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
        this.#host.appendPaths.oneStatement++;
        this.#ctx.notifier!.add(it.taskId, next.lastEventId, routine(it.events));
        it.entry.resolve({ lastEventId: next.lastEventId, summary: { ...next.summary! } });
      }
    } else {
      rest = entries;
    }
    if (rest.length === 0) return;
    if (rest.length === 1) {
      const e = rest[0]!;
      return this.#host.appendOne(e).then(e.resolve, e.reject);
    }
    let results: (AppendResult | Error)[];
    try {
      results = await this.#ctx.tx((c) => this.#writeBatch(c, rest), sync);
      this.#host.appendPaths.locked += rest.length;
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
    this.fallbacks++;
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
        const landed = lost ? await findLanded(this.#ctx, e).catch(() => undefined) : undefined;
        return landed ?? this.#host.appendOnce(e).catch((err: unknown) => this.#host.retry(e, err, lost));
      }).map((p, i) => p.then(entries[i]!.resolve, entries[i]!.reject)),
    );
  }

  /** The batch statement: the tasks it wrote (their heads held) and the database's now. */
  async #casBatch(items: CasItem[], sync: boolean): Promise<[Set<string>, number]> {
    const st = this.#host.statement(batchKey(!sync), () => casBatchSql(this.#ctx.s, !sync));
    const client = await this.#ctx.connect('a write');
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
    const sm: unknown[][] = Array.from({ length: 14 }, () => []);
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
      const cancel = cancelValues(cancelWrite(e.events, s, sr !== undefined), s.lastEventId);
      [e.taskId, s.workflow, s.kind, s.status, s.outcome ?? null, s.lastEventId, next.maxGeneration, s.turn, s.queued, s.lastInputId ?? null, s.createdAt, s.updatedAt, ...cancel].forEach((v, i) => sm[i]!.push(v));
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
       INSERT INTO ${this.#ctx.s}.summaries (task_id, workflow, kind, status, outcome, last_event_id, max_generation, turn, queued, last_input_id, created_at, updated_at, cancel_requested, cancel_known_through)
       SELECT * FROM unnest($9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::bigint[], $15::bigint[], $16::bigint[], $17::bigint[], $18::text[], $19::bigint[], $20::bigint[], $21::boolean[], $22::bigint[])${SUMMARY_UPSERT}`,
      [...ev, ...ls, ...sm],
    );
    return out;
  }
}
