// Where the appender's cadence (snapshotDue, evaluated once per append) puts a task's snapshots,
// against the cadence before eb6ef76 (every N events), for any sizes of appends: what
// docs/decisions.md#snapshot-cadence and workflows.md may claim about positions and tails.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SMALL_SNAPSHOT_BYTES, snapshotDue } from '../../src/runtime/appender.js';

/** Snapshot positions over appends of `sizes` events, a snapshot of `bytes` each time; and the longest tail seen after an append. */
function positions(sizes: number[], every: number, bytes: number | undefined, rule = snapshotDue): { at: number[]; tails: number[] } {
  let last = 0;
  let snap = 0;
  let known: number | undefined;
  const at: number[] = [];
  const tails: number[] = [];
  for (const n of sizes) {
    last += n;
    if (rule(last - snap, known, every)) {
      snap = last;
      known = bytes;
      at.push(last);
    }
    tails.push(last - snap);
  }
  return { at, tails };
}

const old = (since: number, _bytes: number | undefined, every: number): boolean => since >= every;
const sizes = fc.array(fc.integer({ min: 1, max: 7 }), { minLength: 1, maxLength: 800 });
const every = fc.integer({ min: 1, max: 400 });

describe('snapshot positions', () => {
  it('a state above 4 KiB: exactly the old positions, for any append sizes', () => {
    fc.assert(
      fc.property(sizes, every, (xs, n) => {
        expect(positions(xs, n, SMALL_SNAPSHOT_BYTES + 1).at).toEqual(positions(xs, n, undefined, old).at);
      }),
    );
  });

  it('a small state: the first position is the old one; after it the tail stays under max(1, floor(N / 4)) events', () => {
    fc.assert(
      fc.property(sizes, every, (xs, n) => {
        const { at, tails } = positions(xs, n, 10);
        const before = positions(xs, n, undefined, old).at;
        expect(at[0]).toBe(before[0]);
        const first = xs.findIndex((_, i) => xs.slice(0, i + 1).reduce((a, b) => a + b, 0) === at[0]);
        if (first >= 0) for (const t of tails.slice(first)) expect(t).toBeLessThan(Math.max(1, Math.floor(n / 4)));
      }),
    );
  });

  it('a small state with appends of several events: later old positions are NOT all kept (so docs must not say they are)', () => {
    // Appends of 3 events, snapshotEvery 100: before, 102, 204, 306; now 102, 129, 156, 183, 210, ...
    const xs = Array.from({ length: 110 }, () => 3);
    expect(positions(xs, 100, undefined, old).at.slice(0, 3)).toEqual([102, 204, 306]);
    const small = positions(xs, 100, 10).at;
    expect(small.slice(0, 5)).toEqual([102, 129, 156, 183, 210]);
    expect(small).not.toContain(204);
  });
});
