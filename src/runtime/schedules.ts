/**
 * Schedules (docs/time.md#schedules): `engine.schedule(id, { cron, workflow, input })` is a task
 * `schedule:<id>` of the built-in multi-turn workflow `turnlog.schedule`, which waits for each
 * slot with a scheduled input to itself (a tick) and starts the slot's run, task `<id>@<slotIso>`,
 * idempotently. Several engines on one store, or a restart, never run a slot twice: the task's
 * lease decides who runs a tick, and the run's task id and input id make its start idempotent.
 */
import { TurnlogError, invalidArgument, isTurnlogError } from '../errors.js';
import { defineWorkflow, type Workflow } from '../workflow/define-workflow.js';
import type { TaskDescription, TurnResult } from '../client/task-client.js';
import type { ListOptions, TaskPage } from '../store/history-store.js';
import { checkTimeZone, nextSlot, parseCron, scheduleInvalid } from './cron.js';
import { checkId } from './options.js';

export const SCHEDULE_WORKFLOW = 'turnlog.schedule';
export const SCHEDULE_TASK_PREFIX = 'schedule:';
/** At most this many missed slots run in one tick under `catchUp: 'all'` (the oldest first). */
export const MAX_CATCH_UP = 1000;
/** `catchUp: 'none'` runs a slot whose tick fires at most this late. */
const ON_TIME_MS = 60_000;

/** What `engine.schedule` takes. */
export interface ScheduleSpec {
  /** Five fields: minute hour day-of-month month day-of-week (`*`, `a-b`, `/n`, `,`, names). */
  cron: string;
  /** The workflow each slot starts (registered with the engines that run the schedule). */
  workflow: string | { name: string };
  /** The input of each run (JSON). */
  input?: unknown;
  /**
   * Slots missed while no engine ran (downtime): `'latest'` (default) runs the most recent one,
   * `'all'` runs each (oldest first, at most 1000 per wake-up), `'none'` runs none (a slot runs
   * only when its wake-up is less than a minute late).
   */
  catchUp?: 'latest' | 'all' | 'none';
  /** IANA time zone the cron reads wall-clock time in. Default `'UTC'`. */
  timezone?: string;
}

/** A schedule as `engine.schedules()` lists it. */
export interface ScheduleInfo {
  id: string;
  cron: string;
  workflow: string;
  input: unknown;
  catchUp: 'latest' | 'all' | 'none';
  timezone: string;
  /** The next slot (ms since epoch); absent when the cron has none in the next five years. */
  nextRunAt?: number;
  /** The latest slot whose run was started (or skipped under catchUp), if any. */
  lastSlotAt?: number;
}

type Resolved = Omit<ScheduleInfo, 'id' | 'nextRunAt' | 'lastSlotAt'>;
interface ScheduleState {
  spec?: Resolved;
  /** Bumped by every set and remove: a tick armed by an older version is stale. */
  version: number;
  removed: boolean;
  /** When the current spec was set: slots before it are never due. */
  since: number;
  lastSlot?: number;
  next?: number;
}
type ScheduleInput = { op: 'set'; spec: Resolved } | { op: 'remove' } | { op: 'tick'; version: number; slot: number };

/** What the schedules need of the engine. */
export interface ScheduleEngine {
  now(): number;
  hasWorkflow(name: string): boolean;
  start(workflow: string, input: unknown, options: { taskId: string; inputId?: string }): Promise<{ inputId: string | undefined }>;
  sendInput(taskId: string, input: unknown, options: { inputId?: string; deliverAt?: number }): Promise<string>;
  describe(taskId: string): Promise<TaskDescription>;
  list(options: ListOptions): Promise<TaskPage>;
  turnResult(taskId: string, inputId: string): Promise<TurnResult>;
  warn(message: string, fields: Record<string, unknown>): void;
}

/** The run of slot `slot` of schedule `id`: its task id. */
export function runTaskId(id: string, slot: number): string {
  return `${id}@${new Date(slot).toISOString()}`;
}

/** The latest `max` slots of `spec` in (from, to], oldest first. */
export function dueSlots(spec: Resolved, from: number, to: number, max = MAX_CATCH_UP): number[] {
  const cron = parseCron(spec.cron);
  const within = (start: number): number[] => {
    const out: number[] = [];
    for (let s = nextSlot(cron, start, spec.timezone); s !== undefined && s <= to; s = nextSlot(cron, s, spec.timezone)) {
      out.push(s);
      if (out.length > max) out.shift(); // keep the latest `max`
    }
    return out;
  };
  // After a long downtime, look back a day, then twice as far, … so a year of minutely slots
  // under catchUp 'latest' costs a few searches, not half a million.
  for (let back = 86_400_000; to - back > from; back *= 2) {
    const found = within(to - back);
    if (found.length >= max) return found;
  }
  return within(from);
}

/** Which due slots run under the catch-up policy, at `now`. */
export function slotsToRun(catchUp: Resolved['catchUp'], due: readonly number[], now: number): number[] {
  if (catchUp === 'all') return [...due];
  const latest = due.at(-1);
  if (latest === undefined) return [];
  if (catchUp === 'latest') return [latest];
  return now - latest < ON_TIME_MS ? [latest] : [];
}

export class Schedules {
  readonly #e: ScheduleEngine;
  readonly workflow: Workflow<any, any, any, any>;

  constructor(engine: ScheduleEngine) {
    this.#e = engine;
    const e = engine;
    this.workflow = defineWorkflow<ScheduleInput, { next?: number }, ScheduleState>({
      name: SCHEDULE_WORKFLOW,
      kind: 'multi-turn',
      executor: 'inline',
      steering: { maxQueued: 100 },
      compaction: { keepTurns: 20 },
      initialState: () => ({ version: 0, removed: false, since: 0 }),
      turn: async (ctx, msg) => {
        const s = ctx.state;
        const id = ctx.taskId.slice(SCHEDULE_TASK_PREFIX.length);
        // Recorded once: a re-run of this turn sees the same now, so its steps replay in order.
        const now = await ctx.step('now', () => e.now());
        if (msg.op === 'remove') {
          Object.assign(s, { removed: true, version: s.version + 1 });
          delete s.next;
          return ctx.suspend('removed', {});
        }
        if (msg.op === 'set') Object.assign(s, { spec: msg.spec, version: s.version + 1, removed: false, since: now });
        else if (s.removed || !s.spec || msg.version !== s.version) return ctx.suspend('stale tick', s.next === undefined ? {} : { next: s.next });
        const spec = s.spec!;
        if (msg.op === 'tick') {
          const due = dueSlots(spec, Math.max(s.since, s.lastSlot ?? -Infinity), now, spec.catchUp === 'all' ? MAX_CATCH_UP : 1);
          for (const slot of slotsToRun(spec.catchUp, due, now)) {
            const taskId = runTaskId(id, slot);
            try {
              await ctx.step(`start ${taskId}`, async () => (await e.start(spec.workflow, spec.input, { taskId, inputId: 'scheduled' }), taskId));
            } catch (err) {
              // Recorded as the step's failure; the schedule goes on with the next slot.
              e.warn('schedule could not start a run', { taskId, error: err });
            }
          }
          if (due.length > 0) s.lastSlot = due.at(-1)!;
        }
        const next = nextSlot(parseCron(spec.cron), Math.max(now, s.lastSlot ?? -Infinity), spec.timezone);
        if (next === undefined) delete s.next;
        else {
          s.next = next;
          const tick: ScheduleInput = { op: 'tick', version: s.version, slot: next };
          await ctx.step(`arm ${new Date(next).toISOString()}`, () => e.sendInput(ctx.taskId, tick, { deliverAt: next, inputId: `tick-${s.version}-${next}` }));
        }
        return ctx.suspend('waiting', next === undefined ? {} : { next });
      },
    });
  }

  /** Creates or updates schedule `id`; resolves once the engine has armed its next slot. */
  async schedule(id: string, spec: ScheduleSpec): Promise<ScheduleInfo> {
    const resolved = this.#resolve(id, spec);
    const taskId = SCHEDULE_TASK_PREFIX + id;
    const current = await this.#read(taskId);
    if (current?.spec && !current.removed && JSON.stringify(current.spec) === JSON.stringify(resolved)) return info(id, current);
    const h = await this.#e.start(SCHEDULE_WORKFLOW, { op: 'set', spec: resolved } satisfies ScheduleInput, { taskId });
    await this.#settled(taskId, h.inputId);
    const after = await this.#read(taskId);
    return info(id, after ?? { version: 0, removed: false, since: 0, spec: resolved });
  }

  /** Stops schedule `id`: no slot after this starts (runs already started go on). */
  async unschedule(id: string): Promise<void> {
    const taskId = SCHEDULE_TASK_PREFIX + id;
    const current = await this.#read(taskId);
    if (!current?.spec || current.removed) {
      throw new TurnlogError('TURNLOG_SCHEDULE_NOT_FOUND', `Schedule ${id} does not exist (or was removed). Check the id against engine.schedules().`);
    }
    const inputId = await this.#e.sendInput(taskId, { op: 'remove' } satisfies ScheduleInput, {});
    await this.#settled(taskId, inputId);
  }

  /** Every schedule of the store, by id. */
  async list(): Promise<ScheduleInfo[]> {
    const out: ScheduleInfo[] = [];
    let cursor: string | undefined;
    do {
      const page = await this.#e.list({ workflow: SCHEDULE_WORKFLOW, ...(cursor === undefined ? {} : { cursor }) });
      for (const t of page.tasks) {
        const s = await this.#read(t.taskId);
        if (s?.spec && !s.removed) out.push(info(t.taskId.slice(SCHEDULE_TASK_PREFIX.length), s));
      }
      cursor = page.next;
    } while (cursor !== undefined);
    return out.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  #resolve(id: string, spec: ScheduleSpec): Resolved {
    checkId('schedule id', id);
    if (typeof spec !== 'object' || spec === null) throw invalidArgument(`Schedule ${id}: engine.schedule() needs { cron, workflow, input?, catchUp?, timezone? }.`);
    parseCron(spec.cron, id);
    const timezone = spec.timezone ?? 'UTC';
    if (typeof timezone !== 'string') throw scheduleInvalid(id, `timezone must be a string, got ${typeof timezone}`);
    checkTimeZone(timezone, id);
    const catchUp = spec.catchUp ?? 'latest';
    if (!['latest', 'all', 'none'].includes(catchUp)) throw scheduleInvalid(id, `catchUp must be 'latest', 'all' or 'none', got ${JSON.stringify(catchUp)}`);
    const workflow = typeof spec.workflow === 'string' ? spec.workflow : spec.workflow?.name;
    if (typeof workflow !== 'string' || !this.#e.hasWorkflow(workflow) || workflow === SCHEDULE_WORKFLOW) {
      throw scheduleInvalid(id, `workflow ${String(workflow)} is not registered with this engine; pass it in Engine.open({ workflows })`);
    }
    return { cron: spec.cron.trim(), workflow, input: spec.input ?? null, catchUp, timezone };
  }

  async #read(taskId: string): Promise<ScheduleState | undefined> {
    try {
      return (await this.#e.describe(taskId)).state as ScheduleState | undefined;
    } catch (err) {
      if (isTurnlogError(err, 'TURNLOG_TASK_NOT_FOUND')) return undefined;
      throw err;
    }
  }

  /** Waits for the turn that takes `inputId` (another engine may run it: then it does not wait). */
  async #settled(taskId: string, inputId: string | undefined): Promise<void> {
    if (inputId === undefined) return;
    try {
      await this.#e.turnResult(taskId, inputId);
    } catch (err) {
      if (!isTurnlogError(err, 'TURNLOG_TURN_DEFERRED')) throw err;
    }
  }
}

/** A schedule task's state as its listing, or undefined for a removed one (the CLI reads it from a store). */
export function scheduleFromState(taskId: string, state: unknown): ScheduleInfo | undefined {
  const s = state as ScheduleState | undefined;
  if (!s?.spec || s.removed) return undefined;
  return info(taskId.slice(SCHEDULE_TASK_PREFIX.length), s);
}

function info(id: string, s: ScheduleState): ScheduleInfo {
  const out: ScheduleInfo = { id, ...s.spec! };
  if (s.next !== undefined) out.nextRunAt = s.next;
  if (s.lastSlot !== undefined) out.lastSlotAt = s.lastSlot;
  return out;
}
