/**
 * The claim of due work for stores that keep a status index of summaries (Level, memory): walks
 * in-progress, pending, suspended and (with a retention) completed tasks a page at a time and
 * hands out those that need a decision. Pure over `readPage`, so both stores share the rules.
 */
import { invalidArgument } from '../errors.js';
import type { Lease, TaskStatus, TaskSummary } from '../history/events.js';
import type { ClaimRequest, DueBatch, DueReason } from './history-store.js';
import { scheduledWake } from '../history/summary.js';
import { isPurgeable, isRecoverable } from './task-head.js';

/** One task of a status page; `summary` undefined with `unreadable` when its records cannot be decoded. */
export interface IndexEntry {
  taskId: string;
  summary?: TaskSummary | undefined;
  lease?: Lease | undefined;
  /** The summary or the lease cannot be read: handed out so the engine isolates the task. */
  unreadable?: boolean;
  /** Marked corrupt: never deleted by retention. */
  marked?: boolean;
}

export interface IndexPage {
  entries: IndexEntry[];
  /** Position after the last entry; absent on the last page. */
  next?: string;
}

/** Reads up to `limit` tasks of one status after `cursor` (a store-specific position). */
export type ReadIndexPage = (status: TaskStatus, cursor: string | undefined, limit: number) => Promise<IndexPage>;

const PHASES: readonly (readonly [TaskStatus, DueReason])[] = [
  ['in_progress', 'in-progress'],
  ['pending', 'pending'],
  ['suspended', 'queued'],
  ['completed', 'retention'],
];

export function checkClaim(request: ClaimRequest): void {
  if (!Number.isInteger(request.limit) || request.limit < 1) {
    throw invalidArgument(`claimDueWork limit ${String(request.limit)} must be a positive integer.`);
  }
  if (request.claimMs !== undefined && (!Number.isInteger(request.claimMs) || request.claimMs < 1)) {
    throw invalidArgument(`claimDueWork claimMs ${String(request.claimMs)} must be a positive integer (ms).`);
  }
}

/** Why `e` is due in `phase`, or undefined when it is not. */
function dueReason(e: IndexEntry, reason: DueReason, request: ClaimRequest): DueReason | undefined {
  if (e.unreadable) return reason === 'retention' ? undefined : 'in-progress';
  const s = e.summary;
  if (!s) return undefined;
  switch (reason) {
    case 'in-progress':
      return isRecoverable(s, e.lease, request.now, request.instance) ? reason : undefined;
    case 'pending':
    case 'queued': {
      // A pending task cancel (summary.cancelRequested) is due whatever the queue holds: rule 2
      // completes the task (test: runtime/stuck-cancel).
      if (s.cancelRequested) return reason;
      // Scheduled inputs count once due, or due within the horizon (the engine arms their wake-up).
      const wake = scheduledWake(s);
      if (!wake) return reason === 'pending' || s.queued > 0 ? reason : undefined;
      return s.queued > wake.count || wake.wakeAt <= request.now + (request.horizonMs ?? 0) ? reason : undefined;
    }
    case 'retention':
      return !e.marked && request.retentionMs !== undefined && isPurgeable(s, request.retentionMs, request.now) ? reason : undefined;
  }
}

/** Cursor: `<phase>.<store position>` (the position may be empty: the phase's start). */
function parseCursor(cursor: string | undefined): [number, string | undefined] {
  if (cursor === undefined) return [0, undefined];
  const dot = cursor.indexOf('.');
  const phase = Number(cursor.slice(0, dot));
  if (dot < 1 || !Number.isInteger(phase) || phase < 0 || phase >= PHASES.length) {
    throw invalidArgument(`claimDueWork cursor ${cursor} is not one this store returned. Pass the \`next\` of the previous batch, or none to start over.`);
  }
  const rest = cursor.slice(dot + 1);
  return [phase, rest === '' ? undefined : rest];
}

export async function claimFromIndex(request: ClaimRequest, readPage: ReadIndexPage): Promise<DueBatch> {
  checkClaim(request);
  let [phase, position] = parseCursor(request.cursor);
  const phases = request.retentionMs === undefined ? PHASES.length - 1 : PHASES.length;
  const batch: DueBatch = { tasks: [] };
  while (phase < phases) {
    const room = request.limit - batch.tasks.length;
    if (room === 0) {
      batch.next = `${phase}.${position ?? ''}`;
      return batch;
    }
    const [status, reason] = PHASES[phase]!;
    if (request.reasons !== undefined && !request.reasons.includes(reason)) {
      phase++;
      position = undefined;
      continue;
    }
    const page = await readPage(status, position, room);
    for (const e of page.entries) {
      const why = dueReason(e, reason, request);
      if (why) batch.tasks.push({ taskId: e.taskId, reason: why });
    }
    if (page.next === undefined) {
      phase++;
      position = undefined;
    } else {
      position = page.next;
    }
  }
  return batch;
}
