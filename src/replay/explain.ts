/**
 * Human text for a decision: what `turnlog why <task>` prints. Pure; docs/recovery.md is
 * generated from it, so the documented output is the real output.
 */
import type { TaskState } from '../history/state.js';
import type { Decision } from './decision.js';
import { formatTime } from './decide.js';

/** One line naming the action, e.g. `rerun turn 3 as attempt 2`. */
export function describeAction(d: Decision): string {
  switch (d.kind) {
    case 'none':
      return 'nothing to do';
    case 'complete-task':
      return `complete the task as ${d.outcome}`;
    case 'rerun':
      return `rerun turn ${d.turn} as attempt ${d.attempt} (entry recovered)`;
    case 'start-turn':
      return `start turn ${d.turn} (${d.entryMode}${d.steered ? ', steered' : ''}) with input ${d.inputIds.join(', ')}`;
    case 'finalize-turn': {
      const cause = d.cause === undefined ? '' : ` (cause ${d.cause})`;
      const complete = d.completeTask === undefined ? '' : `, then complete the task as ${d.completeTask}`;
      return `finalize turn ${d.turn} with ${d.terminal}${cause}${complete}`;
    }
  }
}

/**
 * The decision, its rule, the reason and the key facts of the state it was made from
 * (status, open turn and attempt, marker, deadline, queue, cancels, counters).
 *
 * @example
 * console.log(explainDecision(decide(state, lease, now), state));
 */
export function explainDecision(decision: Decision, state: TaskState): string {
  const lines: string[] = [
    `task ${state.taskId} (${state.workflow}, ${state.kind})`,
    `decision: ${describeAction(decision)}`,
    `rule:     ${decision.rule}`,
    `reason:   ${decision.reason}`,
    'facts:',
  ];
  const fact = (k: string, v: string): void => {
    lines.push(`  ${(k + ':').padEnd(14)}${v}`);
  };
  fact('status', state.outcome === undefined ? state.status : `${state.status} (${state.outcome})`);
  fact('history', `${state.lastEventId} events, generation ${state.highestGeneration}, updated ${formatTime(state.updatedAt)}`);
  const t = state.openTurn;
  if (t === undefined) {
    fact('open turn', state.turn === 0 ? 'none (no turn started yet)' : `none (last started turn ${state.turn})`);
  } else {
    const running = t.attemptRunning ? 'running' : 'ended without a terminal';
    fact('open turn', `${t.turn}, attempt ${t.attempt} ${running}, entry ${t.entryMode}, ${t.executor} executor, owner ${t.owner} (${t.instance})`);
    fact('inputs', t.inputIds.length === 0 ? 'none' : t.inputIds.join(', ') + (t.steered ? ' (steered)' : ''));
    fact('started', formatTime(t.turnStartedAt));
    fact('deadline', formatTime(t.deadline));
    fact('marker', t.marker === undefined ? 'none' : `event ${t.marker.eventId}, cancel sent ${formatTime(t.marker.at)}, grace until ${formatTime(t.marker.graceUntil)}`);
    fact('calls', `${t.calls.length} recorded${t.checkpoint === undefined ? '' : ', has checkpoint'}`);
    fact('crashes', `${t.workerCrashes} worker crash(es) this turn`);
    if (t.cancelRequested !== undefined) {
      fact('cancel', `${t.cancelRequested.scope} cancel at event ${t.cancelRequested.eventId}: ${t.cancelRequested.reason}`);
    }
  }
  if (state.cancelRequested !== undefined) {
    fact('cancel', `${state.cancelRequested.scope} cancel at event ${state.cancelRequested.eventId}: ${state.cancelRequested.reason}`);
  }
  const q = state.queue;
  fact('queue', q.length === 0 ? '0 inputs' : `${q.length} input(s): ${q.map((i) => i.inputId + (i.steering ? '*' : '') + (i.deliverAt === undefined ? '' : ` (at ${formatTime(i.deliverAt)})`)).join(', ')}`);
  if (state.lastTurn !== undefined) {
    const l = state.lastTurn;
    fact('last turn', `${l.turn} ended with ${l.terminal} at event ${l.eventId} after ${l.attempts} attempt(s)`);
  }
  fact('counters', `${state.recoveryCount} recoveries, ${state.workerCrashCount} worker crashes over the task's life`);
  return lines.join('\n');
}
