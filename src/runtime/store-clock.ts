/**
 * The store's clock as seen from the engine's (DESIGN invariant 12: lease time is the store's).
 * A shared store keeps lease expiry on its own clock (`LeaseStore.databaseNow`); an engine whose
 * clock is behind would otherwise judge another instance's lease live for that much longer, and
 * leave a stopped holder's queued input waiting by the skew. The offset is measured at each
 * recovery pass (and at open), halfway through the round trip, and other instances' leases are
 * rebased onto the engine's clock before the replayer or `nextLease` judges them. The store's own
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

export class StoreClock {
  readonly #rt: Clocks;
  /** The store's clock minus the engine's, ms (0 until measured, and for a store without one). */
  offsetMs = 0;

  constructor(rt: Clocks) {
    this.#rt = rt;
  }

  /** Measures the offset again; a failure keeps the last one (the next pass tries again). */
  async sync(): Promise<void> {
    const { store, clock } = this.#rt;
    if (!store.databaseNow) return;
    const before = clock.now();
    try {
      const db = await store.databaseNow();
      this.offsetMs = db - (before + clock.now()) / 2;
    } catch {
      // Kept: an unreachable store fails the pass's own calls too.
    }
  }

  /** `lease` with its expiry on the engine's clock. */
  onEngineClock(lease: Lease): Lease {
    return this.offsetMs === 0 ? lease : { ...lease, expiresAt: lease.expiresAt - this.offsetMs };
  }
}
