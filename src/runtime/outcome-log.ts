/**
 * Which log line each appended turn or attempt outcome deserves. Pure: the engine calls it with
 * every batch it appended, so each outcome is logged exactly once, whichever path wrote it
 * (handler outcome, hard cap, killed worker, recovery's finalize). Success is not logged.
 */
import type { HistoryEvent } from '../history/events.js';
import type { TaskState } from '../history/state.js';

export interface OutcomeLogLine {
  level: 'info' | 'warn' | 'error';
  message: string;
  fields: { taskId: string; workflow: string | undefined; turn: number; attempt: number; code: string } & Record<string, unknown>;
}

/** The event types {@link outcomeLogLines} logs (the cases of its switch). */
const LOGGED: ReadonlySet<HistoryEvent['type']> = new Set(['TurnFailed', 'TurnTimedOut', 'TurnCancelled', 'WorkerCrashed', 'TurnExitedForRecovery']);
/** What most appends get: shared, so an append with nothing to log allocates nothing here. */
const NO_LINES: readonly OutcomeLogLine[] = Object.freeze([]);

function hasLogged(events: readonly HistoryEvent[]): boolean {
  for (let i = 0; i < events.length; i++) if (LOGGED.has(events[i]!.type)) return true;
  return false;
}

/**
 * Log lines for the outcomes in `events`, appended to a task whose state was `before`.
 * Failed turns (including `NonDeterminismError` and exhausted recoveries) are errors; timeouts
 * and worker crashes warnings; a cancel is the caller's own act, so info.
 */
export function outcomeLogLines(taskId: string, before: TaskState | undefined, events: readonly HistoryEvent[]): readonly OutcomeLogLine[] {
  // Most batches (every start, step and success) have no outcome to log: nothing is built for them.
  if (!hasLogged(events)) return NO_LINES;
  const lines: OutcomeLogLine[] = [];
  const workflow = before?.workflow;
  const attempt = before?.openTurn?.attempt ?? 0;
  // A kill is logged with the terminal it leads to (same batch), not as a second line.
  const killed = events.find((e) => e.type === 'WorkerKilled');
  const kill = killed?.type === 'WorkerKilled' ? { pid: killed.pid, signal: killed.signal } : {};
  for (const e of events) {
    if (!LOGGED.has(e.type)) continue;
    const base = { taskId, workflow, turn: 'turn' in e ? e.turn : 0, attempt };
    switch (e.type) {
      case 'TurnFailed':
        lines.push({
          level: 'error',
          message: 'turn failed',
          fields: { ...base, code: e.failure.code ?? 'TURNLOG_TURN_FAILED', errorType: e.failure.type, error: e.failure.message },
        });
        break;
      case 'TurnTimedOut':
        lines.push({ level: 'warn', message: 'turn timed out', fields: { ...base, code: 'TURNLOG_TURN_TIMED_OUT', cause: e.cause, ...kill } });
        break;
      case 'TurnCancelled':
        lines.push({ level: 'info', message: 'turn cancelled', fields: { ...base, code: 'TURNLOG_TURN_CANCELLED', reason: e.reason, ...kill } });
        break;
      case 'WorkerCrashed':
        lines.push({
          level: 'warn',
          message: 'worker crashed; the turn will be re-run or failed by recovery',
          fields: { ...base, attempt: e.attempt, code: 'TURNLOG_WORKER_CRASHED', pid: e.pid, exitCode: e.exitCode, signal: e.signal, error: e.message },
        });
        break;
      case 'TurnExitedForRecovery':
        lines.push({ level: 'info', message: 'turn exited for recovery', fields: { ...base, attempt: e.attempt, code: 'TURNLOG_TURN_DEFERRED', reason: e.reason } });
        break;
      default:
        break;
    }
  }
  return lines;
}
