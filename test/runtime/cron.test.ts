/** The schedules' cron parser and next-slot search (docs/time.md#schedules), table-tested. */
import { describe, expect, it } from 'vitest';
import { nextSlot, parseCron } from '../../src/runtime/cron.js';
import { isTurnlogError } from '../../src/errors.js';

const iso = (t: number | undefined) => (t === undefined ? 'none' : new Date(t).toISOString());
const at = (s: string) => Date.parse(s);
function slots(expr: string, from: string, n: number, tz?: string): string[] {
  const c = parseCron(expr);
  const out: string[] = [];
  let t = at(from);
  for (let i = 0; i < n; i++) {
    const next = nextSlot(c, t, tz);
    out.push(iso(next));
    if (next === undefined) break;
    t = next;
  }
  return out;
}

describe('parseCron', () => {
  it.each([
    ['*/15 * * * *', '2026-01-01T00:00:00Z', ['2026-01-01T00:15:00.000Z', '2026-01-01T00:30:00.000Z', '2026-01-01T00:45:00.000Z']],
    ['0 9 * * mon-fri', '2026-01-02T10:00:00Z', ['2026-01-05T09:00:00.000Z', '2026-01-06T09:00:00.000Z', '2026-01-07T09:00:00.000Z']],
    ['5/20 8-9 * * *', '2026-01-01T00:00:00Z', ['2026-01-01T08:05:00.000Z', '2026-01-01T08:25:00.000Z', '2026-01-01T08:45:00.000Z', '2026-01-01T09:05:00.000Z']],
    ['0 0 1,15 * *', '2026-01-01T00:00:00Z', ['2026-01-15T00:00:00.000Z', '2026-02-01T00:00:00.000Z']],
    // Day of month and day of week both restricted: either matches (Vixie cron).
    ['0 0 13 * fri', '2026-02-01T00:00:00Z', ['2026-02-06T00:00:00.000Z', '2026-02-13T00:00:00.000Z', '2026-02-20T00:00:00.000Z']],
    ['0 12 * jan,jul 0', '2026-01-01T00:00:00Z', ['2026-01-04T12:00:00.000Z']],
    ['0 0 * * 7', '2026-01-01T00:00:00Z', ['2026-01-04T00:00:00.000Z']],
    ['59 23 31 12 *', '2026-06-01T00:00:00Z', ['2026-12-31T23:59:00.000Z', '2027-12-31T23:59:00.000Z']],
    ['0 0 29 2 *', '2026-01-01T00:00:00Z', ['2028-02-29T00:00:00.000Z']],
    ['0 0 30 2 *', '2026-01-01T00:00:00Z', ['none']],
  ])('%s after %s', (expr, from, want) => {
    expect(slots(expr, from, want.length)).toEqual(want);
  });

  it('a slot is strictly after the time given (a slot at that very time is not next)', () => {
    expect(iso(nextSlot(parseCron('0 * * * *'), at('2026-01-01T01:00:00Z')))).toBe('2026-01-01T02:00:00.000Z');
    expect(iso(nextSlot(parseCron('0 * * * *'), at('2026-01-01T00:59:59.999Z')))).toBe('2026-01-01T01:00:00.000Z');
  });

  it('time zones: wall-clock slots, a DST gap skips its slot, a repeated hour runs once', () => {
    expect(slots('0 9 * * *', '2026-01-01T00:00:00Z', 2, 'America/New_York')).toEqual(['2026-01-01T14:00:00.000Z', '2026-01-02T14:00:00.000Z']);
    // Paris springs forward on 2026-03-29 (02:00 → 03:00): no 02:30 that day.
    expect(slots('30 2 * * *', '2026-03-27T00:00:00Z', 3, 'Europe/Paris')).toEqual(['2026-03-27T01:30:00.000Z', '2026-03-28T01:30:00.000Z', '2026-03-30T00:30:00.000Z']);
    // Paris falls back on 2026-10-25 (03:00 → 02:00): 02:30 happens twice, the slot once.
    expect(slots('30 2 * * *', '2026-10-24T00:00:00Z', 3, 'Europe/Paris')).toEqual(['2026-10-24T00:30:00.000Z', '2026-10-25T00:30:00.000Z', '2026-10-26T01:30:00.000Z']);
  });

  it.each(['* * * *', '60 * * * *', '* 24 * * *', '* * 0 * *', '* * * 13 *', '* * * * 8', '*/0 * * * *', '5-1 * * * *', 'a * * * *', '1,,2 * * * *', '1-2-3 * * * *', '* * * * * *'])(
    'refuses %s with TURNLOG_SCHEDULE_INVALID naming the field',
    (expr) => {
      let err: unknown;
      try {
        parseCron(expr, 'nightly');
      } catch (e) {
        err = e;
      }
      expect(isTurnlogError(err, 'TURNLOG_SCHEDULE_INVALID')).toBe(true);
      expect((err as Error).message).toMatch(/^Schedule nightly: /);
    },
  );
});
