/**
 * Flow limits (docs/time.md#flow-limits): named caps on the steps that call a rate-limited
 * service, shared by every task of an engine. A step with `{ limit }` takes a slot (concurrency)
 * and a token (rate) before it runs and gives the slot back when its record arrives or its
 * attempt ends. The rate is a GCRA (a token bucket kept as one time, `tat`), so a store can
 * share it as one row; the local limiter keeps it in memory on the engine's clock.
 */
import { TurnlogError, invalidArgument } from '../errors.js';
import type { FlowLimitStore } from '../store/history-store.js';
import { sleep, type Clock, type Timer } from './clock.js';

/** One named limit of `EngineOptions.flowLimits`. */
export interface FlowLimit {
  /** At most this many steps under the limit run at once (across all tasks of the engine, or of the store's engines). */
  concurrency?: number;
  /** At most this many steps start per second, on average. */
  perSecond?: number;
  /** Starts allowed back to back after a quiet spell (the bucket's size). Default: `perSecond` rounded up. */
  burst?: number;
}

/** A limit after validation: Infinity where the option was left out. */
export interface ResolvedLimit {
  readonly concurrency: number;
  /** ms between starts at the steady rate (0: no rate). */
  readonly intervalMs: number;
  /** How far ahead of now the bucket's time may run: (burst - 1) intervals. */
  readonly toleranceMs: number;
}

/** A slot and token taken; `release` gives the slot back (idempotent). */
export interface LimitGrant {
  readonly waitedMs: number;
  release(): void;
}

/** Takes slots and tokens: in memory ({@link LocalLimiter}) or in a shared store. */
export interface Limiter {
  /**
   * Resolves once the step may run; rejects with the signal's reason, or TURNLOG_LIMIT_UNKNOWN.
   * `onLost`: a shared limiter calls it if the slot may have expired in the store while held (its
   * renewals failed for `leaseMs`); the slot no longer counts, so the step must stop.
   */
  acquire(name: string, signal: AbortSignal, at: string, onLost?: () => void): Promise<LimitGrant>;
  /** Stops timers and rejects waiters (engine shutdown). */
  close(): void;
}

export function resolveFlowLimits(given: Readonly<Record<string, FlowLimit>> | undefined): ReadonlyMap<string, ResolvedLimit> {
  const out = new Map<string, ResolvedLimit>();
  if (given === undefined) return out;
  if (typeof given !== 'object' || given === null) throw invalidArgument('flowLimits must be an object of named limits, e.g. { openai: { concurrency: 8, perSecond: 5 } }.');
  for (const [name, l] of Object.entries(given)) {
    const at = `flowLimits.${name}`;
    if (typeof l !== 'object' || l === null) throw invalidArgument(`${at} must be { concurrency?, perSecond?, burst? }, got ${String(l)}.`);
    for (const key of Object.keys(l)) if (!['concurrency', 'perSecond', 'burst'].includes(key)) throw invalidArgument(`${at}.${key} is not a flow limit option; use concurrency, perSecond, burst.`);
    if (l.concurrency === undefined && l.perSecond === undefined) throw invalidArgument(`${at} needs concurrency, perSecond or both.`);
    if (l.concurrency !== undefined && !(Number.isInteger(l.concurrency) && l.concurrency >= 1)) throw invalidArgument(`${at}.concurrency must be a positive integer, got ${String(l.concurrency)}.`);
    if (l.perSecond !== undefined && !(typeof l.perSecond === 'number' && Number.isFinite(l.perSecond) && l.perSecond > 0)) throw invalidArgument(`${at}.perSecond must be a finite number > 0, got ${String(l.perSecond)}.`);
    if (l.burst !== undefined && !(Number.isInteger(l.burst) && l.burst >= 1)) throw invalidArgument(`${at}.burst must be a positive integer, got ${String(l.burst)}.`);
    if (l.burst !== undefined && l.perSecond === undefined) throw invalidArgument(`${at}.burst needs perSecond.`);
    const intervalMs = l.perSecond === undefined ? 0 : 1000 / l.perSecond;
    const burst = l.burst ?? Math.max(1, Math.ceil(l.perSecond ?? 1));
    out.set(name, { concurrency: l.concurrency ?? Infinity, intervalMs, toleranceMs: (burst - 1) * intervalMs });
  }
  return out;
}

export function unknownLimit(name: string, at: string, known: Iterable<string>): TurnlogError {
  const names = [...known].join(', ') || '(none)';
  return new TurnlogError('TURNLOG_LIMIT_UNKNOWN', `${at}: flow limit "${name}" is not configured on this engine (it has: ${names}). Add it to Engine.open({ flowLimits }) on every engine that runs this workflow, or fix the name.`);
}

/**
 * GCRA: may a start happen at `now` given the bucket's time `tat`? Returns the new `tat` when it
 * may, or how long to wait (ms, rounded up so a timer that fires is never a hair early).
 */
export function gcra(limit: ResolvedLimit, tat: number, now: number): { tat: number } | { waitMs: number } {
  if (limit.intervalMs === 0) return { tat };
  const allowedAt = tat - limit.toleranceMs;
  if (now + 1e-6 < allowedAt) return { waitMs: Math.max(1, Math.ceil(allowedAt - now)) };
  return { tat: Math.max(tat, now) + limit.intervalMs };
}

interface Waiter {
  since: number;
  signal: AbortSignal;
  onAbort: () => void;
  resolve(g: LimitGrant): void;
  reject(err: unknown): void;
}

interface Bucket {
  limit: ResolvedLimit;
  inUse: number;
  tat: number;
  queue: Waiter[];
  timer: Timer | undefined;
}

/** One engine's limits, in memory on its clock: first come, first served per limit. */
export class LocalLimiter implements Limiter {
  readonly #clock: Clock;
  readonly #buckets = new Map<string, Bucket>();

  constructor(limits: ReadonlyMap<string, ResolvedLimit>, clock: Clock) {
    this.#clock = clock;
    for (const [name, limit] of limits) this.#buckets.set(name, { limit, inUse: 0, tat: -Infinity, queue: [], timer: undefined });
  }

  acquire(name: string, signal: AbortSignal, at: string): Promise<LimitGrant> {
    const b = this.#buckets.get(name);
    if (!b) return Promise.reject(unknownLimit(name, at, this.#buckets.keys()));
    if (signal.aborted) return Promise.reject(signal.reason);
    return new Promise<LimitGrant>((resolve, reject) => {
      const w: Waiter = {
        since: this.#clock.now(),
        signal,
        resolve,
        reject,
        onAbort: () => {
          const i = b.queue.indexOf(w);
          if (i < 0) return;
          b.queue.splice(i, 1);
          reject(signal.reason);
          this.#pump(b); // the head may have changed
        },
      };
      signal.addEventListener('abort', w.onAbort, { once: true });
      b.queue.push(w);
      this.#pump(b);
    });
  }

  close(): void {
    for (const b of this.#buckets.values()) {
      b.timer?.cancel();
      b.timer = undefined;
      for (const w of b.queue.splice(0)) {
        w.signal.removeEventListener('abort', w.onAbort);
        w.reject(new TurnlogError('TURNLOG_ENGINE_CLOSED', 'The engine closed while a step waited for its flow limit.'));
      }
    }
  }

  /** In use and waiting, per limit (tests, inspection). */
  usage(name: string): { inUse: number; waiting: number } | undefined {
    const b = this.#buckets.get(name);
    return b && { inUse: b.inUse, waiting: b.queue.length };
  }

  #pump(b: Bucket): void {
    while (b.queue.length > 0 && b.inUse < b.limit.concurrency) {
      const now = this.#clock.now();
      const r = gcra(b.limit, b.tat, now);
      if ('waitMs' in r) {
        if (!b.timer) {
          b.timer = this.#clock.setTimer(() => {
            b.timer = undefined;
            this.#pump(b);
          }, r.waitMs);
        }
        return;
      }
      b.tat = r.tat;
      b.inUse++;
      const w = b.queue.shift()!;
      w.signal.removeEventListener('abort', w.onAbort);
      let released = false;
      w.resolve({
        waitedMs: now - w.since,
        release: () => {
          if (released) return;
          released = true;
          b.inUse--;
          this.#pump(b);
        },
      });
    }
  }
}

/** A slot this engine holds in the store. */
interface HeldSlot {
  name: string;
  /** When the request that got or last renewed the slot was sent (engine clock). */
  from: number;
  onLost: (() => void) | undefined;
}

/**
 * Limits shared by every engine of a store with `supports.flowLimits` (PostgreSQL): each acquire
 * is a store transaction; a waiter polls (5 ms growing to 200 ms, or when the rate says); held
 * slots are renewed every leaseMs / 3 (leaseMs / 10 after a failure), so a crashed engine's slots
 * expire after `leaseMs`. A slot cannot expire in the store before `leaseMs` after the request
 * that got or renewed it was sent: at that moment, unrenewed, it is dropped here and its holder
 * told (`onLost`), as a task lease lapses (supervisor.ts), so the engine never counts a slot that
 * another engine may already hold.
 */
export class SharedLimiter implements Limiter {
  readonly #store: FlowLimitStore;
  readonly #limits: ReadonlyMap<string, ResolvedLimit>;
  readonly #clock: Clock;
  readonly #instance: string;
  readonly #leaseMs: number;
  readonly #held = new Map<string, HeldSlot>();
  #renewal: Timer | undefined;
  #watch: Timer | undefined;
  #closed = false;
  #n = 0;

  constructor(store: FlowLimitStore, limits: ReadonlyMap<string, ResolvedLimit>, clock: Clock, instance: string, leaseMs: number) {
    this.#store = store;
    this.#limits = limits;
    this.#clock = clock;
    this.#instance = instance;
    this.#leaseMs = leaseMs;
  }

  async acquire(name: string, signal: AbortSignal, at: string, onLost?: () => void): Promise<LimitGrant> {
    const limit = this.#limits.get(name);
    if (!limit) throw unknownLimit(name, at, this.#limits.keys());
    const slotId = `${this.#instance}/${++this.#n}`;
    const since = this.#clock.now();
    let from: number;
    for (let poll = 5; ; poll = Math.min(200, poll * 2)) {
      signal.throwIfAborted();
      if (this.#closed) throw new TurnlogError('TURNLOG_ENGINE_CLOSED', 'The engine closed while a step waited for its flow limit.');
      from = this.#clock.now();
      const a = await this.#store.acquireSlot({ limit: name, slotId, instance: this.#instance, concurrency: limit.concurrency, intervalMs: limit.intervalMs, toleranceMs: limit.toleranceMs, leaseMs: this.#leaseMs });
      if (a.granted) break;
      await sleep(this.#clock, a.retryInMs ?? poll, signal);
    }
    this.#held.set(slotId, { name, from, onLost });
    this.#renewal ??= this.#clock.setTimer(() => this.#renew(), this.#leaseMs / 3, { background: true });
    this.#watchHeld();
    let released = false;
    return {
      waitedMs: this.#clock.now() - since,
      release: () => {
        if (released) return;
        released = true;
        this.#held.delete(slotId);
        // Best effort: a release that fails leaves the row to expire with its lease.
        this.#store.releaseSlot(name, slotId).catch(() => undefined);
      },
    };
  }

  #renew(): void {
    this.#renewal = undefined;
    if (this.#closed || this.#held.size === 0) return;
    const ids = [...this.#held.keys()];
    const sent = this.#clock.now();
    const next = (ms: number) => {
      if (!this.#closed && this.#held.size > 0) this.#renewal ??= this.#clock.setTimer(() => this.#renew(), ms, { background: true });
    };
    this.#store.renewSlots(this.#instance, ids, this.#leaseMs).then(
      () => {
        for (const id of ids) {
          const h = this.#held.get(id);
          if (h) h.from = Math.max(h.from, sent);
        }
        next(this.#leaseMs / 3);
      },
      // Retried sooner, before the watch would drop the slots.
      () => next(this.#leaseMs / 10),
    );
  }

  /** Drops (and tells the holders of) slots not renewed within leaseMs; re-arms for the next end. */
  #watchHeld(): void {
    if (this.#watch || this.#closed) return;
    let first = Infinity;
    for (const h of this.#held.values()) first = Math.min(first, h.from + this.#leaseMs);
    if (first === Infinity) return;
    this.#watch = this.#clock.setTimer(
      () => {
        this.#watch = undefined;
        const now = this.#clock.now();
        for (const [id, h] of [...this.#held]) {
          if (h.from + this.#leaseMs > now) continue;
          this.#held.delete(id);
          this.#store.releaseSlot(h.name, id).catch(() => undefined);
          try {
            h.onLost?.();
          } catch {
            // The holder's reaction is its own; the other slots are still watched.
          }
        }
        this.#watchHeld();
      },
      Math.max(0, first - this.#clock.now()),
      { background: true },
    );
  }

  close(): void {
    this.#closed = true;
    this.#renewal?.cancel();
    this.#renewal = undefined;
    this.#watch?.cancel();
    this.#watch = undefined;
  }
}
