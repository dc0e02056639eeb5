/**
 * A step's execution, once the turn context ({@link TurnContextImpl}, context.ts) has validated it,
 * matched it against the recorded calls and reserved its record slot: the flow limit, the tries
 * with their timeout and retries, and the record of the result or the failure. One runner per
 * context; the context keeps the seq, the replay check and the slots.
 */
import type { AsyncLocalStorage } from 'node:async_hooks';
import { TurnlogError, invalidArgument, isRetryAfterError } from '../errors.js';
import type { Payload, RetryPolicy } from '../history/events.js';
import { errorToFailure } from '../history/failure.js';
import type { PayloadConverter } from '../history/payload.js';
import type { StepFn } from '../workflow/context.js';
import { isStringList } from '../workflow/define-workflow.js';
import { backoffDelay } from './backoff.js';
import { encodeFor } from './encode.js';
import type { TurnHost, TurnSpec } from './host.js';

// Which step's fn is running, so ctx.idempotencyKey() inside it (and its retries, and parallel
// steps) names that step through the fn's awaits (test: test/workflow/idempotency-key.test.ts).
// Loaded by the first step, not at import (node:async_hooks is unverified in startup snapshots),
// and synchronously where Node has getBuiltinModule (≥ 20.16): a snapshot-restored process never
// settles a dynamic import() (test: test/examples/startup-snapshot.test.ts).
type StepScope = AsyncLocalStorage<{ ctx: object; seq: number }>;
let runningStep: StepScope | undefined;
async function stepScope(): Promise<StepScope> {
  const builtin = (process as { getBuiltinModule?: (id: string) => unknown }).getBuiltinModule;
  const hooks = builtin ? (builtin('node:async_hooks') as typeof import('node:async_hooks')) : await import('node:async_hooks');
  return (runningStep ??= new hooks.AsyncLocalStorage());
}

/** The step whose fn is running here (its context and seq), if any. */
export function runningStepOf(): { ctx: object; seq: number } | undefined {
  return runningStep?.getStore();
}

/** A reserved record slot (TurnContextImpl's #reserve): `record` must be called exactly once. */
export type Slot = { record<T, R = T>(write: () => Promise<T>, then?: (v: T) => R): Promise<R> };
/** Which flow limit a step waited for, and how long. */
type Limited = { limit: string; waitedMs: number };
/** The turn context as its steps see it: the context itself (the step scope names it), its ids and signal. */
type StepTurn = { readonly taskId: string; readonly turn: number; readonly signal: AbortSignal };

export class StepRunner {
  readonly #ctx: StepTurn;
  readonly #host: TurnHost;
  readonly #converter: PayloadConverter;
  readonly #spec: TurnSpec;

  constructor(ctx: StepTurn, host: TurnHost, converter: PayloadConverter, spec: TurnSpec) {
    this.#ctx = ctx;
    this.#host = host;
    this.#converter = converter;
    this.#spec = spec;
  }

  // The same ranges as the workflow's `retry` (defineWorkflow): a NaN maxAttempts never stopped
  // retrying. Read before a seq is taken, so a refusal (or a getter's throw) takes no slot.
  checkRetry(name: string, retry: Partial<RetryPolicy>): void {
    const at = `Task ${this.#ctx.taskId}, turn ${this.#ctx.turn}: step "${String(name)}" retry`;
    const bad = (field: string, v: unknown, min: number, max: number, what = 'a number'): TurnlogError =>
      invalidArgument(`${at}.${field} must be ${what} from ${min} to ${max}, got ${String(v)}.`);
    const max = retry.maxAttempts;
    if (max !== undefined && !(Number.isInteger(max) && max >= 1 && max <= 1000)) throw bad('maxAttempts', max, 1, 1000, 'an integer');
    if (retry.nonRetryableTypes !== undefined && !isStringList(retry.nonRetryableTypes)) {
      throw invalidArgument(`${at}.nonRetryableTypes must be an array of error type names (e.g. ['RateLimitError']), got ${String(retry.nonRetryableTypes)}.`);
    }
    const jitter = retry.jitter;
    if (jitter !== undefined && !(typeof jitter === 'number' && jitter >= 0 && jitter <= 1)) throw bad('jitter', jitter, 0, 1);
  }

  /**
   * Runs the step at `seq`, its slot reserved, to its record. Not an async function: a first try
   * that returns a plain value (no limit, no timeout) is recorded with one reaction that also
   * releases the slot and returns the value, where the async function, its await and the slot's
   * release made three promises (each runs the step scope's async hooks). Anything else goes on
   * in {@link #tries}.
   */
  run<T>(name: string, fn: StepFn<T>, seq: number, slot: Slot, retry: Partial<RetryPolicy> | undefined, ms: number | undefined, limit: string | undefined, started: number): Promise<T> {
    const scope = runningStep;
    if (limit !== undefined || ms !== undefined || scope === undefined) return this.#tries(name, fn, seq, slot, retry, ms, limit, started, undefined);
    let out: T | PromiseLike<T>;
    try {
      out = scope.run({ ctx: this.#ctx, seq }, () => (takesNothing(fn) ? (fn as () => T | Promise<T>)() : fn(this.#ctx.signal)));
      // Reading `then` may throw too (a proxy): that try failed, as an await of it would have.
      const then = thenOf(out);
      if (then !== undefined) return this.#tries(name, fn, seq, slot, retry, ms, limit, started, { out: once(out as PromiseLike<T>, then) });
    } catch (err) {
      return this.#tries(name, fn, seq, slot, retry, ms, limit, started, { err });
    }
    let result: Payload;
    try {
      result = encodeFor(this.#converter, out, 'stepResult', `Task ${this.#ctx.taskId}, turn ${this.#ctx.turn}, step "${name}" result`);
    } catch (err) {
      return this.#failed(slot, seq, name, started, undefined, err);
    }
    // Return what a replay would return, so the first run and later attempts see the same value.
    return slot.record(
      () => this.#host.record({ kind: 'step', seq, name, result, durationMs: this.#host.now() - started }),
      () => this.#converter.fromPayload<T>(result),
    );
  }

  /** Records a step's failure, then rethrows it. */
  async #failed(slot: Slot, seq: number, name: string, started: number, limited: Limited | undefined, err: unknown): Promise<never> {
    const failure = errorToFailure(err);
    await slot.record(() => this.#host.record({ kind: 'step', seq, name, failure, durationMs: this.#host.now() - started, ...limited }));
    throw err;
  }

  /**
   * A step's tries from its flow-limit slot on, with retries; `first` is the first try's outcome
   * when {@link run} ran it already (a thenable, or what it threw).
   */
  async #tries<T>(
    name: string,
    fn: StepFn<T>,
    seq: number,
    slot: Slot,
    retry: Partial<RetryPolicy> | undefined,
    timeoutMs: number | undefined,
    limit: string | undefined,
    started: number,
    first: { out?: PromiseLike<T>; err?: unknown } | undefined,
  ): Promise<T> {
    const ctx = this.#ctx;
    // With a limit: which one and how long the step waited for it, recorded with the step.
    let limited: Limited | undefined;
    if (limit !== undefined) {
      try {
        limited = { limit, waitedMs: this.#host.acquire ? await this.#host.acquire(limit, seq, ctx.signal) : 0 };
      } catch (err) {
        limited = { limit, waitedMs: this.#host.now() - started };
        return this.#failed(slot, seq, name, started, limited, err);
      }
      started = this.#host.now();
    }
    let scope: StepScope;
    let policy: RetryPolicy;
    try {
      scope = runningStep ?? (await stepScope());
      // Spreading the step's retry options runs its getters: what they throw fails the step, recorded.
      policy = retry === undefined ? this.#spec.stepRetry : { ...this.#spec.stepRetry, ...retry };
    } catch (err) {
      return this.#failed(slot, seq, name, started, limited, err);
    }
    let value: T;
    for (let attempt = 1; ; attempt++) {
      try {
        let out: T | PromiseLike<T> | undefined;
        let pending: PromiseLike<T> | undefined;
        if (first !== undefined) {
          if ('err' in first) throw first.err;
          pending = first.out;
        } else {
          out = scope.run({ ctx, seq }, () => (timeoutMs === undefined ? (takesNothing(fn) ? (fn as () => T | Promise<T>)() : fn(ctx.signal)) : this.#withTimeout(name, fn, timeoutMs)));
          const then = thenOf(out);
          if (then !== undefined) pending = once(out as PromiseLike<T>, then);
        }
        first = undefined;
        // A fn that returned a plain value is not awaited: two promises less, each one running the scope's hooks.
        value = pending !== undefined ? await pending : (out as T);
        break;
      } catch (err) {
        first = undefined;
        if (attempt >= policy.maxAttempts || !isRetryable(err, policy) || ctx.signal.aborted) return this.#failed(slot, seq, name, started, limited, err);
        // A server's suggested delay (RetryAfterError) wins over the backoff, uncapped and unjittered.
        const delay = isRetryAfterError(err) ? err.retryAfterMs : backoffDelay(policy, attempt, this.#host.random?.() ?? Math.random());
        try {
          await this.#host.sleep(delay, ctx.signal);
        } catch {
          return this.#failed(slot, seq, name, started, limited, err);
        }
      }
    }
    let result: Payload;
    try {
      result = encodeFor(this.#converter, value, 'stepResult', `Task ${ctx.taskId}, turn ${ctx.turn}, step "${name}" result`);
    } catch (err) {
      return this.#failed(slot, seq, name, started, limited, err);
    }
    await slot.record(() => this.#host.record({ kind: 'step', seq, name, result, durationMs: this.#host.now() - started, ...limited }));
    // Return what a replay would return, so the first run and later attempts see the same value.
    return this.#converter.fromPayload<T>(result);
  }

  /** One try of a step's fn under its own signal, which aborts (and the try fails) after `ms`. */
  async #withTimeout<T>(name: string, fn: StepFn<T>, ms: number): Promise<T> {
    const signal = this.#ctx.signal;
    const c = new AbortController();
    const stop = (): void => c.abort(signal.reason);
    signal.addEventListener('abort', stop, { once: true });
    const timedOut = this.#host.sleep(ms, c.signal).then(() => {
      const err = new TurnlogError('TURNLOG_STEP_TIMED_OUT', `Task ${this.#ctx.taskId}, turn ${this.#ctx.turn}: step "${name}" took longer than its timeoutMs ${ms}. Raise timeoutMs, or make the step honour its signal.`);
      c.abort(err);
      throw err;
    });
    try {
      return await Promise.race([Promise.resolve().then(() => fn(c.signal)), timedOut]);
    } finally {
      signal.removeEventListener('abort', stop);
      if (!c.signal.aborted) c.abort();
      timedOut.catch(() => undefined);
    }
  }
}

function isRetryable(err: unknown, policy: RetryPolicy): boolean {
  try {
    return retryable(err, policy);
  } catch {
    return false; // a value whose inspection throws (a hostile Proxy) is not retried, but recorded
  }
}

function retryable(err: unknown, policy: RetryPolicy): boolean {
  if (typeof err !== 'object' || err === null) return true;
  const e = err as { nonRetryable?: unknown; type?: unknown; name?: unknown; code?: unknown };
  if (e.nonRetryable === true) return false;
  if (e.code === 'TURNLOG_FENCED' || e.code === 'TURNLOG_NON_DETERMINISM') return false;
  const type = typeof e.type === 'string' ? e.type : typeof e.name === 'string' ? e.name : '';
  return !policy.nonRetryableTypes.includes(type);
}

// `() => …` (or `async () => …`) reads no argument: an arrow has no `arguments` of its own, and
// its source says it declares none (rest and default parameters have length 0 too, hence the
// source). Such a fn is not handed the turn's signal, which Node 20 builds in 3.4-5 µs at its
// first read (one-step turns at 100 in flight: 86.5 -> 77 µs of main-thread CPU; docs/decisions.md).
const NO_PARAMETER_ARROW = /^(?:async\s*)?\(\s*\)\s*=>/;
const fnSource = Function.prototype.toString;
function takesNothing(fn: (...args: never[]) => unknown): boolean {
  return fn.length === 0 && NO_PARAMETER_ARROW.test(fnSource.call(fn));
}

type Then = (this: unknown, onFulfilled: (v: unknown) => void, onRejected: (err: unknown) => void) => unknown;

/** `v`'s `then` if it is a function (a thenable), read once, as Promises/A+ does (2.3.3.1); a throw is the try's. */
function thenOf(v: unknown): Then | undefined {
  if ((typeof v !== 'object' && typeof v !== 'function') || v === null) return undefined;
  const then = (v as { then?: unknown }).then;
  return typeof then === 'function' ? (then as Then) : undefined;
}

/**
 * `v` to await with `then` (thenOf's read) as its only read: a native promise as it is (await
 * reads no `then` of one: no promise added on a step's path), any other thenable behind an object
 * whose `then` calls that function on it, so the await does not read the thenable's again.
 */
function once<T>(v: PromiseLike<T>, then: Then): PromiseLike<T> {
  if (Object.getPrototypeOf(v) === Promise.prototype) return v;
  return { then: (onFulfilled: (v: unknown) => void, onRejected: (err: unknown) => void) => then.call(v, onFulfilled, onRejected) } as unknown as PromiseLike<T>;
}
