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
import { duration, isoTime, offset, payloadPreview, payloadToJSON, table, terminalWord } from '../format.js';
import { buildTimeline, type TurnView } from '../../timeline/build.js';
import { lineage, lineageLines } from '../../timeline/lineage.js';
import { statusText } from './list.js';

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
            lineage: lineage(events),
          });
          // The document holds the error (`corrupt`); exit 1 without a second document.
          if (failure !== undefined) throw printedError(failure);
          return;
        }
        const start = summary.createdAt;
        const parts = [[header(summary, corrupt, failure !== undefined), ...lineageLines(lineage(events))].join('\n')];
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
