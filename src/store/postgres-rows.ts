/**
 * The pure pieces of the PostgreSQL store (postgres-store.ts): rows as summaries and leases, lease
 * times between the caller's and the database's clock, SQL literals, which errors are a lost
 * connection, and loading the optional `pg` package. No pool, no queries.
 */
import { HistoryCorruptError, TurnlogError } from '../errors.js';
import type { Lease, TaskOutcome, TaskStatus, TaskSummary, WorkflowKind } from '../history/events.js';
import type { TaskHead } from './task-head.js';

const KINDS: readonly WorkflowKind[] = ['one-shot', 'multi-turn'];
const STATUSES: readonly TaskStatus[] = ['pending', 'in_progress', 'suspended', 'completed'];
const OUTCOMES: readonly TaskOutcome[] = ['succeeded', 'failed', 'cancelled', 'timed_out'];

// The database clock in ms, as bigint so comparisons with leases.expires_at can use its index.
export const DB_NOW = `floor(extract(epoch from clock_timestamp()) * 1000)::bigint`;

export const LEASE_UPSERT = ` ON CONFLICT (task_id) DO UPDATE SET owner = EXCLUDED.owner, instance = EXCLUDED.instance,
  generation = EXCLUDED.generation, expires_at = EXCLUDED.expires_at`;

/** A summaries row as row_to_json gives it (bigints as JSON numbers). */
export interface SummaryRow {
  task_id: string;
  workflow: string;
  kind: string;
  status: string;
  outcome: string | null;
  last_event_id: number;
  max_generation: number;
  turn: number;
  queued: number;
  last_input_id: string | null;
  created_at: number;
  updated_at: number;
  /** Migration 7: trusted only when cancel_known_through equals last_event_id. */
  cancel_requested?: boolean;
  cancel_known_through?: number | null;
}

export interface LeaseRow {
  owner: string;
  instance: string;
  generation: number | string;
  expires_at: number | string;
}

/**
 * Moves lease times between the caller's clock (the `now` it passed, or its events' time) and
 * the database's: a stored lease keeps its remaining time on the database clock, so the pure
 * rules of task-head.ts decide liveness as the database sees it.
 */
export class ClockFrame {
  constructor(
    readonly dbNow: number,
    readonly callerNow: number,
  ) {}

  headToCaller(head: TaskHead): TaskHead {
    if (!head.lease) return head;
    return { ...head, lease: { ...head.lease, expiresAt: head.lease.expiresAt - this.dbNow + this.callerNow } };
  }

  leaseToDb(l: Lease): Lease {
    return { owner: l.owner, instance: l.instance, generation: l.generation, expiresAt: l.expiresAt - this.callerNow + this.dbNow };
  }
}

/**
 * A SQL string literal, as node-postgres's escapeLiteral builds it: quotes doubled, and an
 * E'' literal with doubled backslashes when there are any (correct whatever
 * standard_conforming_strings is). Task ids never hold NUL (checkTaskId).
 */
export function quoteLiteral(value: string): string {
  const body = value.replace(/'/g, "''");
  return body.includes('\\') ? ` E'${body.replace(/\\/g, '\\\\')}'` : `'${body}'`;
}

export const CONNECTION_TRIES = 5;
const guarded = new WeakSet<object>();
const ignoreError = (): void => undefined;

/**
 * A checked-out client's connection error rejects its query; unheard, it would crash the process.
 * Once per client, also behind a pool that wraps each checkout anew (test: store/postgres-rows).
 */
export function guard(client: object): void {
  if (guarded.has(client)) return;
  guarded.add(client);
  const c = client as { on?(e: string, f: () => void): void; listeners?(e: string): unknown[] };
  if (c.listeners?.('error').includes(ignoreError) !== true) c.on?.('error', ignoreError);
}

/** The server or the network dropped the connection (restart, pg_terminate_backend, reset). */
export function isConnectionLoss(err: unknown): boolean {
  const code = String((err as { code?: unknown })?.code ?? '');
  if (code === 'TURNLOG_STORE_UNAVAILABLE') return true;
  if (/^(57P0[123]|08\d{3}|ECONNRESET|ECONNREFUSED|EPIPE|ETIMEDOUT)$/.test(code)) return true;
  return /Connection terminated|connection error|Client was closed|timeout exceeded when trying to connect/i.test(String((err as Error)?.message ?? ''));
}

/** A Buffer view of encoded bytes, without a copy. */
export function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

export function toSummary(r: SummaryRow): TaskSummary {
  const kind = r.kind as WorkflowKind;
  const status = r.status as TaskStatus;
  if (!KINDS.includes(kind) || !STATUSES.includes(status)) {
    throw new HistoryCorruptError(`summaries(${JSON.stringify(r.task_id)})`, `kind ${r.kind}, status ${r.status}`);
  }
  const s: TaskSummary = {
    taskId: r.task_id,
    workflow: r.workflow,
    kind,
    status,
    lastEventId: Number(r.last_event_id),
    turn: Number(r.turn),
    queued: Number(r.queued),
    createdAt: Number(r.created_at),
    updatedAt: Number(r.updated_at),
  };
  if (r.outcome !== null && OUTCOMES.includes(r.outcome as TaskOutcome)) s.outcome = r.outcome as TaskOutcome;
  if (r.last_input_id !== null) s.lastInputId = r.last_input_id;
  if (r.cancel_requested === true) s.cancelRequested = true;
  return s;
}

export function toLease(r: LeaseRow): Lease {
  return { owner: r.owner, instance: r.instance, generation: Number(r.generation), expiresAt: Number(r.expires_at) };
}

/** The connection string without its password, for messages. */
export function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return 'postgres';
  }
}

/** Loads `pg` on first use; a clear error when the optional peer dependency is missing. */
export async function loadPg(): Promise<{ Pool: new (config: Record<string, unknown>) => unknown }> {
  const name = 'pg';
  try {
    const mod = (await import(name)) as { default?: unknown; Pool?: unknown };
    return (mod.default ?? mod) as { Pool: new (config: Record<string, unknown>) => unknown };
  } catch (err) {
    throw new TurnlogError(
      'TURNLOG_DRIVER_MISSING',
      'The PostgreSQL store needs the `pg` package, which is not installed. Run `npm install pg` in your application.',
      { cause: err },
    );
  }
}

/**
 * A lost connection (restart, dropped session, refused connect) as `TURNLOG_STORE_UNAVAILABLE`
 * naming the store and what failed; any other error unchanged. Retryable: nothing was written.
 */
export function unavailable(err: unknown, location: string, what: string): unknown {
  if (!isConnectionLoss(err) || (err as { code?: unknown }).code === 'TURNLOG_STORE_UNAVAILABLE') return err;
  return new TurnlogError(
    'TURNLOG_STORE_UNAVAILABLE',
    `Store ${location}: ${what} lost its connection to PostgreSQL (${(err as Error).message}). Retry once PostgreSQL is reachable.`,
    { cause: err },
  );
}
