/**
 * `turnlog why <task>`: folds the history and asks the replayer what an engine would do now,
 * and which rule says so.
 */
import type { Command } from 'commander';
import type { Lease } from '../../history/events.js';
import { decide, explainDecision, fold } from '../../replay/index.js';
import { printJSON, printText, requireTask, withStore } from '../context.js';
import { isoTime } from '../format.js';
import { waitLines } from '../../timeline/format.js';

/** Registers `why` on the program. */
export function registerWhy(program: Command): void {
  program
    .command('why')
    .description("the replayer's decision for a task now, and the rule that gave it")
    .argument('<task>', 'task id')
    .action(async (taskId: string, _flags: unknown, cmd: Command) => {
      await withStore(cmd, {}, async (store, g) => {
        await requireTask(store, taskId);
        const events = await store.readEvents(taskId);
        const state = fold(taskId, events);
        const stored = await store.getLease(taskId);
        // Holding an exclusive store's lock proves no engine runs, so its leases are void
        // (DESIGN.md "Storage"): decide as the next engine to open the store would.
        const lease: Lease | undefined = store.supports.exclusive ? undefined : stored;
        // A shared store decides lease expiry on its own clock (PostgreSQL: the database's).
        const clocked = store as { databaseNow?: () => Promise<number> };
        const now = clocked.databaseNow ? await clocked.databaseNow() : Date.now();
        const decision = decide(state, lease, now);
        if (g.json) {
          return printJSON({
            taskId,
            now,
            decision,
            lease: stored ?? null,
            leaseConsidered: lease !== undefined,
            status: state.status,
            outcome: state.outcome ?? null,
            lastEventId: state.lastEventId,
            explanation: explainDecision(decision, state),
            waits: (state.openTurn?.calls ?? []).flatMap((c) => (c.kind === 'wait' && !c.ended ? [{ turn: state.openTurn!.turn, seq: c.seq, name: c.name, deadline: c.deadline ?? null }] : [])),
            signals: (state.signals ?? []).map((x) => ({ signalId: x.signalId, name: x.name, eventId: x.eventId, time: x.time })),
          });
        }
        const leaseLine =
          stored === undefined
            ? 'lease:    none stored'
            : `lease:    ${stored.owner}/${stored.instance} generation ${stored.generation}, ${stored.expiresAt > 0 ? `expires ${isoTime(stored.expiresAt)}` : 'left by an earlier process'}` +
              (lease === undefined ? ' (void: this CLI holds the store lock, so no engine runs)' : '');
        const waits = waitLines(state);
        return printText(`${explainDecision(decision, state)}\n${waits.map((l) => `${l}\n`).join('')}${leaseLine}\nnow:      ${isoTime(now)}`);
      });
    });
}
