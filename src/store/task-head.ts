/**
 * A task's head (last event id, generation floor, lease, summary) and the append and lease
 * rules every store applies to it. Pure: stores keep heads in memory and call these
 * synchronously, so validation needs no read I/O and sees appends not yet written.
 */
import { ConcurrencyError, LeaseHeldError, StaleGenerationError, invalidArgument } from '../errors.js';
import { eventIdAfter, type HistoryEvent, type Lease, type TaskSummary } from '../history/events.js';
import { nextLease, isLeaseLive, type LeaseRequest } from '../history/lease.js';
import { summarize } from '../history/summary.js';
import { checkEventIds } from '../history/well-formed.js';
import { checkTaskId } from './keys.js';
import type { AppendOptions, CorruptMark } from './history-store.js';

/** A summary as `listTasks` shows it: with the task's corrupt mark, if it has one. */
export function withMark(s: TaskSummary, mark: CorruptMark | undefined): TaskSummary {
  return mark ? { ...s, corrupt: { key: mark.key, code: mark.code, message: mark.message } } : s;
}

/** What a store must know about a task to validate a write without reading. */
export interface TaskHead {
  lastEventId: number;
  /** Highest generation in the history (events are monotonic, so the last event's). */
  maxGeneration: number;
  lease: Lease | undefined;
  summary: TaskSummary | undefined;
}

export const EMPTY_HEAD: TaskHead = Object.freeze({
  lastEventId: 0,
  maxGeneration: 0,
  lease: undefined,
  summary: undefined,
});

/** The generation a write must reach: the lease's and the history's, whichever is higher. */
export function generationFloor(head: TaskHead): number {
  return Math.max(head.maxGeneration, head.lease?.generation ?? 0);
}

/**
 * Validates an append against `head` and returns the head after it. Throws (and so writes
 * nothing) on a stale generation (checked first), a wrong expected id, gapped ids or a foreign live lease.
 */
export function applyAppend(
  taskId: string,
  head: TaskHead,
  events: readonly HistoryEvent[],
  options: AppendOptions,
  shared = false,
): TaskHead {
  checkTaskId(taskId);
  if (!Array.isArray(events) || events.length === 0) {
    throw invalidArgument(`Task ${taskId}: append needs at least one event.`);
  }
  const { expectedLastEventId, generation } = options;
  if (!Number.isInteger(generation) || generation < 0) {
    throw invalidArgument(`Task ${taskId}: generation ${String(generation)} is not a non-negative integer.`);
  }
  // Fencing first: a zombie (stale generation) must learn it lost the task, not be told to
  // re-read and retry, which would be a ConcurrencyError (test: store contract "fencing order").
  const floor = generationFloor(head);
  if (generation < floor) throw new StaleGenerationError(taskId, generation, floor);
  if (expectedLastEventId !== head.lastEventId) {
    throw new ConcurrencyError(taskId, expectedLastEventId, head.lastEventId);
  }

  let now = 0;
  let want = expectedLastEventId + 1;
  for (let i = 0; i < events.length; i++) {
    const e = events[i]!;
    if (i > 0) want = eventIdAfter(events[i - 1]!);
    if (e.eventId !== want) {
      throw invalidArgument(
        `Task ${taskId}: event ${i + 1} of the append has id ${e.eventId}, expected ${want}. Number events densely from expectedLastEventId + 1.`,
      );
    }
    if (e.generation !== generation) {
      throw invalidArgument(
        `Task ${taskId}: event ${e.eventId} carries generation ${e.generation} but the append is under generation ${generation}. Stamp every event with the append's generation.`,
      );
    }
    // An ill-formed id would be stored as another id (keys, replay matching): refuse it here.
    checkEventIds(e, taskId);
    if (e.type === 'TaskCreated' && e.workflow.includes('\0')) {
      throw invalidArgument(`Task ${taskId}: workflow name must not contain NUL.`);
    }
    if (e.time > now) now = e.time;
  }

  let lease = head.lease;
  if (options.lease) {
    // The events' time is the engine's clock: it decides whether a foreign lease is still live.
    const l = options.lease;
    const expected = nextLease(
      taskId,
      head.lease,
      { owner: l.owner, instance: l.instance, durationMs: l.expiresAt - now, now },
      floor,
      shared,
    );
    if (l.generation < expected.generation) throw new StaleGenerationError(taskId, l.generation, expected.generation);
    if (generation > l.generation) {
      throw invalidArgument(
        `Task ${taskId}: append under generation ${generation} writes a lease of generation ${l.generation}. Write the events under the lease's generation.`,
      );
    }
    lease = { owner: l.owner, instance: l.instance, generation: l.generation, expiresAt: l.expiresAt };
  }

  return {
    lastEventId: eventIdAfter(events[events.length - 1]!) - 1,
    maxGeneration: Math.max(head.maxGeneration, generation),
    lease,
    summary: summarize(taskId, head.summary, events),
  };
}

/** A claim by the acquisition table, never below the history's generation (`shared`: see nextLease). */
export function applyClaim(taskId: string, head: TaskHead, req: LeaseRequest, shared = false): Lease {
  checkTaskId(taskId);
  return nextLease(taskId, head.lease, req, Math.max(1, head.maxGeneration), shared);
}

/** Extends the caller's lease; StaleGenerationError or LeaseHeldError when it lost it. */
export function applyRenew(taskId: string, head: TaskHead, lease: Lease, durationMs: number, now: number): Lease {
  checkTaskId(taskId);
  const current = head.lease;
  const floor = generationFloor(head);
  if (lease.generation < floor) throw new StaleGenerationError(taskId, lease.generation, floor);
  if (current && (current.owner !== lease.owner || current.instance !== lease.instance)) {
    const gen = current.generation;
    if (isLeaseLive(current, now)) throw new LeaseHeldError(taskId, current.owner, current.instance, current.expiresAt);
    throw new StaleGenerationError(taskId, lease.generation, gen);
  }
  return { owner: lease.owner, instance: lease.instance, generation: lease.generation, expiresAt: now + durationMs };
}

/** The released lease (expired at `now`), or undefined when the caller no longer holds it. */
export function applyRelease(taskId: string, head: TaskHead, lease: Lease, now: number): Lease | undefined {
  checkTaskId(taskId);
  const c = head.lease;
  if (!c || c.owner !== lease.owner || c.instance !== lease.instance || c.generation !== lease.generation) {
    return undefined;
  }
  return { ...c, expiresAt: Math.min(c.expiresAt, now) };
}

/** Recoverable: in progress, and its lease is missing, expired, or (exclusive store) another instance's. */
export function isRecoverable(summary: TaskSummary, lease: Lease | undefined, now: number, instance: string): boolean {
  if (summary.status !== 'in_progress') return false;
  return !isLeaseLive(lease, now) || lease.instance !== instance;
}

/** Retention: completed, and last updated at least `olderThanMs` before `now`. */
export function isPurgeable(summary: TaskSummary, olderThanMs: number, now: number): boolean {
  return summary.status === 'completed' && now - summary.updatedAt >= olderThanMs;
}

/**
 * Whether the stored event 2 is a compaction through `throughEventId` or later: a compaction
 * computed from an older read (another engine's, racing on a shared store) must then change nothing.
 */
export function isLaterCut(stored: HistoryEvent, throughEventId: number): boolean {
  return stored.type === 'HistoryCompacted' && stored.throughEventId >= throughEventId;
}
