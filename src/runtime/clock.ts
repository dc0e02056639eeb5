/**
 * Time source for the engine: every deadline, lease and timer reads it, so tests can drive
 * time with {@link ManualClock} instead of waiting (see turnlog/testing).
 */
export interface Timer {
  cancel(): void;
}

export interface TimerOptions {
  /** Do not keep the process alive for this timer (idle housekeeping such as the scanner). */
  background?: boolean;
}

export interface Clock {
  now(): number;
  /** Calls `fn` once `ms` have passed on this clock. */
  setTimer(fn: () => void, ms: number, options?: TimerOptions): Timer;
}

/**
 * Wall-clock time and real timers. Timers of running turns keep the process alive, so a turn's
 * timeout always fires (test: crash matrix); background timers do not.
 */
export const systemClock: Clock = {
  now: () => Date.now(),
  setTimer(fn, ms, options) {
    const at = Date.now() + Math.max(0, ms);
    let t: NodeJS.Timeout;
    // Node's setTimeout fires at once (with a warning) past 2^31-1 ms (~24.8 days): a long
    // sleep or a far deliverAt would fire early. Wait in chunks and re-arm until due.
    const arm = (): void => {
      const left = at - Date.now();
      if (left > MAX_TIMEOUT_MS) {
        t = setTimeout(arm, MAX_TIMEOUT_MS);
      } else {
        t = setTimeout(fn, Math.max(0, left));
      }
      if (options?.background) t.unref();
    };
    arm();
    return { cancel: () => clearTimeout(t) };
  },
};

/** The longest delay Node's setTimeout honours (2^31-1 ms). */
export const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/** Resolves after `ms` on `clock`, or rejects with the signal's reason when it aborts. */
export function sleep(clock: Clock, ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      timer.cancel();
      reject(signal!.reason);
    };
    const timer = clock.setTimer(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * A clock that moves only when told. `advance(ms)` fires due timers in deadline order and
 * lets the promise jobs they start run between timers, like real time would.
 */
export class ManualClock implements Clock {
  #now: number;
  #seq = 0;
  #timers = new Map<number, { at: number; fn: () => void }>();

  constructor(start = Date.UTC(2026, 0, 1)) {
    this.#now = start;
  }

  now(): number {
    return this.#now;
  }

  setTimer(fn: () => void, ms: number): Timer {
    const id = ++this.#seq;
    this.#timers.set(id, { at: this.#now + Math.max(0, ms), fn });
    return { cancel: () => this.#timers.delete(id) };
  }

  /** Number of timers waiting to fire. */
  get pendingTimers(): number {
    return this.#timers.size;
  }

  /** Moves time forward by `ms`, firing every timer that falls due, in order. */
  async advance(ms: number): Promise<void> {
    const target = this.#now + ms;
    for (;;) {
      await settle();
      let next: [number, { at: number; fn: () => void }] | undefined;
      for (const entry of this.#timers) {
        if (entry[1].at <= target && (!next || entry[1].at < next[1].at)) next = entry;
      }
      if (!next) break;
      this.#timers.delete(next[0]);
      this.#now = Math.max(this.#now, next[1].at);
      next[1].fn();
    }
    this.#now = target;
    await settle();
  }
}

// Lets pending promise jobs and I/O callbacks run (store writes complete on the event loop).
async function settle(): Promise<void> {
  for (let i = 0; i < 3; i++) await new Promise<void>((r) => setImmediate(r));
}
