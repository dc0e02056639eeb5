/**
 * `turnlog import <file>`: appends a history file's tasks through the store's `append`, so
 * summaries and indexes are derived the normal way (invariant 1). Refuses to overwrite an
 * existing task unless `--force`.
 */
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { Command } from 'commander';
import { TurnlogError, isHistoryUnreadable } from '../../errors.js';
import type { HistoryEvent } from '../../history/events.js';
import { readHistoryFile, type HistoryFileTask } from '../../history/history-file.js';
import { encodeState } from '../../history/state-codec.js';
import { fold } from '../../replay/fold.js';
import { APPEND_HISTORY_CHUNK, appendHistory } from '../../store/append-history.js';
import type { HistoryStore } from '../../store/history-store.js';
import { CliError, EXIT, printJSON, printText, withStore } from '../context.js';
import { statusText } from './list.js';

/** Events per append; each append is one atomic batch. */
export const IMPORT_CHUNK = APPEND_HISTORY_CHUNK;

interface ImportFlags {
  force?: boolean;
}

/** The owner of the void lease an import leaves on every task (docs/cli.md#import). */
export const IMPORT_LEASE_OWNER = 'turnlog-import';

/**
 * Appends a task's events ({@link appendHistory}: chunks of one generation, a void lease last),
 * then a snapshot.
 */
export async function importTask(store: HistoryStore, task: HistoryFileTask): Promise<void> {
  const { taskId, events } = task;
  await appendHistory(store, taskId, events, IMPORT_LEASE_OWNER, `${IMPORT_LEASE_OWNER}-${process.pid}`);
  await putFinalSnapshot(store, taskId, events);
}

/**
 * A snapshot of the whole history, so the first recovery reads no tail. A history that does not
 * fold gets none: recovery reports the invariant it breaks, as before.
 */
export async function putFinalSnapshot(store: HistoryStore, taskId: string, events: readonly HistoryEvent[]): Promise<void> {
  let state;
  try {
    state = fold(taskId, events);
  } catch {
    return;
  }
  await store.putSnapshot(taskId, { eventId: state.lastEventId, data: encodeState(state) });
}

/** Registers `import` on the program. */
export function registerImport(program: Command): void {
  program
    .command('import')
    .description('import a history file (from turnlog export) into the store')
    .argument('<file>', 'history file (JSON or binary, detected by content)')
    .option('--force', 'replace tasks that already exist')
    .action(async (file: string, flags: ImportFlags, cmd: Command) => {
      const st = await stat(file).catch(() => undefined);
      if (!st?.isFile()) {
        throw new CliError('TURNLOG_HISTORY_FILE', `History file ${file} does not exist or is not a file. Check the path.`, EXIT.notFound);
      }
      // Read and validate the whole file before opening the store: a bad file changes nothing.
      const parsed = await readHistoryFile(createReadStream(file), file);
      await withStore(cmd, { create: true }, async (store, g) => {
        const existing = new Map<string, string>();
        for (const t of parsed.tasks) {
          // An unreadable summary is a corrupt task that exists: --force is how it is replaced.
          const s = await store.getSummary(t.taskId).catch((err: unknown) => {
            if (isHistoryUnreadable(err)) return null;
            throw err;
          });
          if (s) existing.set(t.taskId, `${s.lastEventId} events`);
          else if (s === null) existing.set(t.taskId, 'unreadable summary');
        }
        if (existing.size > 0 && !flags.force) {
          const list = [...existing].map(([id, what]) => `${id} (${what})`).join(', ');
          throw new TurnlogError(
            'TURNLOG_TASK_CONFLICT',
            `Task${existing.size > 1 ? 's' : ''} ${list} already exist${existing.size > 1 ? '' : 's'} in store ${store.location}; nothing was imported. Pass --force to replace, or import into another --store.`,
          );
        }
        const results = [];
        for (const t of parsed.tasks) {
          const replaced = existing.has(t.taskId);
          if (replaced) await store.deleteTask(t.taskId);
          await importTask(store, t);
          const summary = await store.getSummary(t.taskId);
          results.push({ taskId: t.taskId, events: t.events.length, replaced, status: summary?.status ?? null, outcome: summary?.outcome ?? null });
        }
        const events = results.reduce((n, r) => n + r.events, 0);
        if (g.json) return printJSON({ file, format: parsed.format, formatVersion: parsed.formatVersion, tasks: results, events });
        const lines = results.map(
          (r) => `imported ${r.taskId}: ${r.events} events, ${r.replaced ? 'replaced, ' : ''}status ${statusText({ status: r.status ?? 'pending', ...(r.outcome ? { outcome: r.outcome } : {}) } as never)}`,
        );
        lines.push(`${results.length} task(s), ${events} events from ${file} (${parsed.format}) into ${store.location}`);
        return printText(lines.join('\n'));
      });
    });
}
