/**
 * `turnlog schedules`: the store's schedules (docs/time.md#schedules), read from their tasks'
 * folded state: id, cron, time zone, workflow, catch-up policy, next and last slot.
 */
import type { Command } from 'commander';
import { fold } from '../../replay/index.js';
import type { HistoryEvent } from '../../history/events.js';
import { SCHEDULE_WORKFLOW, scheduleFromState, type ScheduleInfo } from '../../runtime/schedules.js';
import { printJSON, printText, readableEvents, withStore } from '../context.js';
import { isoTime, table } from '../format.js';

/** Registers `schedules` on the program. */
export function registerSchedules(program: Command): void {
  program
    .command('schedules')
    .description('list the schedules (engine.schedule) with their next slot')
    .action(async (_flags: unknown, cmd: Command) => {
      await withStore(cmd, {}, async (store, g) => {
        const found: ScheduleInfo[] = [];
        let cursor: string | undefined;
        do {
          const page = await store.listTasks({ workflow: SCHEDULE_WORKFLOW, ...(cursor === undefined ? {} : { cursor }) });
          for (const t of page.tasks) {
            const events: HistoryEvent[] = [];
            for await (const e of readableEvents(store, t.taskId)) events.push(g.decodeEvent(e));
            const state = fold(t.taskId, events).state;
            const s = state && scheduleFromState(t.taskId, g.pipeline.converter.fromPayload(state));
            if (s) found.push(s);
          }
          cursor = page.next;
        } while (cursor !== undefined);
        found.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
        if (g.json) return printJSON({ schedules: found });
        if (found.length === 0) return printText(`no schedules in ${store.location}`);
        const rows = found.map((s) => [s.id, s.cron, s.timezone, s.workflow, s.catchUp, s.nextRunAt === undefined ? '-' : isoTime(s.nextRunAt), s.lastSlotAt === undefined ? '-' : isoTime(s.lastSlotAt)]);
        return printText(table(['SCHEDULE', 'CRON', 'TIMEZONE', 'WORKFLOW', 'CATCH-UP', 'NEXT', 'LAST'], rows));
      });
    });
}
