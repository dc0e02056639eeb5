/**
 * `turnlog show <task>`: a readable timeline. A turns table (attempts, steps, durations,
 * outcome), the inputs still queued, then every event indented under its turn.
 */
import type { Command } from 'commander';
import type { HistoryEvent, TaskSummary } from '../../history/events.js';
import { isTurnTerminal } from '../../history/events.js';
import { HistoryCorruptError, isHistoryUnreadable } from '../../errors.js';
import { fold } from '../../replay/index.js';
import { positiveInt, printJSON, printText, printedError, readableEvents, requireTask, withStore } from '../context.js';
import type { PayloadConverter } from '../../history/payload.js';
import { describeEvent, duration, failureText, isoTime, offset, payloadPreview, payloadToJSON, table, terminalWord, type PayloadJSON } from '../format.js';
import { statusText } from './list.js';

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

/** One turn in `show --json`. */
export interface TurnView {
  turn: number;
  inputIds: string[];
  steered: boolean;
  startedAt: number;
  deadline: number;
  attempts: AttemptView[];
  steps: StepView[];
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

function outcomeText(t: TurnView): string {
  if (!t.outcome) return 'open';
  const word = terminalWord(t.outcome.type);
  const extra = [t.markerEventId !== null && 'marker', t.kills > 0 && 'killed'].filter(Boolean).join(', ');
  const detail = t.outcome.detail ? `: ${t.outcome.detail}` : '';
  return `${word}${detail}${extra ? ` [${extra}]` : ''}`;
}

/** Why a task cannot be read: the record and the error (`show --json` field `corrupt`). */
export interface CorruptView {
  key: string;
  code: string;
  message: string;
}

function corruptView(taskId: string, err: unknown): CorruptView {
  const e = err as Error & { code: string; key?: string; eventId?: number };
  return { key: err instanceof HistoryCorruptError ? err.key : `events/${taskId}/${e.eventId ?? '?'}`, code: e.code, message: e.message };
}

function header(s: TaskSummary, corrupt: CorruptView | undefined, partial: boolean): string {
  return [
    `task      ${s.taskId}`,
    `workflow  ${s.workflow} (${s.kind})`,
    `status    ${statusText(s)}`,
    ...(corrupt ? [`CORRUPT   ${corrupt.key} cannot be read (${corrupt.code}); ${partial ? 'shown: the events before it' : 'the engine isolated this task'}`] : []),
    `turns     ${s.turn}, ${s.queued} input(s) queued, ${s.lastEventId} events`,
    `created   ${isoTime(s.createdAt)}`,
    `updated   ${isoTime(s.updatedAt)} (${duration(s.updatedAt - s.createdAt)} after creation)`,
  ].join('\n');
}

interface ShowFlags {
  width: number;
  full?: boolean;
}

/** Registers `show` on the program. */
export function registerShow(program: Command): void {
  program
    .command('show')
    .description('a readable timeline of a task: turns, attempts, steps, markers, kills, crashes, outcomes')
    .argument('<task>', 'task id')
    .option('--width <n>', 'truncate payload previews to n characters', positiveInt, 60)
    .option('--full', 'do not truncate payload previews')
    .action(async (taskId: string, flags: ShowFlags, cmd: Command) => {
      await withStore(cmd, {}, async (store, g) => {
        const summary = await requireTask(store, taskId);
        // A corrupt task: show every event before the unreadable one, then exit 1 (docs/cli.md).
        const events: HistoryEvent[] = [];
        let failure: unknown;
        try {
          for await (const e of readableEvents(store, taskId)) events.push(g.decodeEvent(e));
        } catch (err) {
          if (!isHistoryUnreadable(err)) throw err;
          failure = err;
        }
        let queue: ReturnType<typeof fold>['queue'] = [];
        try {
          queue = fold(taskId, events).queue;
        } catch (err) {
          if (!isHistoryUnreadable(err)) throw err;
          failure ??= err;
        }
        const mark = (await store.listCorrupt()).find((m) => m.taskId === taskId);
        const corrupt: CorruptView | undefined = failure ? corruptView(taskId, failure) : mark && { key: mark.key, code: mark.code, message: mark.message };
        const max = flags.full ? 0 : flags.width;
        const { turns, timeline } = buildTimeline(events, max, g.pipeline.converter);
        if (g.json) {
          await printJSON({
            task: summary,
            corrupt: corrupt ?? null,
            turns,
            queued: queue.map((q) => ({ inputId: q.inputId, eventId: q.eventId, time: q.time, steering: q.steering, input: payloadToJSON(q.input, g.pipeline.converter) })),
            timeline,
          });
          // The document holds the error (`corrupt`); exit 1 without a second document.
          if (failure !== undefined) throw printedError(failure);
          return;
        }
        const start = summary.createdAt;
        const parts = [header(summary, corrupt, failure !== undefined)];
        if (turns.length > 0) {
          const rows = turns.map((t) => [
            String(t.turn),
            String(t.attempts.length),
            t.inputIds.join(',') + (t.steered ? ' (steered)' : ''),
            offset(t.startedAt, start),
            t.outcome ? duration(t.outcome.durationMs) : '-',
            `${t.steps.length}${t.steps.some((s) => !s.ok) ? ` (${t.steps.filter((s) => !s.ok).length} failed)` : ''}`,
            outcomeText(t),
          ]);
          parts.push(table(['TURN', 'ATTEMPTS', 'INPUT', 'STARTED', 'DURATION', 'STEPS', 'OUTCOME'], rows));
        }
        if (queue.length > 0) {
          parts.push(
            `queued inputs (${queue.length})\n` +
              queue.map((q) => `  ${q.inputId}${q.steering ? ' (steering)' : ''}  ${offset(q.time, start)}  ${payloadPreview(q.input, max, g.pipeline.converter)}`).join('\n'),
          );
        }
        const idw = String(summary.lastEventId).length;
        const lines = timeline.map((t) => {
          const indent = t.turn === null ? '' : t.type === 'TurnStarted' || isTurnTerminal(t) ? '  ' : '    ';
          return `${String(t.eventId).padStart(idw)}  ${offset(t.time, start).padEnd(9)} ${indent}${t.text}`;
        });
        parts.push(`timeline (times from creation at ${isoTime(start)})\n${lines.join('\n')}`);
        await printText(parts.join('\n\n'));
        // Text mode: the error goes to stderr as usual, after the readable part.
        if (failure !== undefined) throw failure;
      });
    });
}
