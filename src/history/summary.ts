/**
 * The task summary is a projection of the history (invariant 1: derived, rebuildable).
 * Stores call `summarize` inside every append so the summary lands in the same batch.
 */
import { eventIdAfter, type HistoryEvent, type TaskSummary } from './events.js';
import type { TaskState } from './state.js';
import { decodeState } from './state-codec.js';

export function summarize(taskId: string, prev: TaskSummary | undefined, events: readonly HistoryEvent[]): TaskSummary {
  const s: TaskSummary = prev
    ? copySummary(prev)
    : { taskId, workflow: '', kind: 'one-shot', status: 'pending', lastEventId: 0, turn: 0, queued: 0, createdAt: 0, updatedAt: 0 };
  for (const e of events) {
    s.lastEventId = e.eventId;
    s.updatedAt = e.time;
    switch (e.type) {
      case 'TaskCreated':
        s.workflow = e.workflow;
        s.kind = e.kind;
        s.createdAt = e.time;
        s.status = 'pending';
        break;
      case 'InputQueued':
        s.queued++;
        s.lastInputId = e.inputId;
        if (e.deliverAt !== undefined) s.scheduled = { ...s.scheduled, [e.inputId]: e.deliverAt };
        break;
      case 'InputWithdrawn':
        s.queued = Math.max(0, s.queued - 1);
        unschedule(s, [e.inputId]);
        break;
      case 'TurnStarted':
        s.status = 'in_progress';
        // A recovery attempt re-runs inputs already taken off the queue by attempt 1.
        if (e.attempt === 1) s.queued = Math.max(0, s.queued - e.inputIds.length);
        unschedule(s, e.inputIds);
        s.turn = e.turn;
        break;
      case 'InputsTaken':
        s.queued = Math.max(0, s.queued - e.inputIds.length);
        unschedule(s, e.inputIds);
        break;
      case 'TurnCompleted':
      case 'TurnFailed':
      case 'TurnSuspended':
      case 'TurnCancelled':
      case 'TurnTimedOut':
        if (s.kind === 'multi-turn') s.status = 'suspended';
        break;
      case 'CancelRequested':
        if (e.scope === 'task' && s.status !== 'completed') s.cancelRequested = true;
        break;
      case 'TaskCompleted':
        delete s.scheduled;
        delete s.cancelRequested;
        s.status = 'completed';
        s.outcome = e.outcome;
        break;
      case 'HistoryCompacted': {
        // Stands for events 2..throughEventId: the summary continues from the state there.
        s.lastEventId = eventIdAfter(e) - 1;
        const at = stateOf(e.state);
        if (at === undefined) break; // derived data: the fold reports the bad state, not the summary
        s.status = at.status;
        s.turn = at.turn;
        s.queued = at.queue.length;
        if (at.lastInputId !== undefined) s.lastInputId = at.lastInputId;
        if (at.outcome !== undefined) s.outcome = at.outcome;
        if (at.cancelRequested?.scope === 'task' || at.openTurn?.cancelRequested?.scope === 'task') s.cancelRequested = true;
        else delete s.cancelRequested;
        // Fields the dropped events set: a rebuild from a compacted history must equal the summary
        // kept across it (test: store/postgres-lost-reply "a compacted history").
        const scheduled: Record<string, number> = {};
        for (const q of at.queue) if (q.deliverAt !== undefined) scheduled[q.inputId] = q.deliverAt;
        if (Object.keys(scheduled).length > 0) s.scheduled = scheduled;
        else delete s.scheduled;
        break;
      }
      default:
        break;
    }
  }
  return s;
}

/**
 * A copy of `prev` built as a literal, not a spread: V8 (Node 20) gives an object made by `{ ...x }`
 * a new hidden class of its own for every property added to it later, so each completed task's
 * summary had its own (~360 bytes, and every reader of summaries went megamorphic; docs/performance.md).
 */
export function copySummary(prev: TaskSummary): TaskSummary {
  const s: TaskSummary = {
    taskId: prev.taskId,
    workflow: prev.workflow,
    kind: prev.kind,
    status: prev.status,
    lastEventId: prev.lastEventId,
    turn: prev.turn,
    queued: prev.queued,
    createdAt: prev.createdAt,
    updatedAt: prev.updatedAt,
  };
  if (prev.outcome !== undefined) s.outcome = prev.outcome;
  if (prev.lastInputId !== undefined) s.lastInputId = prev.lastInputId;
  if (prev.scheduled !== undefined) s.scheduled = prev.scheduled;
  if (prev.cancelRequested !== undefined) s.cancelRequested = prev.cancelRequested;
  if (prev.corrupt !== undefined) s.corrupt = prev.corrupt;
  return s;
}

function stateOf(bytes: Uint8Array): TaskState | undefined {
  try {
    return decodeState(bytes);
  } catch {
    return undefined;
  }
}

function unschedule(s: TaskSummary, inputIds: readonly string[]): void {
  if (!s.scheduled || !inputIds.some((id) => Object.hasOwn(s.scheduled!, id))) return;
  const left = { ...s.scheduled };
  for (const id of inputIds) delete left[id];
  if (Object.keys(left).length === 0) delete s.scheduled;
  else s.scheduled = left;
}

/** The earliest deliverAt of the summary's scheduled inputs, and how many there are. */
export function scheduledWake(s: TaskSummary): { wakeAt: number; count: number } | undefined {
  if (!s.scheduled) return undefined;
  const ats = Object.values(s.scheduled);
  return ats.length === 0 ? undefined : { wakeAt: Math.min(...ats), count: ats.length };
}
