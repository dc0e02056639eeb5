/**
 * Tells a handler that is still working from one that can never finish under replay.
 * Every timer, immediate and I/O request the handler creates (in its async context) is
 * tracked until it has run; a handler that is unsettled and owns none of these for a few
 * event-loop turns, with nothing left to deliver, is stalled (docs/testing.md#replays-that-cannot-finish).
 */
import { AsyncLocalStorage, createHook, type AsyncHook } from 'node:async_hooks';

/** Event-loop turns (check phases) with nothing pending before a handler counts as stalled. */
const QUIET_ROUNDS = 3;
/**
 * And this long in real time: work the handler waits on but did not create in its own context
 * (a dynamic `import()` served by a test runner's module RPC, as in vitest) is short, not a stall.
 */
export const QUIET_MS = 1000;
/** How often to look again while the handler owns a timer or an I/O request. */
const BUSY_POLL_MS = 2;

/** What one handler run owns: timers (pending until `_destroyed`), requests, other resources. */
interface Owned {
  timers: Set<{ _destroyed?: boolean }>;
  requests: Set<number>;
  /** Handles (sockets, file handles, ports): their end is not observable without a destroy hook. */
  handles: number;
}

// One callback each: done once it ran (`before`). A `destroy` hook would see every resource's
// end, but it makes every promise ~10× slower (weak callbacks), so timers are checked by flag.
const REQUESTS: ReadonlySet<string> = new Set([
  'FSREQCALLBACK',
  'FSREQPROMISE',
  'FILEHANDLECLOSEREQ',
  'GETADDRINFOREQWRAP',
  'GETNAMEINFOREQWRAP',
  'QUERYWRAP',
  'SHUTDOWNWRAP',
  'WRITEWRAP',
  'TCPCONNECTWRAP',
  'PIPECONNECTWRAP',
  'UDPSENDWRAP',
]);

const scope = new AsyncLocalStorage<Owned>();
/** Request asyncId → the handler run that created it. */
const owners = new Map<number, Owned>();
let hook: AsyncHook | undefined;
let users = 0;

/**
 * Runs `fn` (a whole replay) with resource tracking on. Enabled per replay, not per turn:
 * enabling costs more than a turn's replay, and while on, every promise pays a hook call.
 */
export async function withSettleTracking<T>(fn: () => Promise<T>): Promise<T> {
  acquireHook();
  try {
    return await fn();
  } finally {
    releaseHook();
  }
}

function acquireHook(): void {
  if (users++ > 0) return;
  hook ??= createHook({
    init(asyncId, type, _trigger, resource) {
      // Promises only settle through something else; ticks run before the next check anyway.
      if (type === 'PROMISE' || type === 'TickObject') return;
      const owned = scope.getStore();
      if (owned === undefined) return;
      if (type === 'Timeout' || type === 'Immediate') owned.timers.add(resource as { _destroyed?: boolean });
      else if (REQUESTS.has(type)) {
        owned.requests.add(asyncId);
        owners.set(asyncId, owned);
      } else owned.handles++;
    },
    before(asyncId) {
      const owned = owners.get(asyncId);
      if (owned === undefined) return;
      owned.requests.delete(asyncId);
      owners.delete(asyncId);
    },
  });
  hook.enable();
}

function releaseHook(): void {
  if (--users > 0) return;
  hook?.disable();
  owners.clear();
}

export interface SettleWatchOptions {
  /**
   * Called on every check (`quiet`: the handler owns no pending timer or I/O): true when it
   * delivered something to the handler (a recorded abort), which may let it go on.
   */
  onCheck: (quiet: boolean) => boolean;
  onStall: () => void;
  /** Backstop in ms (0: none); in-process it cannot stop a handler that blocks the thread. */
  timeoutMs: number;
  onTimeout: () => void;
}

/** Watches one handler run (inside {@link withSettleTracking}); `run` executes it in the tracked scope. Call `stop` when it settles. */
export class SettleWatch {
  readonly #owned: Owned = { timers: new Set(), requests: new Set(), handles: 0 };
  readonly #o: SettleWatchOptions;
  #timer: NodeJS.Timeout | undefined;
  #backstop: NodeJS.Timeout | undefined;
  #immediate: NodeJS.Immediate | undefined;
  #quiet = 0;
  #quietSince = 0;
  #stopped = false;

  constructor(options: SettleWatchOptions) {
    this.#o = options;
    // Scheduled outside the handler's scope, so the watch never counts itself as the handler's work.
    this.#schedule();
    if (options.timeoutMs > 0) this.#backstop = setTimeout(() => this.#fire(options.onTimeout), options.timeoutMs);
  }

  run<T>(fn: () => T): T {
    return scope.run(this.#owned, fn);
  }

  stop(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    clearTimeout(this.#timer);
    clearTimeout(this.#backstop);
    if (this.#immediate) clearImmediate(this.#immediate);
    for (const id of this.#owned.requests) owners.delete(id);
    this.#owned.requests.clear();
    this.#owned.timers.clear();
  }

  #fire(callback: () => void): void {
    if (this.#stopped) return;
    this.stop();
    callback();
  }

  /** The handler owns something that can still call it back. */
  #busy(): boolean {
    const o = this.#owned;
    for (const t of o.timers) if (t._destroyed === true) o.timers.delete(t);
    return o.timers.size > 0 || o.requests.size > 0 || o.handles > 0;
  }

  #schedule(): void {
    if (this.#stopped) return;
    if (this.#busy()) this.#timer = setTimeout(() => this.#check(), BUSY_POLL_MS);
    else this.#immediate = setImmediate(() => this.#check());
  }

  #check(): void {
    this.#timer = undefined;
    this.#immediate = undefined;
    if (this.#stopped) return;
    const quiet = !this.#busy();
    if (this.#o.onCheck(quiet) || !quiet) this.#quiet = 0;
    else {
      if (this.#quiet++ === 0) this.#quietSince = performance.now();
      if (this.#quiet >= QUIET_ROUNDS) {
        const left = QUIET_MS - (performance.now() - this.#quietSince);
        if (left <= 0) return this.#fire(this.#o.onStall);
        // Wait out the rest on a timer (immediates would spin the CPU), then look again.
        this.#timer = setTimeout(() => this.#check(), left);
        return;
      }
    }
    this.#schedule();
  }
}
