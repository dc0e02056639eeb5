/**
 * Schedules (docs/time.md#schedules): a cron schedule is a task `schedule:<id>` that starts each
 * slot's run `<id>@<slotIso>` once, driven here by the test engine's manual clock.
 */
import { describe, expect, it } from 'vitest';
import { createTestEngine } from '../../src/testing/test-engine.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { isTurnlogError } from '../../src/errors.js';
import { dueSlots, slotsToRun } from '../../src/runtime/schedules.js';

const MIN = 60_000;
const HOUR = 60 * MIN;
const job = defineWorkflow({ name: 'job', turn: async (ctx, input: { n: number }) => ({ ran: ctx.taskId, n: input.n }) });

async function runs(t: { engine: { list(o: { workflow: string }): Promise<{ tasks: { taskId: string }[] }> } }): Promise<string[]> {
  return (await t.engine.list({ workflow: 'job' })).tasks.map((x) => x.taskId).sort();
}

describe('schedules', () => {
  it('starts one run per slot on the manual clock, lists the schedule with its next slot', async () => {
    const t = await createTestEngine({ workflows: [job] });
    try {
      const start = t.clock.now(); // 2026-01-01T00:00Z
      const info = await t.engine.schedule('q', { cron: '*/15 * * * *', workflow: job, input: { n: 1 } });
      expect(info).toMatchObject({ id: 'q', cron: '*/15 * * * *', workflow: 'job', catchUp: 'latest', timezone: 'UTC', nextRunAt: start + 15 * MIN });
      expect(await runs(t)).toEqual([]);
      await t.advance(15 * MIN);
      expect(await runs(t)).toEqual(['q@2026-01-01T00:15:00.000Z']);
      expect(await t.engine.task('q@2026-01-01T00:15:00.000Z').result()).toEqual({ ran: 'q@2026-01-01T00:15:00.000Z', n: 1 });
      await t.advance(30 * MIN);
      expect(await runs(t)).toEqual(['q@2026-01-01T00:15:00.000Z', 'q@2026-01-01T00:30:00.000Z', 'q@2026-01-01T00:45:00.000Z']);
      const [listed] = await t.engine.schedules();
      expect(listed).toMatchObject({ id: 'q', nextRunAt: start + 60 * MIN, lastSlotAt: start + 45 * MIN });
      // The same spec again is a no-op; a new one re-arms and the old tick is stale.
      await t.engine.schedule('q', { cron: '*/15 * * * *', workflow: 'job', input: { n: 1 } });
      await t.engine.schedule('q', { cron: '0 * * * *', workflow: 'job', input: { n: 2 } });
      await t.advance(15 * MIN);
      expect(await runs(t)).toHaveLength(4);
      expect(await t.engine.task('q@2026-01-01T01:00:00.000Z').result()).toEqual({ ran: 'q@2026-01-01T01:00:00.000Z', n: 2 });
      await t.advance(30 * MIN); // 01:30: no slot of '0 * * * *'
      expect(await runs(t)).toHaveLength(4);
    } finally {
      await t.close();
    }
  });

  it('unschedule stops it; a second unschedule is TURNLOG_SCHEDULE_NOT_FOUND; the id can be scheduled again', async () => {
    const t = await createTestEngine({ workflows: [job] });
    try {
      await t.engine.schedule('u', { cron: '0 * * * *', workflow: 'job', input: { n: 0 } });
      await t.engine.unschedule('u');
      expect(await t.engine.schedules()).toEqual([]);
      await t.advance(2 * HOUR);
      expect(await runs(t)).toEqual([]);
      const err = await t.engine.unschedule('u').catch((e: unknown) => e);
      expect(isTurnlogError(err, 'TURNLOG_SCHEDULE_NOT_FOUND')).toBe(true);
      expect(isTurnlogError(await t.engine.unschedule('never').catch((e: unknown) => e), 'TURNLOG_SCHEDULE_NOT_FOUND')).toBe(true);
      await t.engine.schedule('u', { cron: '0 * * * *', workflow: 'job', input: { n: 0 } });
      await t.advance(HOUR);
      expect(await runs(t)).toEqual(['u@2026-01-01T03:00:00.000Z']);
    } finally {
      await t.close();
    }
  });

  it.each([
    ['all', ['d@2026-01-01T01:00:00.000Z', 'd@2026-01-01T02:00:00.000Z', 'd@2026-01-01T03:00:00.000Z', 'd@2026-01-01T04:00:00.000Z']],
    ['latest', ['d@2026-01-01T04:00:00.000Z']],
    ['none', []],
  ] as const)('downtime catch-up %s: a new engine on the same store runs the missed slots as the policy says, once', async (catchUp, want) => {
    const store = new MemoryHistoryStore();
    const clock = new ManualClock();
    const t1 = await createTestEngine({ workflows: [job], store, clock });
    await t1.engine.schedule('d', { cron: '0 * * * *', workflow: 'job', input: { n: 3 }, catchUp });
    await t1.close();
    await clock.advance(4 * HOUR + 20 * MIN); // nobody runs: 01:00 … 04:00 are missed
    const t2 = await createTestEngine({ workflows: [job], store, clock });
    try {
      await t2.engine.recovered();
      await t2.advance(0);
      for (const id of want) await t2.engine.task(id).result();
      expect(await runs(t2)).toEqual(want);
      const [s] = await t2.engine.schedules();
      expect(s).toMatchObject({ nextRunAt: Date.UTC(2026, 0, 1, 5), lastSlotAt: Date.UTC(2026, 0, 1, 4) });
      // On time again: 05:00 runs under every policy.
      await t2.advance(40 * MIN);
      expect(await runs(t2)).toEqual([...want, 'd@2026-01-01T05:00:00.000Z']);
    } finally {
      await t2.close();
    }
  });

  it('refuses bad specs with TURNLOG_SCHEDULE_INVALID before writing anything', async () => {
    const t = await createTestEngine({ workflows: [job] });
    try {
      for (const spec of [
        { cron: '* * *', workflow: 'job' },
        { cron: '61 * * * *', workflow: 'job' },
        { cron: '* * * * *', workflow: 'nope' },
        { cron: '* * * * *', workflow: 'job', timezone: 'Mars/Olympus' },
        { cron: '* * * * *', workflow: 'job', catchUp: 'some' },
      ]) {
        const err = await t.engine.schedule('bad', spec as never).catch((e: unknown) => e);
        expect(isTurnlogError(err, 'TURNLOG_SCHEDULE_INVALID'), JSON.stringify(spec)).toBe(true);
      }
      expect((await t.engine.list({})).tasks).toEqual([]);
      expect([...t.engine.workflows.keys()]).toEqual(['job']);
    } finally {
      await t.close();
    }
  });

  it('dueSlots and slotsToRun: the catch-up table', () => {
    const spec = { cron: '0 * * * *', workflow: 'job', input: null, catchUp: 'all' as const, timezone: 'UTC' };
    const due = dueSlots(spec, Date.UTC(2026, 0, 1, 0), Date.UTC(2026, 0, 1, 3, 30));
    expect(due).toEqual([1, 2, 3].map((h) => Date.UTC(2026, 0, 1, h)));
    expect(dueSlots(spec, 0, Date.UTC(2026, 0, 1, 3), 2)).toEqual([2, 3].map((h) => Date.UTC(2026, 0, 1, h)));
    const now = Date.UTC(2026, 0, 1, 3, 0, 30);
    expect(slotsToRun('all', due, now)).toEqual(due);
    expect(slotsToRun('latest', due, now)).toEqual([due[2]]);
    expect(slotsToRun('none', due, now)).toEqual([due[2]]); // 30 s late: on time
    expect(slotsToRun('none', due, now + MIN)).toEqual([]);
    expect(slotsToRun('latest', [], now)).toEqual([]);
  });
});
