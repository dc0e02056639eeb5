/**
 * The timeline model of one task, built from its events: turns, attempts, steps with durations,
 * markers, kills, crashes, outcomes, and the recovery decisions with their rules. Pure, no I/O;
 * `turnlog show` renders it as text or JSON and `turnlog ui` as a page.
 */
import type { HistoryEvent, Lease, TaskSummary } from '../history/events.js';
import { isTurnTerminal } from '../history/events.js';
import { decide, explainDecision, fold } from '../replay/index.js';
import type { Decision } from '../replay/index.js';
import type { PayloadConverter } from '../history/payload.js';
import { lineage, type LineageView } from './lineage.js';
import { describeEvent, eventToDisplayJSON, failureText, payloadToJSON, type PayloadJSON } from './format.js';

/** One attempt of a turn in `show --json`. */
export interface AttemptView {
  attempt: number;
  entryMode: string;
  eventId: number;
  time: number;
  executor: string;
  pid: number;
  instance: string;
  /** How the attempt ended without a terminal: `exited-for-recovery` or `worker-crashed`. */
  ended: { kind: 'exited-for-recovery' | 'worker-crashed'; eventId: number; detail: string } | null;
}

/** One step of a turn in `show --json`. */
export interface StepView {
  seq: number;
  name: string;
  attempt: number;
  eventId: number;
  durationMs: number;
  ok: boolean;
  result: PayloadJSON | null;
  error: string | null;
}

/** One `ctx.waitFor` of a turn in `show --json`: what it waited for and how it ended. */
export interface WaitView {
  seq: number;
  name: string;
  eventId: number;
  time: number;
  /** When it times out; null: no timeout. */
  deadline: number | null;
  /** Null while it waits. `value`: the signal's, null after a timeout. */
  ended: { eventId: number; time: number; timedOut: boolean; signalId: string; value: PayloadJSON | null } | null;
}

/** One turn in `show --json`. */
export interface TurnView {
  turn: number;
  inputIds: string[];
  steered: boolean;
  startedAt: number;
  deadline: number;
  attempts: AttemptView[];
  steps: StepView[];
  waits: WaitView[];
  checkpoints: number;
  markerEventId: number | null;
  kills: number;
  crashes: number;
  /** The terminal event; null while the turn is open. */
  outcome: { type: string; eventId: number; time: number; durationMs: number; detail: string } | null;
}

/** One line of the timeline in `show --json`. */
export interface TimelineEntry {
  eventId: number;
  time: number;
  type: HistoryEvent['type'];
  turn: number | null;
  text: string;
}

/** Builds the turns and the timeline from a history (pure). */
export function buildTimeline(events: readonly HistoryEvent[], max: number, converter?: PayloadConverter): { turns: TurnView[]; timeline: TimelineEntry[] } {
  const turns = new Map<number, TurnView>();
  const timeline: TimelineEntry[] = [];
  let open: TurnView | undefined;
  const signals = new Map<string, PayloadJSON>();
  for (const e of events) {
    let inTurn: number | null = open?.turn ?? null;
    switch (e.type) {
      case 'TurnStarted': {
        let t = turns.get(e.turn);
        if (!t) {
          t = {
            turn: e.turn,
            inputIds: e.inputIds,
            steered: e.steered,
            startedAt: e.turnStartedAt,
            deadline: e.deadline,
            attempts: [],
            steps: [],
            waits: [],
            checkpoints: 0,
            markerEventId: null,
            kills: 0,
            crashes: 0,
            outcome: null,
          };
          turns.set(e.turn, t);
        }
        t.attempts.push({ attempt: e.attempt, entryMode: e.entryMode, eventId: e.eventId, time: e.time, executor: e.executor, pid: e.pid, instance: e.instance, ended: null });
        open = t;
        inTurn = e.turn;
        break;
      }
      case 'StepCompleted':
        turns.get(e.turn)?.steps.push({
          seq: e.seq,
          name: e.name,
          attempt: e.attempt,
          eventId: e.eventId,
          durationMs: e.durationMs,
          ok: e.failure === undefined,
          result: e.result ? payloadToJSON(e.result, converter) : null,
          error: e.failure ? failureText(e.failure, 0) : null,
        });
        break;
      case 'Checkpointed':
        if (turns.get(e.turn)) turns.get(e.turn)!.checkpoints++;
        break;
      case 'SignalReceived':
        signals.set(e.signalId, payloadToJSON(e.value, converter));
        break;
      case 'WaitStarted':
        turns.get(e.turn)?.waits.push({ seq: e.seq, name: e.name, eventId: e.eventId, time: e.time, deadline: e.deadline ?? null, ended: null });
        break;
      case 'WaitEnded': {
        const w = turns.get(e.turn)?.waits.find((x) => x.seq === e.seq);
        if (w) w.ended = { eventId: e.eventId, time: e.time, timedOut: e.timedOut, signalId: e.signalId, value: e.timedOut ? null : (signals.get(e.signalId) ?? null) };
        break;
      }
      case 'TimeoutCancelRequested':
        if (turns.get(e.turn)) turns.get(e.turn)!.markerEventId = e.eventId;
        break;
      case 'WorkerKilled':
        if (turns.get(e.turn)) turns.get(e.turn)!.kills++;
        break;
      case 'WorkerCrashed':
      case 'TurnExitedForRecovery': {
        const t = turns.get(e.turn);
        if (!t) break;
        if (e.type === 'WorkerCrashed') t.crashes++;
        const a = t.attempts.find((x) => x.attempt === e.attempt);
        if (a) {
          a.ended = e.type === 'WorkerCrashed'
            ? { kind: 'worker-crashed', eventId: e.eventId, detail: e.message }
            : { kind: 'exited-for-recovery', eventId: e.eventId, detail: e.reason };
        }
        break;
      }
      default:
        if (isTurnTerminal(e)) {
          const t = turns.get(e.turn);
          if (t) {
            const detail =
              e.type === 'TurnFailed' ? failureText(e.failure, 0)
              : e.type === 'TurnSuspended' || e.type === 'TurnCancelled' ? e.reason
              : e.type === 'TurnTimedOut' ? e.cause
              : '';
            t.outcome = { type: e.type, eventId: e.eventId, time: e.time, durationMs: e.time - t.startedAt, detail };
          }
          open = undefined;
        }
    }
    timeline.push({ eventId: e.eventId, time: e.time, type: e.type, turn: inTurn, text: describeEvent(e, max, converter) });
  }
  return { turns: [...turns.values()], timeline };
}

/** One recovery the history records, and the replayer rule that made it. */
export interface RecoveryView {
  /** The event the recovering engine appended (a `recovered` TurnStarted, or a terminal). */
  eventId: number;
  turn: number;
  rule: Decision['rule'];
  reason: string;
}

/** Whether an event was appended by recovery rather than by the turn's own attempt. */
function isRecoveryEvent(e: HistoryEvent): boolean {
  if (e.type === 'TurnStarted') return e.entryMode === 'recovered';
  if (e.type === 'TurnTimedOut') return e.cause === 'recovery_marker' || e.cause === 'recovery_backstop';
  if (e.type === 'TurnFailed') return e.failure.type === 'WorkerCrashed' || e.failure.type === 'RecoveriesExhausted';
  return false;
}

/**
 * The recovery decisions a history records: for each event recovery appended, the replayer's
 * decision on the history before it at that event's time (no lease: recovery runs on a void
 * or expired one). The rule is recomputed, so it is the rule of this version of the replayer.
 */
export function recoveries(taskId: string, events: readonly HistoryEvent[]): RecoveryView[] {
  const out: RecoveryView[] = [];
  events.forEach((e, i) => {
    if (!isRecoveryEvent(e) || !('turn' in e)) return;
    let decision: Decision;
    try {
      decision = decide(fold(taskId, events.slice(0, i)), undefined, e.time);
    } catch {
      return; // an unreadable prefix has no decision to show; `show` reports the corruption
    }
    out.push({ eventId: e.eventId, turn: e.turn, rule: decision.rule, reason: decision.reason });
  });
  return out;
}

/** Everything the timeline page shows for one task (`/api/tasks/:id`). */
export interface TaskTimeline {
  task: TaskSummary;
  turns: TurnView[];
  timeline: TimelineEntry[];
  recoveries: RecoveryView[];
  /** Every event as plain JSON with its payloads decoded, by position (`turnlog events --json`). */
  events: Record<string, unknown>[];
  queued: { inputId: string; eventId: number; time: number; steering: boolean; input: PayloadJSON }[];
  /** What an engine would do now, with the rule (`turnlog why`); null when the history cannot be folded. */
  decision: { decision: Decision; explanation: string } | null;
  /** The task's parent and children (docs/children.md). */
  lineage: LineageView;
}

/**
 * Builds the page model of a task. `lease` is the one a decision may consider (none for an
 * exclusive store the reader holds); `now` is the clock the decision uses.
 */
export function taskTimeline(task: TaskSummary, events: readonly HistoryEvent[], lease: Lease | undefined, now: number, max = 0, converter?: PayloadConverter): TaskTimeline {
  const { turns, timeline } = buildTimeline(events, max, converter);
  let queued: TaskTimeline['queued'] = [];
  let decision: TaskTimeline['decision'] = null;
  try {
    const state = fold(task.taskId, events);
    queued = state.queue.map((q) => ({ inputId: q.inputId, eventId: q.eventId, time: q.time, steering: q.steering, input: payloadToJSON(q.input, converter) }));
    const d = decide(state, lease, now);
    decision = { decision: d, explanation: explainDecision(d, state) };
  } catch {
    // A history that cannot be folded still has its timeline; the page says why via task.corrupt.
  }
  return { task, turns, timeline, recoveries: recoveries(task.taskId, events), events: events.map((e) => eventToDisplayJSON(e, converter)), queued, decision, lineage: lineage(events) };
}
