/**
 * The one-statement append of the PostgreSQL store (docs/decisions.md, "One round trip for a
 * fenced append"): a compare-and-swap on the task's head. The store remembers the head it last
 * saw for each task it writes; the append's rules (`applyAppend`, task-head.ts) run on that head
 * in TypeScript, and one autocommit statement locks the summary and lease rows (in that order),
 * checks that they still hold exactly that head, and writes events, payloads, summary and lease
 * only if they do (`casSql`). SQL restates no rule: it compares rows. When the head moved (another engine wrote, the task is new
 * to this store), the statement writes nothing and the store takes its locked path, which reports
 * the contract's exact error. Pure: SQL text and values, no pool.
 */
import { asBuffer, DB_NOW } from './postgres-rows.js';
import { applyAppend, type TaskHead } from './task-head.js';
import type { AppendOptions } from './history-store.js';
import type { HistoryEvent, TaskSummary } from '../history/events.js';

/** What the statement must do: the head it expects, the head it writes. */
export interface CasPlan {
  /** The head the rows must hold (lease times on the database clock; its expiry is not compared). */
  expected: TaskHead;
  /** The head after the append (its lease's expiry on the caller's clock). */
  next: TaskHead;
  /** The written lease's duration from the database's now (`options.lease`), else undefined. */
  leaseMs: number | undefined;
}

/**
 * The plan of a one-statement append against the head this store last saw (`undefined`: the store
 * has not seen the task, so it expects none), or undefined when the locked path must decide: the
 * append breaks a rule on that head (the locked path reports the exact error from the real head),
 * or its lease decision would depend on the clock (a lease of another owner or instance).
 */
export function planCas(taskId: string, seen: TaskHead | undefined, events: readonly HistoryEvent[], options: AppendOptions, callerNow: number): CasPlan | undefined {
  const expected = seen ?? { lastEventId: 0, maxGeneration: 0, lease: undefined, summary: undefined };
  if (expected.lastEventId !== options.expectedLastEventId) return undefined;
  const l = options.lease;
  const cur = expected.lease;
  // Without a current lease or with our own, the acquisition table does not read the clock.
  if (l && cur && (cur.owner !== l.owner || cur.instance !== l.instance)) return undefined;
  let next: TaskHead;
  try {
    next = applyAppend(taskId, expected, events, options, true);
  } catch {
    return undefined;
  }
  return { expected, next, leaseMs: l ? l.expiresAt - callerNow : undefined };
}

/** The statement's shape; each shape is one prepared statement per connection. */
export interface CasShape {
  /** The task has rows (update them) or not (insert them; a concurrent creator fails the insert). */
  exists: boolean;
  /** Whether a lease row is expected. */
  hasLease: boolean;
  /** Whether the append writes a lease. */
  writesLease: boolean;
  /** Whether payloads by reference are written. */
  payloads: boolean;
  /** `synchronous_commit = off` for this statement's transaction. */
  async: boolean;
  /** One event: its id and bytes as scalars ($2, $3), the bytes sent in binary, not hex in an array literal. */
  one: boolean;
  /**
   * The summary moves only its last event id, generation floor and update time (a step): those
   * three are set ($4..$6); every other column keeps the expected value the statement checks.
   */
  light: boolean;
  /** The pending task cancel's columns (migration 7): see {@link cancelWrite}. */
  cancel: CancelWrite;
}

/**
 * How an append writes `cancel_requested` (migration 7): 0 carries it, still known only if it was
 * known through the row's last event (the append holds no task cancel nor TaskCompleted); 1 and
 * 2 set it true or false, known through the append's last event (a new task's whole history, or
 * an append holding one). An older build's writes carry nothing, so their rows read as not known.
 */
export type CancelWrite = 0 | 1 | 2;

export function cancelWrite(events: readonly HistoryEvent[], next: TaskSummary, exists: boolean): CancelWrite {
  if (exists && !events.some((e) => e.type === 'TaskCompleted' || (e.type === 'CancelRequested' && e.scope === 'task'))) return 0;
  return next.cancelRequested ? 1 : 2;
}

/** The SET items for the cancel columns of an UPDATE (old values on the right), `last` the new last event id. */
export function cancelSet(w: CancelWrite, last: string): string {
  if (w === 0) return `cancel_known_through = CASE WHEN cancel_known_through = last_event_id THEN ${last} ELSE cancel_known_through END`;
  return `cancel_requested = ${w === 1}, cancel_known_through = ${last}`;
}

/**
 * The cancel columns of an upsert's insert (`cancel_requested, cancel_known_through`): a NULL known
 * through is "carry" (write 0), which SUMMARY_UPSERT (postgres-append-request.ts) reads from EXCLUDED.
 */
export function cancelValues(w: CancelWrite, last: number): [boolean, number | null] {
  return [w === 1, w === 0 ? null : last];
}

const SUMMARY_COLS = 'workflow, kind, status, outcome, last_event_id, max_generation, turn, queued, last_input_id, created_at, updated_at';
const SUMMARY_TYPES = ['text', 'text', 'text', 'text', 'bigint', 'bigint', 'bigint', 'bigint', 'text', 'bigint', 'bigint'];

function params(from: number, types: readonly string[]): string {
  return types.map((t, i) => `$${from + i}::${t}`).join(', ');
}

/** `col = $n AND …` (IS NOT DISTINCT FROM: the nullable columns are compared as values). */
function equal(cols: string, from: number, types: readonly string[]): string {
  return cols.split(', ').map((c, i) => `${c} IS NOT DISTINCT FROM $${from + i}::${types[i]}`).join(' AND ');
}

/**
 * The statement. Parameters: $1 task id, $2 event ids, $3 event bytes, $4..$14 the new summary
 * ($4..$6 its last event id, generation floor and update time when `light`), then the expected
 * summary (11, when `exists`), the expected lease (owner, instance,
 * generation, when `hasLease`), the new lease (owner, instance, generation, ms from now, when
 * `writesLease`), the payloads (hashes, bytes). With a lease it returns one row, `ok` (written)
 * and `now`; without, it is the events' insert and returns no row: written if it inserted any
 * (no row description to parse, `casReply`).
 *
 * A task with rows: the summary's UPDATE is the compare-and-swap (`WHERE` the whole expected
 * summary; under READ COMMITTED a row changed meanwhile is re-checked at its newest version), so
 * it locks and writes the summary row in one tuple operation and every other write follows from
 * its row; the lease row is locked after it (the order every writer of the store locks them in)
 * and compared. The summary is already written when the lease turns out moved, so then the
 * events' data is NULL and their insert fails on NOT NULL (`fenceRefused`): the statement writes
 * nothing, as when the summary moved. A new task: both rows' absence is checked first (locking
 * whatever a concurrent creator committed), then everything is inserted.
 */
export function casSql(s: string, shape: CasShape): string {
  let n = shape.light ? 7 : 15;
  const expectSummary = equal(SUMMARY_COLS, n, SUMMARY_TYPES);
  if (shape.exists) n += SUMMARY_TYPES.length;
  const expectLease = shape.hasLease ? `EXISTS (SELECT 1 FROM l WHERE ${equal('owner, instance, generation', n, ['text', 'text', 'bigint'])})` : 'NOT EXISTS (SELECT 1 FROM l)';
  if (shape.hasLease) n += 3;
  const asyncCommit = `set_config('synchronous_commit', 'off', true)`;
  const lockLease = (when: string): string => `l AS MATERIALIZED (SELECT owner, instance, generation FROM ${s}.leases WHERE task_id = $1${when} FOR UPDATE)`;
  let ctes: string[];
  let events: string;
  if (shape.exists) {
    const set = shape.light
      ? `last_event_id = $4::bigint, max_generation = $5::bigint, updated_at = $6::bigint, ${cancelSet(0, '$4::bigint')}`
      : `(${SUMMARY_COLS}) = (${params(4, SUMMARY_TYPES)}), ${cancelSet(shape.cancel, '$8::bigint')}`;
    ctes = [
      `w AS (UPDATE ${s}.summaries SET ${set} WHERE task_id = $1 AND ${expectSummary} RETURNING ${shape.async ? asyncCommit : '1'})`,
      // Read (and so locked) only once the summary's row is: the store's lock order.
      lockLease(' AND EXISTS (SELECT 1 FROM w)'),
    ];
    // g reads the lease row before x writes it (x's update would hide the row from l's scan).
    if (shape.writesLease) ctes.push(`g AS MATERIALIZED (SELECT EXISTS (SELECT 1 FROM w) AND ${expectLease} AS ok, ${DB_NOW} AS now)`);
    const data = (d: string): string => `CASE WHEN ${expectLease} THEN ${d} END`;
    events = shape.one
      ? `INSERT INTO ${s}.events (task_id, event_id, data) SELECT $1, $2::bigint, ${data('$3::bytea')} FROM w`
      : `INSERT INTO ${s}.events (task_id, event_id, data) SELECT $1, v.id, ${data('v.data')} FROM w, unnest($2::bigint[], $3::bytea[]) AS v(id, data)`;
  } else {
    const extra = `${shape.writesLease ? `, ${DB_NOW} AS now` : ''}${shape.async ? `, ${asyncCommit}` : ''}`;
    ctes = [
      `s AS MATERIALIZED (SELECT 1 FROM ${s}.summaries WHERE task_id = $1 FOR UPDATE)`,
      lockLease(''),
      // The summary's row is locked before the lease's, as every write of the store locks them.
      `g AS MATERIALIZED (SELECT (NOT EXISTS (SELECT 1 FROM s)) AND (${expectLease}) AS ok${extra})`,
      `w AS (INSERT INTO ${s}.summaries (task_id, ${SUMMARY_COLS}, cancel_requested, cancel_known_through) SELECT $1, ${params(4, SUMMARY_TYPES)}, ${shape.cancel === 1}, $8::bigint WHERE (SELECT ok FROM g))`,
    ];
    events = shape.one
      ? `INSERT INTO ${s}.events (task_id, event_id, data) SELECT $1, $2::bigint, $3::bytea WHERE (SELECT ok FROM g)`
      : `INSERT INTO ${s}.events (task_id, event_id, data) SELECT $1, * FROM unnest($2::bigint[], $3::bytea[]) WHERE (SELECT ok FROM g)`;
  }
  if (shape.writesLease) {
    const [o, i, gen, ms] = [n, n + 1, n + 2, n + 3];
    n += 4;
    ctes.push(
      shape.hasLease
        ? `x AS (UPDATE ${s}.leases SET owner = $${o}::text, instance = $${i}::text, generation = $${gen}::bigint, expires_at = (SELECT now FROM g) + $${ms}::bigint WHERE task_id = $1 AND (SELECT ok FROM g))`
        : `x AS (INSERT INTO ${s}.leases (task_id, owner, instance, generation, expires_at) SELECT $1, $${o}::text, $${i}::text, $${gen}::bigint, (SELECT now FROM g) + $${ms}::bigint WHERE (SELECT ok FROM g))`,
    );
  }
  if (shape.payloads) {
    // Written only with the summary: from w's row, else when g's checks passed.
    const [from, where] = shape.exists ? [' FROM w,', ''] : [' FROM', ' WHERE (SELECT ok FROM g)'];
    ctes.push(`p AS (INSERT INTO ${s}.payloads (task_id, hash, data) SELECT $1, v.hash, v.data${from} unnest($${n}::text[], $${n + 1}::bytea[]) AS v(hash, data)${where} ON CONFLICT DO NOTHING)`);
  }
  if (!shape.writesLease) return `WITH ${ctes.join(',\n')}\n${events}`;
  ctes.push(`e AS (${events})`);
  return `WITH ${ctes.join(',\n')}\nSELECT ok, now FROM g`;
}

/**
 * Whether `err` is the statement's refusal for a moved lease (the events' NULL data, `casSql`):
 * nothing was written, as when it returns not written.
 */
export function fenceRefused(err: unknown): boolean {
  const e = err as { code?: unknown; table?: unknown; column?: unknown } | undefined;
  return e?.code === '23502' && e.table === 'events' && e.column === 'data';
}

/** Whether `casSql`'s statement wrote, and the database's now (NaN when it writes no lease: not returned). */
export function casReply(shape: CasShape, res: { rows: any[]; rowCount?: number | null }): { ok: boolean; now: number } {
  if (!shape.writesLease) return { ok: (res.rowCount ?? 0) > 0, now: NaN };
  const row = res.rows[0] as { ok: boolean; now: string | number };
  return { ok: row.ok, now: Number(row.now) };
}

function summaryValues(h: TaskHead): unknown[] {
  const s = h.summary!;
  return [s.workflow, s.kind, s.status, s.outcome ?? null, s.lastEventId, h.maxGeneration, s.turn, s.queued, s.lastInputId ?? null, s.createdAt, s.updatedAt];
}

/** The statement's shape, its key (`shapeKey`) and values for `plan` (`blobs`: payloads by reference to write). */
export function casStatement(
  taskId: string,
  plan: CasPlan,
  events: readonly HistoryEvent[],
  bytes: readonly Uint8Array[],
  blobs: ReadonlyMap<string, Uint8Array>,
  async: boolean,
): { shape: CasShape; key: number; values: unknown[] } {
  const { expected, next } = plan;
  const light = expected.summary !== undefined && sameButLast(expected.summary, next.summary!);
  const shape: CasShape = {
    exists: expected.summary !== undefined,
    hasLease: expected.lease !== undefined,
    writesLease: plan.leaseMs !== undefined,
    payloads: blobs.size > 0,
    async,
    one: events.length === 1,
    light,
    cancel: light ? 0 : cancelWrite(events, next.summary!, expected.summary !== undefined),
  };
  const values: unknown[] = shape.one ? [taskId, events[0]!.eventId, asBuffer(bytes[0]!)] : [taskId, events.map((e) => e.eventId), bytes.map(asBuffer)];
  if (shape.light) values.push(next.summary!.lastEventId, next.maxGeneration, next.summary!.updatedAt);
  else values.push(...summaryValues(next));
  if (shape.exists) values.push(...summaryValues(expected));
  if (shape.hasLease) values.push(expected.lease!.owner, expected.lease!.instance, expected.lease!.generation);
  if (shape.writesLease) values.push(next.lease!.owner, next.lease!.instance, next.lease!.generation, plan.leaseMs);
  if (shape.payloads) values.push([...blobs.keys()], [...blobs.values()].map(asBuffer));
  return { shape, key: shapeKey(shape), values };
}

/** Whether `b` differs from `a` at most in its last event id and update time (`CasShape.light`). */
function sameButLast(a: TaskSummary, b: TaskSummary): boolean {
  return a.workflow === b.workflow && a.kind === b.kind && a.status === b.status && a.outcome === b.outcome && a.turn === b.turn && a.queued === b.queued && a.lastInputId === b.lastInputId && a.createdAt === b.createdAt && a.cancelRequested === b.cancelRequested;
}

/** A number per shape (a bit per flag), to look its statement up without building its text. */
export function shapeKey(shape: CasShape): number {
  return (shape.exists ? 1 : 0) | (shape.hasLease ? 2 : 0) | (shape.writesLease ? 4 : 0) | (shape.payloads ? 8 : 0) | (shape.async ? 16 : 0) | (shape.one ? 32 : 0) | (shape.light ? 256 : 0) | (shape.cancel * 512);
}

/** The key of the batch statement (`casBatchSql`), apart from every shape's. */
export function batchKey(async: boolean): number {
  return async ? 128 : 64;
}

/** One append of a batch: its task, plan and encoded events (payloads by reference in `blobs`). */
export interface CasItem {
  taskId: string;
  plan: CasPlan;
  events: readonly HistoryEvent[];
  bytes: readonly Uint8Array[];
  blobs: ReadonlyMap<string, Uint8Array>;
}

const BATCH_COLS: readonly [string, string][] = [
  ['task_id', 'text'], ['ex', 'boolean'], ['hl', 'boolean'], ['wl', 'boolean'],
  ...SUMMARY_COLS.split(', ').map((c, i): [string, string] => [`e_${c}`, SUMMARY_TYPES[i]!]),
  ['e_owner', 'text'], ['e_instance', 'text'], ['e_generation', 'bigint'],
  ...SUMMARY_COLS.split(', ').map((c, i): [string, string] => [`n_${c}`, SUMMARY_TYPES[i]!]),
  ['n_owner', 'text'], ['n_instance', 'text'], ['n_generation', 'bigint'], ['n_ms', 'bigint'],
  ['n_cancel', 'int'],
];

/**
 * The batch form: many tasks' appends in one statement, each checked against its own expected
 * head, so a task whose head moved is left out alone (its neighbours land). Parameters: one array
 * per column of BATCH_COLS (one element per task), then the events (task, id, bytes) and the
 * payloads (task, hash, bytes). Rows are locked summaries first, then leases, each in task-id
 * order (as the locked batch does, so batches never deadlock). Returns `ok` (the tasks written)
 * and `now`. A unique violation (a concurrent creator) fails it whole: nothing is written.
 */
export function casBatchSql(s: string, async: boolean): string {
  const n = BATCH_COLS.length;
  const cols = BATCH_COLS.map(([c]) => c).join(', ');
  const arrays = BATCH_COLS.map(([, t], i) => `$${i + 1}::${t}[]`).join(', ');
  const sameSummary = SUMMARY_COLS.split(', ').map((c) => `s.${c} IS NOT DISTINCT FROM x.e_${c}${c === 'workflow' ? ' COLLATE "C"' : ''}`).join(' AND ');
  const okIds = `(SELECT task_id FROM ok)`;
  const setSummary = SUMMARY_COLS.split(', ').map((c) => `x.n_${c}`).join(', ');
  return `WITH x AS MATERIALIZED (SELECT * FROM unnest(${arrays}) AS x(${cols})),
s AS MATERIALIZED (SELECT s.task_id, (${sameSummary}) AS same FROM ${s}.summaries s JOIN x ON s.task_id = x.task_id COLLATE "C" ORDER BY s.task_id FOR UPDATE OF s),
l AS MATERIALIZED (SELECT l.task_id, (l.owner = x.e_owner AND l.instance = x.e_instance AND l.generation = x.e_generation) AS same FROM ${s}.leases l JOIN x ON l.task_id = x.task_id COLLATE "C" ORDER BY l.task_id FOR UPDATE OF l),
g AS MATERIALIZED (SELECT (SELECT array_agg(task_id) FROM s) AS s_all, (SELECT array_agg(task_id) FROM s WHERE same) AS s_same,
  (SELECT array_agg(task_id) FROM l) AS l_all, (SELECT array_agg(task_id) FROM l WHERE same) AS l_same, ${DB_NOW} AS now${async ? `, set_config('synchronous_commit', 'off', true)` : ''}),
ok AS MATERIALIZED (SELECT x.task_id FROM g, x WHERE
  (CASE WHEN x.ex THEN x.task_id = ANY(g.s_same) ELSE NOT x.task_id = ANY(coalesce(g.s_all, '{}')) END) AND
  (CASE WHEN x.hl THEN x.task_id = ANY(g.l_same) ELSE NOT x.task_id = ANY(coalesce(g.l_all, '{}')) END)),
e AS (INSERT INTO ${s}.events (task_id, event_id, data) SELECT * FROM unnest($${n + 1}::text[], $${n + 2}::bigint[], $${n + 3}::bytea[]) AS v(task_id, event_id, data) WHERE v.task_id IN ${okIds}),
us AS (UPDATE ${s}.summaries s SET (${SUMMARY_COLS}) = (${setSummary}),
  cancel_requested = CASE x.n_cancel WHEN 1 THEN true WHEN 2 THEN false ELSE s.cancel_requested END,
  cancel_known_through = CASE WHEN x.n_cancel <> 0 OR s.cancel_known_through = s.last_event_id THEN x.n_last_event_id ELSE s.cancel_known_through END
  FROM x WHERE s.task_id = x.task_id COLLATE "C" AND x.ex AND x.task_id IN ${okIds}),
ins AS (INSERT INTO ${s}.summaries (task_id, ${SUMMARY_COLS}, cancel_requested, cancel_known_through) SELECT x.task_id, ${setSummary}, x.n_cancel = 1, x.n_last_event_id FROM x WHERE NOT x.ex AND x.task_id IN ${okIds}),
ul AS (UPDATE ${s}.leases l SET owner = x.n_owner, instance = x.n_instance, generation = x.n_generation, expires_at = g.now + x.n_ms FROM x, g WHERE l.task_id = x.task_id COLLATE "C" AND x.wl AND x.hl AND x.task_id IN ${okIds}),
il AS (INSERT INTO ${s}.leases (task_id, owner, instance, generation, expires_at) SELECT x.task_id, x.n_owner, x.n_instance, x.n_generation, g.now + x.n_ms FROM x, g WHERE x.wl AND NOT x.hl AND x.task_id IN ${okIds}),
p AS (INSERT INTO ${s}.payloads (task_id, hash, data) SELECT * FROM unnest($${n + 4}::text[], $${n + 5}::text[], $${n + 6}::bytea[]) AS v(task_id, hash, data) WHERE v.task_id IN ${okIds} ON CONFLICT DO NOTHING)
SELECT coalesce((SELECT array_agg(task_id) FROM ok), '{}') AS ok, (SELECT now FROM g) AS now`;
}

/** The batch statement's values for `items` (distinct tasks). */
export function casBatchValues(items: readonly CasItem[]): unknown[] {
  const cols: unknown[][] = BATCH_COLS.map(() => []);
  const ev: unknown[][] = [[], [], []];
  const pl: unknown[][] = [[], [], []];
  for (const it of items) {
    const { expected, next, leaseMs } = it.plan;
    const none = Array.from({ length: 11 }, () => null);
    const row = [
      it.taskId, expected.summary !== undefined, expected.lease !== undefined, leaseMs !== undefined,
      ...(expected.summary ? summaryValues(expected) : none),
      expected.lease?.owner ?? null, expected.lease?.instance ?? null, expected.lease?.generation ?? null,
      ...summaryValues(next),
      leaseMs !== undefined ? next.lease!.owner : null, leaseMs !== undefined ? next.lease!.instance : null, leaseMs !== undefined ? next.lease!.generation : null, leaseMs ?? null,
      cancelWrite(it.events, next.summary!, expected.summary !== undefined),
    ];
    row.forEach((v, i) => cols[i]!.push(v));
    it.events.forEach((e, i) => {
      ev[0]!.push(it.taskId);
      ev[1]!.push(e.eventId);
      ev[2]!.push(asBuffer(it.bytes[i]!));
    });
    for (const [hash, data] of it.blobs) {
      pl[0]!.push(it.taskId);
      pl[1]!.push(hash);
      pl[2]!.push(asBuffer(data));
    }
  }
  return [...cols, ...ev, ...pl];
}
