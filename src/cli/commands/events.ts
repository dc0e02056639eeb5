/**
 * `turnlog events <task>`: every event of a task, decoded. Human: one line per event;
 * `--json`: the events with payloads decoded ({@link eventToDisplayJSON}).
 */
import type { Command } from 'commander';
import type { ReadOptions } from '../../store/history-store.js';
import { errorJSON, positiveInt, printText, printedError, readableEvents, requireTask, withStore, writeOut } from '../context.js';
import { describeEvent, eventToDisplayJSON, isoTime } from '../format.js';

interface EventsFlags {
  from?: number;
  limit?: number;
  width: number;
  full?: boolean;
}

/** Registers `events` on the program. */
export function registerEvents(program: Command): void {
  program
    .command('events')
    .description('print every event of a task, decoded')
    .argument('<task>', 'task id')
    .option('--from <eventId>', 'first event id to print', positiveInt)
    .option('--limit <n>', 'print at most n events', positiveInt)
    .option('--width <n>', 'truncate payload previews to n characters', positiveInt, 120)
    .option('--full', 'do not truncate payload previews')
    .action(async (taskId: string, flags: EventsFlags, cmd: Command) => {
      await withStore(cmd, {}, async (store, g) => {
        const summary = await requireTask(store, taskId);
        const read: ReadOptions = {};
        if (flags.from !== undefined) read.fromEventId = flags.from;
        if (flags.limit !== undefined) read.limit = flags.limit;
        const max = flags.full ? 0 : flags.width;
        // Streamed: a long history is never held whole, in either output mode.
        if (g.json) {
          await writeOut(`{\n  "taskId": ${JSON.stringify(taskId)},\n  "lastEventId": ${summary.lastEventId},\n  "events": [`);
          let n = 0;
          try {
            for await (const e of readableEvents(store, taskId, read)) {
              await writeOut((n++ === 0 ? '\n    ' : ',\n    ') + JSON.stringify(eventToDisplayJSON(g.decodeEvent(e), g.pipeline.converter)));
            }
          } catch (err) {
            // The array is open: close it and put the error in the same document (one per run).
            const e = printedError(err);
            await writeOut(`${n === 0 ? '' : '\n  '}],\n  "error": ${JSON.stringify(errorJSON(e), null, 2).replaceAll('\n', '\n  ')}\n}\n`);
            throw e;
          }
          return writeOut(n === 0 ? ']\n}\n' : '\n  ]\n}\n');
        }
        const width = String(summary.lastEventId).length;
        for await (const stored of readableEvents(store, taskId, read)) {
          const e = g.decodeEvent(stored);
          await writeOut(
            `${String(e.eventId).padStart(width)}  ${isoTime(e.time)}  g${e.generation}  ${e.type.padEnd(22)} ${describeEvent(e, max, g.pipeline.converter)}\n`,
          );
        }
        return printText(`(${summary.lastEventId} events in task ${taskId})`);
      });
    });
}
