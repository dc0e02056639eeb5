/**
 * `turnlog fork <task> --at-turn <n> [--new-task-id <id>]`: a new task whose history is the
 * original's up to the end of turn n (`forkEvents`, the same as `Engine.fork`); the original is
 * untouched. Writes through the store's `append` like `import`.
 */
import type { Command } from 'commander';
import { TurnlogError } from '../../errors.js';
import { forkEvents } from '../../replay/index.js';
import { appendHistory } from '../../store/append-history.js';
import { checkTaskId } from '../../store/keys.js';
import { printJSON, printText, requireTask, withStore } from '../context.js';
import { putFinalSnapshot } from './import.js';

/** The owner of the void lease a CLI fork leaves on the new task. */
export const FORK_LEASE_OWNER = 'turnlog-fork';

interface ForkFlags {
  atTurn: string;
  newTaskId?: string;
}

/** Registers `fork` on the program. */
export function registerFork(program: Command): void {
  program
    .command('fork')
    .description('copy a multi-turn task up to the end of one of its turns into a new task (retry from there)')
    .argument('<task>', 'task id of the original')
    .requiredOption('--at-turn <n>', 'the turn whose end the new task starts from')
    .option('--new-task-id <id>', 'id of the new task (default: <task>-fork-<n>)')
    .action(async (taskId: string, flags: ForkFlags, cmd: Command) => {
      const atTurn = /^\d+$/.test(flags.atTurn) ? Number(flags.atTurn) : NaN;
      if (!(atTurn >= 1)) throw new TurnlogError('TURNLOG_INVALID_ARGUMENT', `--at-turn ${JSON.stringify(flags.atTurn)} is not a turn number. Pass a positive integer, e.g. --at-turn 3.`);
      const newTaskId = flags.newTaskId ?? `${taskId}-fork-${atTurn}`;
      checkTaskId(newTaskId);
      // It appends: read-write on PostgreSQL (never migrating), and no live socket on LevelDB.
      await withStore(cmd, { write: true }, async (store, g) => {
        await requireTask(store, taskId);
        const events = forkEvents(taskId, await store.readEvents(taskId), { atTurn, newTaskId });
        if (await store.getSummary(newTaskId).catch(() => null)) {
          throw new TurnlogError('TURNLOG_TASK_CONFLICT', `Task ${newTaskId} already exists in store ${store.location}; nothing was forked. Pass another --new-task-id.`);
        }
        await appendHistory(store, newTaskId, events, FORK_LEASE_OWNER, `${FORK_LEASE_OWNER}-${process.pid}`);
        await putFinalSnapshot(store, newTaskId, events);
        const summary = await store.getSummary(newTaskId);
        if (g.json) return printJSON({ taskId: newTaskId, forkedFrom: { taskId, turn: atTurn }, events: events.length, status: summary?.status ?? null });
        return printText(`forked ${taskId} at the end of turn ${atTurn} into ${newTaskId}: ${events.length} events, status ${summary?.status ?? 'unknown'}`);
      });
    });
}
