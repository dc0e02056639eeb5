/**
 * `turnlog export <task>|--all`: writes history files (src/history/history-file.ts) to a file
 * or stdout. The CLI holds the store lock, so nothing appends meanwhile: the export is a
 * consistent snapshot. Files are written beside the target and renamed into place when complete.
 */
import { createWriteStream, type WriteStream } from 'node:fs';
import { rename, rm } from 'node:fs/promises';
import { finished } from 'node:stream/promises';
import { Option, type Command } from 'commander';
import { eventIdAfter, type TaskSummary } from '../../history/events.js';
import { writeHistoryFile, type ByteSink, type HistoryFileFormat, type HistoryFileSource } from '../../history/history-file.js';
import type { HistoryStore } from '../../store/history-store.js';
import { printJSON, printText, requireTask, usageError, withStore } from '../context.js';
import { bytes } from '../format.js';

interface ExportFlags {
  all?: boolean;
  output?: string;
  format?: HistoryFileFormat;
}

/** Progress appears only on a terminal and only for exports longer than this many events. */
export const PROGRESS_MIN_EVENTS = 1000;

/** Every task summary in the store, page by page. */
export async function allSummaries(store: HistoryStore): Promise<TaskSummary[]> {
  const out: TaskSummary[] = [];
  let cursor: string | undefined;
  do {
    const page = await store.listTasks(cursor === undefined ? { limit: 1000 } : { limit: 1000, cursor });
    out.push(...page.tasks);
    cursor = page.next;
  } while (cursor !== undefined);
  return out;
}

function streamSink(stream: WriteStream | NodeJS.WriteStream): ByteSink {
  return {
    write(chunk) {
      if (stream.write(chunk)) return;
      return new Promise((res, rej) => {
        const onErr = (err: Error): void => rej(err);
        stream.once('error', onErr);
        stream.once('drain', () => {
          stream.off('error', onErr);
          res();
        });
      });
    },
  };
}

function progressReporter(total: number): { onProgress?: (n: number) => void; done: () => void } {
  if (!process.stderr.isTTY || total <= PROGRESS_MIN_EVENTS) return { done: () => {} };
  const width = 30;
  const draw = (n: number): void => {
    const f = Math.min(1, n / total);
    const bar = '#'.repeat(Math.round(f * width)).padEnd(width, '.');
    process.stderr.write(`\rexporting [${bar}] ${n}/${total} events (${Math.floor(f * 100)}%)`);
  };
  return { onProgress: draw, done: () => process.stderr.write('\n') };
}

/** Picks the format: `--format`, else `.bin` on `-o` means binary, else JSON. */
export function pickFormat(flags: ExportFlags): HistoryFileFormat {
  if (flags.format) return flags.format;
  return flags.output?.endsWith('.bin') ? 'binary' : 'json';
}

/** Events stored for a task: its last id, minus what a compaction (event 2) stands for. */
async function storedEventCount(store: HistoryStore, taskId: string, lastEventId: number): Promise<number> {
  if (lastEventId < 3) return lastEventId;
  const [second] = await store.readEvents(taskId, { fromEventId: 2, toEventId: 2 });
  return second?.type === 'HistoryCompacted' ? lastEventId - (eventIdAfter(second) - 3) : lastEventId;
}

/** Registers `export` on the program. */
export function registerExport(program: Command): void {
  program
    .command('export')
    .description('write a task (or --all tasks) to a history file, or to stdout')
    .argument('[task]', 'task id')
    .option('--all', 'export every task into one multi-task file')
    .option('-o, --output <file>', 'write to this file instead of stdout')
    .addOption(new Option('--format <format>', 'file format (default json; binary when -o ends in .bin)').choices(['json', 'binary']))
    .action(async (taskId: string | undefined, flags: ExportFlags, cmd: Command) => {
      if ((taskId === undefined) === (flags.all !== true)) throw usageError('Pass a task id or --all (not both).');
      const format = pickFormat(flags);
      if (format === 'binary' && flags.output === undefined && process.stdout.isTTY) {
        throw usageError('Refusing to write a binary history to a terminal. Pass -o <file> or redirect stdout.');
      }
      await withStore(cmd, {}, async (store, g) => {
        const summaries = taskId === undefined ? await allSummaries(store) : [await requireTask(store, taskId)];
        const counts = await Promise.all(summaries.map((s) => storedEventCount(store, s.taskId, s.lastEventId)));
        const total = counts.reduce((n, c) => n + c, 0);
        const sources = summaries.map(
          (s, i): HistoryFileSource => ({ taskId: s.taskId, eventCount: counts[i]!, events: store.iterateEvents(s.taskId, { toEventId: s.lastEventId }) }),
        );
        const progress = progressReporter(total);
        const opts = progress.onProgress ? { format, onProgress: progress.onProgress } : { format };
        const input = taskId === undefined ? sources : sources[0]!;
        if (flags.output === undefined) {
          // Stdout cannot be taken back: read every event once first, so an unreadable one fails
          // the export before a byte is written (no truncated file, one --json document).
          for (const s of summaries) for await (const _ of store.iterateEvents(s.taskId, { toEventId: s.lastEventId }));
          await writeHistoryFile(streamSink(process.stdout), input, opts);
          progress.done();
          return;
        }
        const tmp = `${flags.output}.tmp-${process.pid}`;
        const out = createWriteStream(tmp);
        let result;
        try {
          result = await writeHistoryFile(streamSink(out), input, opts);
          out.end();
          await finished(out);
          await rename(tmp, flags.output);
        } catch (err) {
          out.destroy();
          await rm(tmp, { force: true });
          throw err;
        } finally {
          progress.done();
        }
        if (g.json) {
          return printJSON({ file: flags.output, format, tasks: summaries.map((s) => s.taskId), events: result.events, bytes: result.bytes });
        }
        return printText(`exported ${result.tasks} task(s), ${result.events} events (${bytes(result.bytes)}, ${format}) to ${flags.output}`);
      });
    });
}
