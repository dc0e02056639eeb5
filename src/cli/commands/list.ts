/**
 * `turnlog list`: one page of task summaries, newest index order, filtered by status and/or
 * workflow; `--cursor` continues from the previous page's `next`.
 */
import { Option, type Command } from 'commander';
import type { TaskStatus, TaskSummary } from '../../history/events.js';
import type { ListOptions } from '../../store/history-store.js';
import { positiveInt, printJSON, printText, withStore } from '../context.js';
import { isoTime, table } from '../format.js';

export const STATUSES: readonly TaskStatus[] = ['pending', 'in_progress', 'suspended', 'completed'];

interface ListFlags {
  status?: TaskStatus;
  workflow?: string;
  limit: number;
  cursor?: string;
}

/** The status column: `completed (failed)` for completed tasks, `[corrupt]` for an isolated one. */
export function statusText(s: TaskSummary): string {
  const text = s.outcome === undefined ? s.status : `${s.status} (${s.outcome})`;
  return s.corrupt ? `${text} [corrupt]` : text;
}

/** Registers `list` on the program. */
export function registerList(program: Command): void {
  program
    .command('list')
    .description('list tasks (one page; --cursor continues)')
    .addOption(new Option('--status <status>', 'only tasks with this status').choices(STATUSES))
    .option('--workflow <name>', 'only tasks of this workflow')
    .option('--limit <n>', 'page size', positiveInt, 50)
    .option('--cursor <cursor>', "continue from a previous page's next cursor")
    .action(async (flags: ListFlags, cmd: Command) => {
      await withStore(cmd, {}, async (store, g) => {
        const opts: ListOptions = { limit: flags.limit };
        if (flags.status !== undefined) opts.status = flags.status;
        if (flags.workflow !== undefined) opts.workflow = flags.workflow;
        if (flags.cursor !== undefined) opts.cursor = flags.cursor;
        const page = await store.listTasks(opts);
        if (g.json) return printJSON({ tasks: page.tasks, next: page.next ?? null });
        if (page.tasks.length === 0) return printText(`no tasks in ${store.location}${filterText(flags)}`);
        const rows = page.tasks.map((s) => [
          s.taskId,
          s.workflow,
          s.kind,
          statusText(s),
          String(s.turn),
          String(s.queued),
          String(s.lastEventId),
          isoTime(s.updatedAt),
        ]);
        let out = table(['TASK', 'WORKFLOW', 'KIND', 'STATUS', 'TURN', 'QUEUED', 'EVENTS', 'UPDATED'], rows);
        const corrupt = page.tasks.filter((s) => s.corrupt);
        if (corrupt.length > 0) {
          out += `\n\n${corrupt.length} task(s) cannot be read and are isolated by the engine: ${corrupt.map((s) => `${s.taskId} (${s.corrupt!.key})`).join(', ')}. See turnlog show <task>.`;
        }
        if (page.next !== undefined) out += `\n\nmore tasks: turnlog list --cursor ${page.next}${filterFlags(flags)}`;
        return printText(out);
      });
    });
}

function filterText(f: ListFlags): string {
  const parts = [f.status && `status ${f.status}`, f.workflow && `workflow ${f.workflow}`].filter(Boolean);
  return parts.length === 0 ? '' : ` matching ${parts.join(', ')}`;
}

function filterFlags(f: ListFlags): string {
  return (f.status ? ` --status ${f.status}` : '') + (f.workflow ? ` --workflow ${JSON.stringify(f.workflow)}` : '') + ` --limit ${f.limit}`;
}
