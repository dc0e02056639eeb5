/**
 * Names of tasks the engine names itself (`engine.start` and `engine.fork` without an id):
 * `task-` + the engine clock's milliseconds in 9 base-36 digits + 16 random characters (96 bits).
 * Time first, so a store's keys for new tasks cluster (docs/decisions.md, "Task ids the engine names").
 */
import { nanoid } from 'nanoid';

/** Digits of the time part: 36^9 ms reach the year 5138, so the part keeps one width and ids sort by time. */
const TIME_DIGITS = 9;
/** Random characters after it: 96 bits, so two ids collide only if named in one millisecond with the same 96 bits. */
export const TASK_ID_RANDOM_CHARS = 16;

/** A new engine-named task id at `now` (ms since the epoch; below 0 or not finite counts as 0). */
export function newTaskId(now: number): string {
  const ms = Number.isFinite(now) && now > 0 ? Math.floor(now) : 0;
  return `task-${ms.toString(36).padStart(TIME_DIGITS, '0')}${nanoid(TASK_ID_RANDOM_CHARS)}`;
}

/** The time part of an id `newTaskId` made, in ms; undefined for any other id. */
export function taskIdTime(taskId: string): number | undefined {
  const m = /^task-([0-9a-z]{9})[A-Za-z0-9_-]{16}$/.exec(taskId);
  return m ? parseInt(m[1]!, 36) : undefined;
}
