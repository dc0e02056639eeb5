/**
 * The store clock's offset: measured halfway through the round trip, kept on failure, and
 * measured again in the background when a foreign lease is judged on an old measurement (an
 * engine with `scanIntervalMs: 0` has no recovery pass to do it).
 */
import { describe, expect, it } from 'vitest';
import type { Lease } from '../../src/history/events.js';
import { REMEASURE_MS, StoreClock } from '../../src/runtime/store-clock.js';
import { ManualClock } from '../../src/testing/index.js';

const lease = (expiresAt: number): Lease => ({ instance: 'other', owner: 'o', generation: 1, expiresAt }) as Lease;

function rig(skewMs: number) {
  const clock = new ManualClock(1_000_000);
  let calls = 0;
  let skew = skewMs;
  let fail = false;
  const store = {
    databaseNow: async () => {
      calls++;
      if (fail) throw new Error('unreachable');
      return clock.now() + skew;
    },
  };
  const sc = new StoreClock({ store, clock });
  return { clock, sc, calls: () => calls, setSkew: (s: number) => (skew = s), setFail: (f: boolean) => (fail = f) };
}

describe('StoreClock', () => {
  it('rebases a foreign lease by the measured offset', async () => {
    const r = rig(3_600_000);
    await r.sc.sync();
    expect(r.sc.offsetMs).toBe(3_600_000);
    expect(r.sc.onEngineClock(lease(5_000_000)).expiresAt).toBe(5_000_000 - 3_600_000);
  });

  it('measures again in the background once the last measurement is REMEASURE_MS old, and only once at a time', async () => {
    const r = rig(1_000);
    await r.sc.sync();
    expect(r.calls()).toBe(1);
    r.sc.onEngineClock(lease(0));
    expect(r.calls()).toBe(1); // fresh: not measured again
    r.setSkew(-2_000); // the engine's clock was stepped
    await r.clock.advance(REMEASURE_MS);
    const first = r.sc.onEngineClock(lease(10_000));
    expect(first.expiresAt).toBe(9_000); // judged on the old offset this time
    r.sc.onEngineClock(lease(10_000));
    expect(r.calls()).toBe(2); // one background measurement, not two
    await r.sc.sync(); // joins the one in flight
    expect(r.calls()).toBe(2);
    expect(r.sc.offsetMs).toBe(-2_000);
    expect(r.sc.onEngineClock(lease(10_000)).expiresAt).toBe(12_000);
  });

  it('keeps the last offset when the store cannot be reached', async () => {
    const r = rig(500);
    await r.sc.sync();
    r.setFail(true);
    await r.clock.advance(REMEASURE_MS);
    r.sc.onEngineClock(lease(0));
    await r.sc.sync();
    expect(r.sc.offsetMs).toBe(500);
  });

  it('a store without a clock is never asked and leases pass unchanged', async () => {
    const clock = new ManualClock(0);
    const sc = new StoreClock({ store: {}, clock });
    await sc.sync();
    const l = lease(42);
    expect(sc.onEngineClock(l)).toBe(l);
  });
});
