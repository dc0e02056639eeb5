/**
 * What the PostgreSQL store's append paths share (postgres-appender.ts, postgres-batch.ts,
 * postgres-lost-reply.ts): an append as it waits for its write, which appends are routine notices,
 * prepared statements and pg's query config for them, the summary upsert. No pool, no queries.
 */
import type { HistoryEvent } from '../history/events.js';
import type { AppendOptions, AppendResult } from './history-store.js';

/** A `pg` client's prepared-statement form of query (a `name` is parsed once per connection). */
export interface PreparingClient {
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

/**
 * Events only the running turn's own engine acts on (recorded steps, checkpoints): an append of
 * nothing else is a routine notice, which may wait ten intervals for company (postgres-notifier.ts).
 */
const ROUTINE_EVENTS: ReadonlySet<HistoryEvent['type']> = new Set(['StepCompleted', 'Checkpointed']);

export function routine(events: readonly HistoryEvent[]): boolean {
  for (const e of events) if (!ROUTINE_EVENTS.has(e.type)) return false;
  return true;
}

/** An append to write: its task, events and options, and the latest event time. */
export interface AppendRequest {
  taskId: string;
  events: readonly HistoryEvent[];
  options: AppendOptions;
  /** The latest event time: the caller's clock, rebased onto the database's for leases. */
  callerNow: number;
}

/** An append waiting for its batch. */
export interface PendingAppend extends AppendRequest {
  resolve(r: AppendResult): void;
  reject(err: unknown): void;
}

export const SUMMARY_UPSERT = ` ON CONFLICT (task_id) DO UPDATE SET workflow = EXCLUDED.workflow, kind = EXCLUDED.kind,
  status = EXCLUDED.status, outcome = EXCLUDED.outcome, last_event_id = EXCLUDED.last_event_id,
  max_generation = EXCLUDED.max_generation, turn = EXCLUDED.turn, queued = EXCLUDED.queued,
  last_input_id = EXCLUDED.last_input_id, created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at,
  cancel_requested = CASE WHEN EXCLUDED.cancel_known_through IS NULL THEN summaries.cancel_requested ELSE EXCLUDED.cancel_requested END,
  cancel_known_through = CASE WHEN EXCLUDED.cancel_known_through IS NOT NULL THEN EXCLUDED.cancel_known_through
    WHEN summaries.cancel_known_through = summaries.last_event_id THEN EXCLUDED.last_event_id ELSE summaries.cancel_known_through END`;
