/**
 * A small cron parser for schedules (docs/time.md#schedules): five fields (minute, hour, day of
 * month, month, day of week) with `*`, numbers, `a-b` ranges, `/n` steps, `,` lists and the
 * English month and day names; and the next slot after a time, in UTC or an IANA time zone.
 * Pure: no clock, no I/O (Intl only), so it is table-tested.
 */
import { TurnlogError } from '../errors.js';

export interface Cron {
  readonly minutes: ReadonlySet<number>;
  readonly hours: ReadonlySet<number>;
  readonly days: ReadonlySet<number>;
  readonly months: ReadonlySet<number>;
  /** 0 = Sunday … 6 (7 is read as 0). */
  readonly weekdays: ReadonlySet<number>;
  /** Day of month and day of week both restricted: a day matches if either does (Vixie cron). */
  readonly eitherDay: boolean;
  readonly daysStar: boolean;
  readonly weekdaysStar: boolean;
}

const MONTHS = ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];
const DAYS = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];
const FIELDS = [
  { name: 'minute', min: 0, max: 59, names: undefined, base: 0 },
  { name: 'hour', min: 0, max: 23, names: undefined, base: 0 },
  { name: 'day of month', min: 1, max: 31, names: undefined, base: 0 },
  { name: 'month', min: 1, max: 12, names: MONTHS, base: 1 },
  { name: 'day of week', min: 0, max: 7, names: DAYS, base: 0 },
] as const;

export function scheduleInvalid(id: string, detail: string): TurnlogError {
  return new TurnlogError('TURNLOG_SCHEDULE_INVALID', `Schedule ${id}: ${detail}. Nothing was scheduled; see docs/time.md#schedules.`);
}

/** Parses a 5-field cron expression; throws TURNLOG_SCHEDULE_INVALID naming the field. */
export function parseCron(expr: string, id = '?'): Cron {
  if (typeof expr !== 'string') throw scheduleInvalid(id, `cron must be a string, got ${typeof expr}`);
  const parts = expr.trim().split(/\s+/);
  if (parts.length !== 5) throw scheduleInvalid(id, `cron "${expr}" has ${parts.length} fields; it needs 5 (minute hour day-of-month month day-of-week)`);
  const sets = parts.map((p, i) => parseField(p, FIELDS[i]!, expr, id));
  const weekdays = new Set([...sets[4]!].map((d) => d % 7));
  const daysStar = parts[2]!.startsWith('*');
  const weekdaysStar = parts[4]!.startsWith('*');
  return { minutes: sets[0]!, hours: sets[1]!, days: sets[2]!, months: sets[3]!, weekdays, daysStar, weekdaysStar, eitherDay: !daysStar && !weekdaysStar };
}

function parseField(text: string, f: (typeof FIELDS)[number], expr: string, id: string): Set<number> {
  const bad = (why: string) => scheduleInvalid(id, `cron "${expr}": ${f.name} "${text}" ${why} (allowed ${f.min}-${f.max})`);
  const value = (s: string): number => {
    const named = f.names?.indexOf(s.toLowerCase() as never) ?? -1;
    if (named >= 0) return named + f.base;
    if (!/^\d+$/.test(s)) throw bad('is not a number');
    const n = Number(s);
    if (n < f.min || n > f.max) throw bad('is out of range');
    return n;
  };
  const out = new Set<number>();
  for (const item of text.split(',')) {
    const [range, stepText, extra] = item.split('/');
    if (extra !== undefined || range === undefined || range === '') throw bad('is malformed');
    const step = stepText === undefined ? 1 : Number(stepText);
    if (!Number.isInteger(step) || step < 1 || (stepText !== undefined && !/^\d+$/.test(stepText))) throw bad('has a bad step');
    let lo: number;
    let hi: number;
    if (range === '*') [lo, hi] = [f.min, f.max];
    else if (range.includes('-')) {
      const [a, b, more] = range.split('-');
      if (more !== undefined || !a || !b) throw bad('is malformed');
      [lo, hi] = [value(a), value(b)];
      if (lo > hi) throw bad('has a range that runs backwards');
    } else {
      lo = value(range);
      hi = stepText === undefined ? lo : f.max; // `5/15` means 5, 20, 35, 50
    }
    for (let v = lo; v <= hi; v += step) out.add(v);
  }
  return out;
}

/** Throws TURNLOG_SCHEDULE_INVALID for a time zone Intl does not know. */
export function checkTimeZone(timeZone: string, id: string): void {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone });
  } catch {
    throw scheduleInvalid(id, `timezone "${timeZone}" is not an IANA time zone this Node knows (e.g. "Europe/Paris", "UTC")`);
  }
}

const formats = new Map<string, Intl.DateTimeFormat>();
/** Wall-clock time in `timeZone` of instant `t`, as ms of a UTC date with the same fields. */
function wallOf(t: number, timeZone: string): number {
  let f = formats.get(timeZone);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', { timeZone, hourCycle: 'h23', year: 'numeric', month: 'numeric', day: 'numeric', hour: 'numeric', minute: 'numeric', second: 'numeric' });
    formats.set(timeZone, f);
  }
  const p: Record<string, number> = {};
  for (const part of f.formatToParts(t)) if (part.type !== 'literal') p[part.type] = Number(part.value);
  return Date.UTC(p['year']!, p['month']! - 1, p['day']!, p['hour']!, p['minute']!, p['second']!) + (t % 1000 + 1000) % 1000;
}

function dayMatches(c: Cron, d: Date): boolean {
  const dom = c.days.has(d.getUTCDate());
  const dow = c.weekdays.has(d.getUTCDay());
  if (c.eitherDay) return dom || dow;
  return (c.daysStar || dom) && (c.weekdaysStar || dow);
}

const MINUTE = 60_000;
/** About 5 years of days: an expression that matches nothing sooner (Feb 30) gives up. */
const MAX_STEPS = 5 * 366 * 26;

/** The first wall time ≥ `w` (ms, UTC fields) that matches, or undefined. */
function nextWall(c: Cron, w: number): number | undefined {
  const d = new Date(Math.ceil(w / MINUTE) * MINUTE);
  for (let i = 0; i < MAX_STEPS; i++) {
    if (!c.months.has(d.getUTCMonth() + 1)) {
      d.setUTCMonth(d.getUTCMonth() + 1, 1);
      d.setUTCHours(0, 0, 0, 0);
    } else if (!dayMatches(c, d)) {
      d.setUTCDate(d.getUTCDate() + 1);
      d.setUTCHours(0, 0, 0, 0);
    } else if (!c.hours.has(d.getUTCHours())) {
      d.setUTCHours(d.getUTCHours() + 1, 0, 0, 0);
    } else if (!c.minutes.has(d.getUTCMinutes())) {
      d.setUTCMinutes(d.getUTCMinutes() + 1, 0, 0);
    } else return d.getTime();
  }
  return undefined;
}

/**
 * The first slot strictly after instant `after`, in `timeZone` (default UTC). A wall time that
 * a DST change skips has no slot; one it repeats has one (the first). Undefined: none in 5 years.
 */
export function nextSlot(c: Cron, after: number, timeZone = 'UTC'): number | undefined {
  if (timeZone === 'UTC') return nextWall(c, after + 1);
  let from = wallOf(after, timeZone) + 1;
  for (let i = 0; i < 1000; i++) {
    const w = nextWall(c, from);
    if (w === undefined) return undefined;
    // The instant whose wall time is w: correct the guess by the offset at the guess, twice.
    let t = w - (wallOf(w, timeZone) - w);
    t = w - (wallOf(t, timeZone) - t);
    const instants = [t - 3_600_000, t, t + 3_600_000].filter((x) => wallOf(x, timeZone) === w);
    // The first instant of a repeated wall time is its slot; if that one has passed, so has the slot.
    if (instants.length > 0 && Math.min(...instants) > after) return Math.min(...instants);
    from = w + MINUTE; // skipped by a DST change, or already passed: the next wall time
  }
  return undefined;
}
