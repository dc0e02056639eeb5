/**
 * The task summary is a projection of the history (invariant 1: derived, rebuildable).
 * Stores call `summarize` inside every append so the summary lands in the same batch.
 */
import type { HistoryEvent, TaskSummary } from './events.js';
import { decodeState } from './state-codec.js';

export function summarize(taskId: string, prev: TaskSummary | undefined, events: readonly HistoryEvent[]): TaskSummary {
  const s: TaskSummary = prev
    ? { ...prev }
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
        break;
      case 'InputWithdrawn':
        s.queued = Math.max(0, s.queued - 1);
        break;
      case 'TurnStarted':
        s.status = 'in_progress';
        // A recovery attempt re-runs inputs already taken off the queue by attempt 1.
        if (e.attempt === 1) s.queued = Math.max(0, s.queued - e.inputIds.length);
        s.turn = e.turn;
        break;
      case 'InputsTaken':
        s.queued = Math.max(0, s.queued - e.inputIds.length);
        break;
      case 'TurnCompleted':
      case 'TurnFailed':
      case 'TurnSuspended':
      case 'TurnCancelled':
      case 'TurnTimedOut':
        if (s.kind === 'multi-turn') s.status = 'suspended';
        break;
      case 'TaskCompleted':
        s.status = 'completed';
        s.outcome = e.outcome;
        break;
      case 'HistoryCompacted': {
        // Stands for events 2..throughEventId: the summary continues from the state there.
        const at = decodeState(e.state);
        s.lastEventId = e.throughEventId;
        s.status = at.status;
        s.turn = at.turn;
        s.queued = at.queue.length;
        if (at.lastInputId !== undefined) s.lastInputId = at.lastInputId;
        break;
      }
      default:
        break;
    }
  }
  return s;
}
