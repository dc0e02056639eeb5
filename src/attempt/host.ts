/**
 * The turn-attempt contract: what an executor is given to run one attempt (TurnSpec), what the
 * attempt talks to while it runs (TurnHost: engine appends, protocol frames or a recorded
 * history) and how it ends (AttemptOutcome). Inline, process and replay executors share it.
 */
import type { EntryMode, FailureInfo, Payload, RetryPolicy, WorkflowKind } from '../history/events.js';
import type { QueuedInput, RecordedCall, WaitOutcome } from '../history/state.js';
import type { CallRecord, CallReplies } from './calls.js';

export type { CancelKind } from '../workflow/context.js';

/** Everything an executor needs to run one attempt of one turn. Plain data (crosses processes). */
export interface TurnSpec {
  taskId: string;
  workflow: string;
  kind: WorkflowKind;
  turn: number;
  attempt: number;
  entryMode: EntryMode;
  steered: boolean;
  inputId: string;
  input: Payload;
  state?: Payload;
  /** Calls recorded by earlier attempts, in seq order. */
  calls: RecordedCall[];
  /** Inputs taken by recorded take-inputs calls, by id. */
  taken: QueuedInput[];
  checkpoint?: Payload;
  turnStartedAt: number;
  deadline: number;
  recoveryCount: number;
  stepRetry: RetryPolicy;
  /** Cancel state at start (a recovered turn whose cancel was already requested). */
  timeoutExceeded: boolean;
  cancelRequested: boolean;
}

/** How an attempt ended, as the executor reports it. */
export type AttemptOutcome =
  | { kind: 'completed'; output: Payload; state?: Payload }
  | { kind: 'suspended'; reason: string; output?: Payload; state?: Payload }
  | { kind: 'failed'; failure: FailureInfo }
  | { kind: 'cancelled'; reason: string }
  | { kind: 'timed-out' }
  | { kind: 'exit-for-recovery'; reason: string }
  | { kind: 'crashed'; pid: number; exitCode: number | null; signal: string | null; message: string; stderrTail?: string }
  | { kind: 'killed'; pid: number; signal: string };

/** Non-durable output of a running attempt: a `ctx.emit` chunk, or a step starting (not replayed). */
export type EmitItem = { kind: 'chunk'; data: Payload } | { kind: 'step-started'; seq: number; name: string };

/** The environment of a running attempt. Each record resolves once durable (invariant 4). */
export interface TurnHost {
  /** Records one call (a row of attempt/calls.ts); resolves with its reply once durable. */
  record<C extends CallRecord>(call: C): Promise<CallReplies[C['kind']]>;
  pendingInputCount(): number;
  now(): number;
  /** Retry backoff; rejects when `signal` aborts. */
  sleep(ms: number, signal: AbortSignal): Promise<void>;
  /**
   * Calls `fn` once `ms` have passed on the engine's clock unless cancelled first: an executor's
   * own housekeeping (the process executor's liveness check), without the AbortSignal that
   * `sleep` needs. Absent where no executor needs it (a worker, replay); real time then.
   */
  setTimer?(fn: () => void, ms: number): { cancel(): void };
  /**
   * The end of the recorded wait at `seq` (ctx.waitFor), once WaitEnded is durable, payloads
   * decoded. The engine ends it (a signal, or the timeout on its clock); may never resolve.
   */
  wait(seq: number): Promise<WaitOutcome>;
  /** A number in [0, 1) for retry jitter (EngineOptions.random inline; Math.random elsewhere). */
  random?(): number;
  /**
   * Non-durable output (docs/streaming.md): never awaited, never blocks the turn; a host may drop
   * it (`dropped` counts emits it dropped before this one). Absent under replay testing.
   */
  emit?(item: EmitItem, dropped?: number): void;
  /**
   * Takes a slot and a rate token of flow limit `limit` for step `seq` (docs/time.md#flow-limits);
   * resolves with the ms waited. The slot is held until the step's record arrives or the attempt
   * ends. Absent under replay testing (no wait).
   */
  acquire?(limit: string, seq: number, signal: AbortSignal): Promise<number>;
}

/** An own static of the engine's own executors, which call the host's methods on it. */
export const HOST_AS_IS: unique symbol = Symbol('turnlog.host-as-is');

const HOST_METHODS = ['record', 'pendingInputCount', 'now', 'sleep', 'setTimer', 'wait', 'random', 'emit', 'acquire'] as const satisfies readonly (keyof TurnHost)[];

/**
 * The host an executor is given. The engine's own executors get it as is: a class instance whose
 * methods live on its prototype (one object an attempt, no closures). Any other executor, a
 * user's own `Executor` included, gets a plain object of the same methods bound to it, so it may
 * spread, copy or detach them (`{ ...host, emit }`), as a plain object of functions always allowed.
 */
export function hostFor(executor: object, host: TurnHost): TurnHost {
  const ctor = (executor as { constructor?: unknown }).constructor;
  if (typeof ctor === 'function' && Object.hasOwn(ctor, HOST_AS_IS)) return host;
  const plain: Record<string, unknown> = {};
  for (const key of HOST_METHODS) {
    const fn = host[key] as ((...args: unknown[]) => unknown) | undefined;
    if (typeof fn === 'function') plain[key] = fn.bind(host);
  }
  return plain as unknown as TurnHost;
}
