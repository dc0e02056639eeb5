/**
 * The turn context a handler receives: the authoring API (TurnContext and what a turn returns).
 * Its one implementation, TurnContextImpl, lives in src/attempt/ with the contract that inline,
 * process and replay executors share (TurnSpec, TurnHost, AttemptOutcome).
 */
import type { EntryMode, RetryPolicy } from '../history/events.js';
import type { Workflow } from './define-workflow.js';
import type { JsonValue, PayloadMode, Payloadable } from './json.js';

export interface StepOptions {
  /** Overrides the workflow's step retry policy for this step. */
  retry?: Partial<RetryPolicy>;
  /**
   * Each try of `fn` may take this long (engine clock): then its signal aborts and the try fails
   * with TURNLOG_STEP_TIMED_OUT, retried like any error. docs/time.md#step-timeouts-and-retry-after
   */
  timeoutMs?: number;
  /**
   * A flow limit of the engine (`Engine.open({ flowLimits })`): the step waits for one of its
   * slots and a rate token before its first try, and holds the slot until it is recorded.
   * The wait is recorded (`StepCompleted.waitedMs`). docs/time.md#flow-limits
   */
  limit?: string;
}

/** A step's function. */
export type StepFn<T> = (signal: AbortSignal) => Promise<T> | T;

/**
 * What a turn handler sees. Everything it records is durable before the call returns.
 * `P` is the workflow's payload mode: with `json` (default) step results and checkpoints must
 * be JSON data (`Json<T>`); `custom` lifts that for an engine with a `payloadConverter`.
 */
export interface TurnContext<I = unknown, S = unknown, P extends PayloadMode = 'json'> {
  readonly taskId: string;
  readonly workflow: string;
  /** 1, 2, … per task. */
  readonly turn: number;
  /** 1 on the first run of a turn; higher after crashes or exits for recovery. */
  readonly attempt: number;
  readonly inputId: string;
  readonly input: I;
  /** `fresh` (first turn), `resumed` (later turns), `recovered` (a re-run of an interrupted turn). */
  readonly entryMode: EntryMode;
  /** The input came from the steering queue (sent while an earlier turn ran). */
  readonly steered: boolean;
  /** Recovered attempts over the task's life. */
  readonly recoveryCount: number;
  /** Durable per-task state: read it, change it; it is committed when the turn completes or suspends. */
  state: S;
  /** Aborts on timeout, cancel or engine shutdown; pass it to fetch() and model clients. */
  readonly signal: AbortSignal;
  readonly timeoutExceeded: boolean;
  readonly cancelRequested: boolean;
  readonly shutdownRequested: boolean;
  /** Inputs queued for this task right now (live). */
  readonly pendingInputCount: number;
  /** When the turn's cooperative cancel fires (ms since epoch). */
  readonly deadline: number;
  /** The latest checkpoint of this turn (from this or an earlier attempt), or undefined. */
  readonly checkpointData: unknown;
  /**
   * Runs `fn` once and records its result; a later attempt gets the recorded result back
   * without running it. A different name or order than recorded → NonDeterminismError.
   */
  step<T>(name: string, fn: StepFn<T> & StepFn<Payloadable<NoInfer<T>, P>>, options?: StepOptions): Promise<T>;
  /** For generic code: a result type bounded by `JsonValue` (`<T extends JsonValue>`) is JSON too. */
  step<T extends JsonValue>(name: string, fn: StepFn<T>, options?: StepOptions): Promise<T>;
  /**
   * A key for an external API's idempotency header: the same on every attempt and retry of the
   * same step of the same turn, different for every other step, turn, task or `name`. Inside a
   * step's `fn` it is that step's key; elsewhere, the key of the next step. docs/workflows.md#idempotency-keys
   * @example await ctx.step('refund', () => payments.refund(order, { idempotencyKey: ctx.idempotencyKey('refund') }));
   */
  idempotencyKey(name?: string): string;
  /** Records `data` so a later attempt of this turn can read it as `checkpointData`. */
  checkpoint<T>(data: T & Payloadable<NoInfer<T>, P>): Promise<void>;
  checkpoint(data: JsonValue): Promise<void>;
  /**
   * Takes every queued (steering) input into this turn, recorded; returns their values in order.
   * With `wait: true` it first waits for at least one input (or the signal); a later attempt
   * gets the recorded inputs back without waiting, so the pattern is replay-safe. With
   * `timeoutMs` the wait gives up after that long and the call returns `[]` (recorded too).
   * @example const more = await ctx.takeInputs<string>({ wait: true, timeoutMs: 60_000 }); // [] after a minute
   */
  takeInputs<T = I>(options?: { wait?: boolean; timeoutMs?: number }): Promise<T[]>;
  /**
   * Streams `chunk` (model tokens, progress) to the task's readers (`task.stream()`), now. Not
   * recorded: never blocks the turn, lost on a crash, not replayed (docs/streaming.md). A JSON
   * value of at most 1 MiB; throws TURNLOG_PAYLOAD_ENCODING or TURNLOG_PAYLOAD_TOO_LARGE otherwise.
   * @example for await (const token of model.stream(prompt)) ctx.emit({ token });
   */
  emit<T>(chunk: T & Payloadable<NoInfer<T>, P>): void;
  emit(chunk: JsonValue): void;
  /**
   * Versioning (docs/versioning.md): true when this turn takes the new branch of patch `patchId`.
   * A turn that runs it for the first time records a marker and gets true; a turn replaying a
   * history recorded before the patch existed (no marker at this position) gets false, so it
   * keeps the old branch. The same answer for every call with the same id within an attempt.
   * @example if (await ctx.patched('refund-v2')) await ctx.step('refund', refundV2); else await ctx.step('refund', refundV1);
   */
  patched(patchId: string): Promise<boolean>;
  /**
   * The cleanup step after `patched(patchId)`: the old branch is gone from the code. Records the
   * same marker for new turns (so code that still has `patched(patchId)` can replay them), and
   * accepts histories with or without it.
   */
  deprecatePatch(patchId: string): Promise<void>;
  /**
   * Sleeps `ms` durably: the timer is recorded before the wait, so a re-run of this turn after a
   * crash sleeps only what is left. It runs inside the turn (its timeout still applies); to wait
   * hours or days without a turn, end the turn and `send(input, { deliverAt })`. docs/time.md
   * @example await ctx.sleep(30_000); // then poll again
   */
  sleep(ms: number): Promise<void>;
  /**
   * Starts a child task (a sub-agent) running `workflow` with `input`, recorded: a re-run of this
   * turn gets the same child back and never starts a second one. The child id is `options.childId`
   * or `<taskId>/c<turn>.<seq>`. Cancelling this task cancels the child unless `cancelWithParent: false`.
   * docs/children.md
   * @example const child = await ctx.startChild(researcher, 'solar panels'); const notes = await child.result();
   */
  startChild<CI, CO>(workflow: Workflow<CI, CO, any, any> | string, input: CI, options?: StartChildOptions): Promise<ChildHandle<CO>>;
  /**
   * Waits inside this turn for child `childId` (started by this task) and returns its first turn's
   * output; the outcome is recorded, so a re-run gets it back without waiting. A child that failed,
   * was cancelled or timed out throws ChildFailedError (TURNLOG_CHILD_FAILED).
   */
  awaitChild<O = unknown>(childId: string): Promise<O>;
  /**
   * Waits for the named signal (`task.signal(name, value)`, `turnlog signal`), at most
   * `timeoutMs` (engine clock; absent: until the turn ends). The wait and its outcome are
   * recorded: a later attempt gets the same value back, and a re-run after a crash waits only
   * the remainder. A signal sent before the wait is buffered and taken at once. docs/time.md
   * @example const r = await ctx.waitFor<{ ok: boolean }>('approval', { timeoutMs: 3_600_000 });
   */
  waitFor<T = unknown>(name: string, options?: WaitOptions): Promise<WaitResult<T>>;
  /** `return ctx.suspend(reason, output)` ends a multi-turn turn as suspended (waiting for input). */
  suspend<O>(reason: string, output?: O): Suspension<O>;
  /** `return ctx.exitForRecovery()` while shutting down: the next engine re-runs this turn. */
  exitForRecovery(reason?: string): ExitForRecovery;
}

export interface StartChildOptions {
  /** The child's task id; default `<parent task id>/c<turn>.<seq>` (unique per parent call). */
  childId?: string;
  /** Cancel the child when this task is cancelled (default true); recorded in the child's TaskCreated. */
  cancelWithParent?: boolean;
}

/** A child task started by `ctx.startChild`. */
export interface ChildHandle<O = unknown> {
  readonly childId: string;
  /** `ctx.awaitChild(childId)`: the child's first turn's output, recorded in the parent's history. */
  result(): Promise<O>;
}
/** Options of {@link TurnContext.waitFor}. */
export interface WaitOptions {
  /** Give up after this many milliseconds (engine clock), a finite number >= 0. */
  timeoutMs?: number;
}

/** What {@link TurnContext.waitFor} resolves with: the signal's value, or a timeout. */
export type WaitResult<T> = { ok: true; value: T } | { ok: false; timedOut: true };

/** @internal marks a Suspension (the attempt's runHandler recognizes it). */
export const SUSPENSION = Symbol.for('turnlog.suspension');
/** @internal marks an ExitForRecovery. */
export const EXIT = Symbol.for('turnlog.exit-for-recovery');

export interface Suspension<O = unknown> {
  readonly [SUSPENSION]: true;
  readonly reason: string;
  readonly output: O | undefined;
}
export interface ExitForRecovery {
  readonly [EXIT]: true;
  readonly reason: string;
}

export type CancelKind = 'timeout' | 'cancel' | 'shutdown';
