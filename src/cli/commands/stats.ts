/**
 * `turnlog stats`: task counts by status and workflow, event counts, and the store's size on
 * disk. Counts come from the summaries (one read per task), never from replaying histories.
 */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Command } from 'commander';
import type { TaskStatus } from '../../history/events.js';
import { printJSON, printText, withStore } from '../context.js';
import { bytes, table } from '../format.js';
import { allSummaries } from './export.js';
import { STATUSES } from './list.js';

type StatusCounts = Record<TaskStatus, number>;

const zero = (): StatusCounts => ({ pending: 0, in_progress: 0, suspended: 0, completed: 0 });

/** Total size of the files under `dir` (LevelDB's tables, logs and manifest). */
export async function dirSize(dir: string): Promise<number> {
  let total = 0;
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name);
    if (entry.isDirectory()) total += await dirSize(p);
    else if (entry.isFile()) total += (await stat(p).catch(() => ({ size: 0 }))).size;
  }
  return total;
}

/** Registers `stats` on the program. */
export function registerStats(program: Command): void {
  program
    .command('stats')
    .description('task counts by status and workflow, event counts, store size on disk')
    .action(async (_flags: unknown, cmd: Command) => {
      await withStore(cmd, {}, async (store, g) => {
        const summaries = await allSummaries(store);
        const byStatus = zero();
        const byOutcome: Record<string, number> = {};
        const byWorkflow: Record<string, { tasks: number; events: number; byStatus: StatusCounts }> = {};
        let events = 0;
        for (const s of summaries) {
          byStatus[s.status]++;
          if (s.outcome !== undefined) byOutcome[s.outcome] = (byOutcome[s.outcome] ?? 0) + 1;
          const w = (byWorkflow[s.workflow] ??= { tasks: 0, events: 0, byStatus: zero() });
          w.tasks++;
          w.events += s.lastEventId;
          w.byStatus[s.status]++;
          events += s.lastEventId;
        }
        // A PostgreSQL store reports its tables' size (with indexes and TOAST).
        const sized = store as { sizeBytes?: () => Promise<number> };
        const sizeBytes = sized.sizeBytes ? await sized.sizeBytes() : await dirSize(store.location);
        if (g.json) {
          return printJSON({ store: store.location, tasks: summaries.length, events, sizeBytes, byStatus, byOutcome, byWorkflow });
        }
        const parts = [
          `store   ${store.location}\ntasks   ${summaries.length}\nevents  ${events}\nsize    ${bytes(sizeBytes)} on disk`,
          table(
            ['STATUS', 'TASKS'],
            STATUSES.map((st) => [st, String(byStatus[st])]),
          ),
        ];
        if (Object.keys(byOutcome).length > 0) {
          parts.push(table(['OUTCOME', 'TASKS'], Object.entries(byOutcome).sort().map(([k, v]) => [k, String(v)])));
        }
        const wf = Object.entries(byWorkflow).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
        if (wf.length > 0) {
          parts.push(
            table(
              ['WORKFLOW', 'TASKS', 'EVENTS', ...STATUSES.map((s) => s.toUpperCase())],
              wf.map(([name, w]) => [name, String(w.tasks), String(w.events), ...STATUSES.map((s) => String(w.byStatus[s]))]),
            ),
          );
        }
        return printText(parts.join('\n\n'));
      });
    });
}
