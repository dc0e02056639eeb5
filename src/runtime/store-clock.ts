/**
 * The store's clock as seen from the engine's (DESIGN invariant 12: lease time is the store's).
 * A shared store keeps lease expiry on its own clock (`LeaseStore.databaseNow`); an engine whose
 * clock is behind would otherwise judge another instance's lease live for that much longer, and
 * leave a stopped holder's queued input waiting by the skew. The offset is measured at each
 * recovery pass (and at open), halfway through the round trip, and again in the background when
 * a foreign lease is judged on a measurement older than {@link REMEASURE_MS} (so an engine with no
 * periodic scan, `scanIntervalMs: 0`, follows a clock that is stepped later); other instances'
 * leases are rebased onto the engine's clock before the replayer or `nextLease` judges them. The store's own
 * check stays the arbiter: a lease the estimate calls expired too early is refused with
 * LeaseHeldError, and the driver waits and looks again.
 */
import type { Lease } from '../history/events.js';
import type { LeaseStore } from '../store/history-store.js';
import type { Clock } from './clock.js';

/** The engine's store and clock, read at each use (the store is set at activation). */
interface Clocks {
  readonly store: Pick<LeaseStore, 'databaseNow'>;
  readonly clock: Clock;
}

/** How old a measured offset may be before judging a foreign lease measures it again (in the background). */
export const REMEASURE_MS = 30_000;

export class StoreClock {
  readonly #rt: Clocks;
  /** The store's clock minus the engine's, ms (0 until measured, and for a store without one). */
  offsetMs = 0;
  /** When the last measurement started, on the engine's clock (-Infinity: never). */
  #measuredAt = Number.NEGATIVE_INFINITY;
  #measuring: Promise<void> | undefined;

  constructor(rt: Clocks) {
    this.#rt = rt;
  }

  /** Measures the offset again; a failure keeps the last one (the next pass tries again). */
  sync(): Promise<void> {
    if (!this.#rt.store.databaseNow) return Promise.resolve();
    this.#measuring ??= this.#measure().finally(() => (this.#measuring = undefined));
    return this.#measuring;
  }

  async #measure(): Promise<void> {
    const { store, clock } = this.#rt;
    const before = clock.now();
    this.#measuredAt = before;
    try {
      const db = await store.databaseNow!();
      this.offsetMs = db - (before + clock.now()) / 2;
    } catch {
      // Kept: an unreachable store fails the pass's own calls too.
    }
  }

  /** `lease` with its expiry on the engine's clock (by the last measured offset; a stale one is measured again for next time). */
  onEngineClock(lease: Lease): Lease {
    if (this.#rt.store.databaseNow && this.#rt.clock.now() - this.#measuredAt >= REMEASURE_MS) void this.sync();
    return this.offsetMs === 0 ? lease : { ...lease, expiresAt: lease.expiresAt - this.offsetMs };
  }
}
