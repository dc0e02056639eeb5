/**
 * The one implementation of the turn context. The same code runs inline in the engine, inside
 * an isolated worker, and under replay testing; only the {@link TurnHost} it talks to differs
 * (engine appends, protocol frames, a recorded history).
 */
import { ChildFailedError, FencedError, PayloadTooLargeError, TurnlogError, invalidArgument, isTurnlogError } from '../errors.js';
import type { EntryMode, Payload } from '../history/events.js';
import { errorToFailure, failureToError } from '../history/failure.js';
import type { ChildOutcome } from '../history/state.js';
import { payloadSize, type PayloadConverter } from '../history/payload.js';
import { illFormedText } from '../history/well-formed.js';
import type { Workflow } from '../workflow/define-workflow.js';
import { EXIT, SUSPENSION, type CancelKind, type ChildHandle, type StartChildOptions, type ExitForRecovery, type StepFn, type StepOptions, type Suspension, type TurnContext, type WaitOptions, type WaitResult } from '../workflow/context.js';
import { CALLS, replayMismatch, type CallIntent, type Recorded } from './calls.js';
import { encodeFor } from './encode.js';
import type { AttemptOutcome, TurnHost, TurnSpec } from './host.js';
import { StepRunner, runningStepOf, type Slot } from './step-runner.js';

export type { AttemptOutcome, TurnHost, TurnSpec } from './host.js';

// node:crypto is nineteen internal modules (~15 ms of CPU in a cold worker process) that only
// idempotencyKey() needs: taken at its first call through getBuiltinModule (Node ≥ 20.16);
// older Node imports it at load, and runHandler waits for that before any handler runs.
type Crypto = typeof import('node:crypto');
const getBuiltin = (process as { getBuiltinModule?: (id: string) => unknown }).getBuiltinModule;
let cryptoModule: Crypto | undefined;
const cryptoLoading: Promise<unknown> | undefined = getBuiltin
  ? undefined
  : import('node:crypto').then((m) => (cryptoModule = m), () => undefined);
function hashing(): Crypto {
  return (cryptoModule ??= getBuiltin!('node:crypto') as Crypto);
}
const INPUT_POLL_MS = 5;
/** The largest `ctx.emit` chunk: output for a screen, not a transport for data. */
export const MAX_CHUNK_BYTES = 1024 * 1024;
const MAX_INPUT_POLL_MS = 250;

/**
 * The takeInputs poll: resolves after `ms` in real time or on the engine's clock, whichever comes
 * first, and rejects with the signal's reason when it aborts. Real time, so an input sent to a test
 * engine (ManualClock) is taken without advancing it; the engine's clock, so `advance` past a
 * bounded wait's timeout ends it before `advance` resolves (test runtime/take-inputs-manual-clock).
 */
function pollPause(host: TurnHost, ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(signal.reason);
  const stop = new AbortController();
  const onAbort = (): void => stop.abort(signal.reason);
  signal.addEventListener('abort', onAbort, { once: true });
  let timer: NodeJS.Timeout | undefined;
  const real = new Promise<void>((resolve, reject) => {
    timer = setTimeout(resolve, ms);
    stop.signal.addEventListener('abort', () => reject(stop.signal.reason), { once: true });
  });
  return Promise.race([real, host.sleep(ms, stop.signal)]).finally(() => {
    signal.removeEventListener('abort', onAbort);
    clearTimeout(timer);
    if (!stop.signal.aborted) stop.abort();
  });
}

function abortReason(kind: CancelKind, spec: TurnSpec, reason: string): TurnlogError {
  const at = `Task ${spec.taskId}, turn ${spec.turn}`;
  switch (kind) {
    case 'timeout':
      return new TurnlogError('TURNLOG_TURN_TIMED_OUT', `${at}: turn timeout reached (${reason}).`);
    case 'cancel':
      return new TurnlogError('TURNLOG_TURN_CANCELLED', `${at}: cancelled (${reason}).`);
    case 'shutdown':
      return new TurnlogError('TURNLOG_ENGINE_CLOSED', `${at}: engine shutting down (${reason}).`);
  }
}

// Implements the unchecked (`custom`) shape: the payload checks are compile-time only.
export class TurnContextImpl<I = unknown, S = unknown> implements TurnContext<I, S, 'custom'> {
  readonly taskId: string;
  readonly workflow: string;
  readonly turn: number;
  readonly attempt: number;
  readonly inputId: string;
  readonly input: I;
  readonly entryMode: EntryMode;
  readonly steered: boolean;
  readonly recoveryCount: number;
  readonly deadline: number;
  state: S;

  #spec: TurnSpec;
  #host: TurnHost;
  #converter: PayloadConverter;
  #controller = new AbortController();
  #seq = 0;
  #checkpoint: Payload | undefined;
  #timeoutExceeded: boolean;
  #cancelRequested: boolean;
  #shutdownRequested = false;
  #cancelKind: CancelKind | undefined;
  #fenced: string | undefined;
  /** Names a refused chunk; made by the first emit, not by every one. */
  #emitSubject: string | undefined;
  #storeLost: string | undefined;
  #tooLarge: PayloadTooLargeError | undefined;
  /** Patch ids answered in this attempt, and how (one answer per id). */
  #patches = new Map<string, Promise<boolean>>();
  // Records land in seq order even when steps run in parallel: each call reserves its slot
  // when it is made, and its record waits until every slot before it is released (test: parallel
  // steps). Counters, not a promise chain: a sequential record issues its write at once.
  #reserved = 0;
  #released = 0;
  /** Records waiting for their slot's turn, by slot number. */
  #slotWaiters = new Map<number, () => void>();
  /** Runs steps from their reserved slot on (step-runner.ts). */
  #steps: StepRunner;

  constructor(spec: TurnSpec, host: TurnHost, converter: PayloadConverter, initialState: (() => S) | undefined) {
    this.#spec = spec;
    this.#host = host;
    this.#converter = converter;
    this.taskId = spec.taskId;
    this.workflow = spec.workflow;
    this.turn = spec.turn;
    this.attempt = spec.attempt;
    this.inputId = spec.inputId;
    this.input = converter.fromPayload<I>(spec.input);
    this.entryMode = spec.entryMode;
    this.steered = spec.steered;
    this.recoveryCount = spec.recoveryCount;
    this.deadline = spec.deadline;
    this.state = spec.state ? converter.fromPayload<S>(spec.state) : (initialState?.() as S);
    this.#checkpoint = spec.checkpoint;
    this.#timeoutExceeded = spec.timeoutExceeded;
    this.#cancelRequested = spec.cancelRequested;
    this.#steps = new StepRunner(this, host, converter, spec);
    if (spec.timeoutExceeded) this.cancel('timeout', 'deadline already passed');
    else if (spec.cancelRequested) this.cancel('cancel', 'cancel requested before this attempt');
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }
  get timeoutExceeded(): boolean {
    return this.#timeoutExceeded;
  }
  get cancelRequested(): boolean {
    return this.#cancelRequested;
  }
  get shutdownRequested(): boolean {
    return this.#shutdownRequested;
  }
  get pendingInputCount(): number {
    return this.#host.pendingInputCount();
  }
  get checkpointData(): unknown {
    return this.#checkpoint ? this.#converter.fromPayload(this.#checkpoint) : undefined;
  }
  /** A checkpoint refused as too large: the turn fails with it, however the handler ends. */
  get payloadRefusal(): PayloadTooLargeError | undefined {
    return this.#tooLarge;
  }
  /** Why the signal aborted, if it did. */
  get cancelKind(): CancelKind | undefined {
    return this.#cancelKind;
  }

  /** Cooperative cancel: flags first, then the abort (handlers reading flags in the abort listener see them set). */
  cancel(kind: CancelKind, reason: string): void {
    if (kind === 'timeout') this.#timeoutExceeded = true;
    if (kind === 'cancel') this.#cancelRequested = true;
    if (kind === 'shutdown') this.#shutdownRequested = true;
    if (this.#controller.signal.aborted) return;
    this.#cancelKind = kind;
    this.#controller.abort(abortReason(kind, this.#spec, reason));
  }

  /** A record the store could not write (TURNLOG_STORE_UNAVAILABLE): the attempt exits for recovery. */
  get storeLost(): string | undefined {
    return this.#storeLost;
  }

  /** After this, every record call fails: the attempt no longer owns its turn. */
  fence(detail: string): void {
    this.#fenced ??= detail;
  }

  /**
   * @internal Called first by every recorded call with what it is: undefined lets it proceed; a
   * rejection ends it instead. The replay tester checks each call here before anything runs.
   */
  protected intercept(_call: CallIntent): Promise<never> | undefined {
    return undefined;
  }

  step<T>(name: string, fn: StepFn<T>, options: StepOptions = {}): Promise<T> {
    try {
      return this.#step(name, fn, options);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * ctx.step's body up to its record slot; the step runner takes it from there. Not an async
   * function, nor is the runner's `run`: a step that returns a plain value makes no promise but
   * its record's (docs/performance.md).
   */
  #step<T>(name: string, fn: StepFn<T>, options: StepOptions): Promise<T> {
    const ms = options.timeoutMs;
    if (ms !== undefined && !(typeof ms === 'number' && Number.isFinite(ms) && ms > 0)) {
      throw invalidArgument(`Task ${this.taskId}, turn ${this.turn}: step "${String(name)}" timeoutMs must be a finite number of milliseconds > 0, got ${String(ms)}.`);
    }
    const limit = options.limit;
    if (limit !== undefined && (typeof limit !== 'string' || limit === '')) {
      throw invalidArgument(`Task ${this.taskId}, turn ${this.turn}: step "${String(name)}" limit must be the non-empty name of a flow limit, got ${JSON.stringify(limit)}.`);
    }
    if (limit !== undefined && !limit.isWellFormed()) throw invalidArgument(`Task ${this.taskId}: step ${illFormedText('limit', limit)}.`);
    // Read before a seq and a record slot are taken: a throw past that point would leave the slot
    // unrecorded, and every later record of the attempt waiting for it (test: attempt/step-options).
    const retry = options.retry;
    if (retry !== undefined) this.#steps.checkRetry(name, retry);
    const stopped = this.intercept({ kind: 'step', name });
    if (stopped) return stopped;
    // Names are matched on replay: one with no UTF-8 form would be recorded as another name.
    if (typeof name !== 'string') throw invalidArgument(`Task ${this.taskId}: ctx.step() needs a string name, got ${typeof name}.`);
    if (!name.isWellFormed()) throw invalidArgument(`Task ${this.taskId}: step ${illFormedText('name', name)}.`);
    const seq = ++this.#seq;
    const recorded = this.#replayed(seq, { kind: 'step', name });
    if (recorded) return Promise.resolve(this.#converter.fromPayload<T>(CALLS.step.result(recorded, this.#spec.taken)));
    this.#checkFenced();
    const slot = this.#reserve();
    // Streamed as new work only here, after the replay branch: a replayed step never starts again.
    this.#host.emit?.({ kind: 'step-started', seq, name });
    // The retry policy is built only where a try may be retried (the runner's tries): no object a step here.
    const started = this.#host.now();
    return this.#steps.run(name, fn, seq, slot, retry, ms, limit, started);
  }

  emit(chunk: unknown): void {
    // Checked even where nothing is streamed (replay testing), so a bad chunk throws everywhere alike.
    const subject = (this.#emitSubject ??= `Task ${this.taskId}, turn ${this.turn}, ctx.emit() chunk`);
    const data = encodeFor(this.#converter, chunk, 'chunk', subject);
    const size = payloadSize(data);
    if (size > MAX_CHUNK_BYTES) throw new PayloadTooLargeError('chunk', size, MAX_CHUNK_BYTES, subject, 'Emit smaller chunks; keep large data in a step result or outside the task.');
    if (this.#fenced === undefined) this.#host.emit?.({ kind: 'chunk', data });
  }

  idempotencyKey(name = ''): string {
    const running = runningStepOf();
    const seq = running?.ctx === this ? running.seq : this.#seq + 1;
    // Hashed: fixed length and charset whatever the task id holds, and no separator ambiguity.
    const digest = hashing().createHash('sha256').update(JSON.stringify([this.taskId, this.turn, seq, name])).digest('base64url');
    return `tl_${digest.slice(0, 32)}`;
  }

  /**
   * @internal `data` as a checkpoint payload, or the refusal `checkpoint()` throws before it takes
   * a seq (the replay tester calls it first too, so a refused checkpoint is no call there either).
   */
  checkpointPayload(data: unknown): Payload {
    try {
      return encodeFor(this.#converter, data, 'checkpoint', `Task ${this.taskId}, turn ${this.turn}, checkpoint`);
    } catch (err) {
      // Too large fails the turn, as the engine's own limit does; not JSON only throws.
      if (isTurnlogError(err, 'TURNLOG_PAYLOAD_TOO_LARGE')) this.#tooLarge ??= err as PayloadTooLargeError;
      throw err;
    }
  }

  async checkpoint(data: unknown): Promise<void> {
    // Converted before taking a seq: a refused checkpoint leaves no gap in the recorded calls.
    const payload = this.checkpointPayload(data);
    const stopped = this.intercept({ kind: 'checkpoint' });
    if (stopped) return stopped;
    const seq = ++this.#seq;
    if (!this.#replayed(seq, { kind: 'checkpoint' })) {
      this.#checkFenced();
      await this.#reserve().record(() => this.#host.record({ kind: 'checkpoint', seq, data: payload }));
    }
    this.#checkpoint = payload;
  }

  async takeInputs<T = I>(options: { wait?: boolean; timeoutMs?: number } = {}): Promise<T[]> {
    const timeoutMs = options.timeoutMs;
    if (timeoutMs !== undefined && (typeof timeoutMs !== 'number' || !Number.isFinite(timeoutMs) || timeoutMs < 0)) {
      throw invalidArgument(`Task ${this.taskId}, turn ${this.turn}: takeInputs() timeoutMs must be a finite number of milliseconds >= 0, got ${String(timeoutMs)}.`);
    }
    const stopped = this.intercept({ kind: 'take-inputs' });
    if (stopped) return stopped;
    const seq = ++this.#seq;
    const recorded = this.#replayed(seq, { kind: 'take-inputs' });
    if (recorded) return CALLS['take-inputs'].result(recorded, this.#spec.taken).map((p) => this.#converter.fromPayload<T>(p));
    this.#checkFenced();
    // Polling keeps the host contract small (it works the same across the worker protocol); the
    // interval grows with the wait (5 ms to 250 ms), so a long bounded wait costs few wake-ups.
    // The timeout is on the engine's clock; a poll ends on either clock (pollPause).
    const started = this.#host.now();
    const until = timeoutMs === undefined ? Infinity : started + timeoutMs;
    while (options.wait && this.#host.pendingInputCount() === 0) {
      const now = this.#host.now();
      if (now >= until) break; // timed out: recorded below as taking what is queued (nothing)
      const poll = Math.min(until - now, Math.max(INPUT_POLL_MS, Math.min(MAX_INPUT_POLL_MS, (now - started) / 20)));
      await pollPause(this.#host, poll, this.signal);
    }
    const taken = await this.#reserve().record(() => this.#host.record({ kind: 'take-inputs', seq }));
    return taken.map((q) => this.#converter.fromPayload<T>(q.input));
  }

  async patched(patchId: string): Promise<boolean> {
    return this.#patch(patchId, false);
  }

  async deprecatePatch(patchId: string): Promise<void> {
    await this.#patch(patchId, true);
  }

  /**
   * @internal True when the record goes on past the recorded calls (the replay tester of a turn
   * whose end is recorded): a patch absent there ran old-way, like one absent among the calls.
   */
  protected get recordContinues(): boolean {
    return false;
  }

  /** @internal Which branch a patch took in this attempt (the replay tester reports old-way ones). */
  protected patchTaken(_patchId: string, _newBranch: boolean): void {}

  #patch(patchId: string, deprecated: boolean): Promise<boolean> {
    const api = deprecated ? 'deprecatePatch' : 'patched';
    if (typeof patchId !== 'string' || patchId === '') throw invalidArgument(`Task ${this.taskId}: ctx.${api}() needs a non-empty string patch id, got ${typeof patchId === 'string' ? '""' : typeof patchId}.`);
    if (!patchId.isWellFormed()) throw invalidArgument(`Task ${this.taskId}: ctx.${api}() ${illFormedText('patch id', patchId)}.`);
    // One answer per id and attempt; a second call waits for the first one's marker to be durable.
    let answer = this.#patches.get(patchId);
    if (!answer) this.#patches.set(patchId, (answer = this.#patchOnce(patchId, deprecated)));
    return answer;
  }

  async #patchOnce(patchId: string, deprecated: boolean): Promise<boolean> {
    const next = this.#spec.calls[this.#seq];
    if (next || this.recordContinues) {
      // Replaying: a marker for this id here means the new branch; anything else, the old one
      // (the turn ran before the patch), and the patch takes no position.
      const taken = next?.kind === 'patch' && next.patchId === patchId;
      if (taken) {
        const stopped = this.intercept({ kind: 'patch', patchId });
        if (stopped) return stopped;
        ++this.#seq;
      }
      this.patchTaken(patchId, taken);
      return taken;
    }
    const stopped = this.intercept({ kind: 'patch', patchId });
    if (stopped) return stopped;
    this.#checkFenced();
    const seq = ++this.#seq;
    await this.#reserve().record(() => this.#host.record({ kind: 'patch', seq, patchId, deprecated }));
    this.patchTaken(patchId, true);
    return true;
  }

  async sleep(ms: number): Promise<void> {
    if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) {
      throw invalidArgument(`Task ${this.taskId}, turn ${this.turn}: ctx.sleep() needs a finite number of milliseconds >= 0, got ${String(ms)}.`);
    }
    const stopped = this.intercept({ kind: 'sleep', ms });
    if (stopped) return stopped;
    const seq = ++this.#seq;
    const recorded = this.#replayed(seq, { kind: 'sleep', ms });
    let fireAt: number;
    if (recorded) fireAt = CALLS.sleep.result(recorded, this.#spec.taken);
    else {
      this.#checkFenced();
      fireAt = this.#host.now() + ms;
      await this.#reserve().record(() => this.#host.record({ kind: 'sleep', seq, durationMs: ms, fireAt }));
    }
    // The recorded fire time, not `ms` again: a re-run after a crash sleeps only the remainder.
    const left = fireAt - this.#host.now();
    if (left > 0) await this.#host.sleep(left, this.signal);
    else this.signal.throwIfAborted();
  }

  async startChild<CI, CO>(workflow: Workflow<CI, CO, any, any> | string, input: CI, options: StartChildOptions = {}): Promise<ChildHandle<CO>> {
    const at = `Task ${this.taskId}, turn ${this.turn}: ctx.startChild()`;
    const name = typeof workflow === 'string' ? workflow : (workflow as { name?: unknown } | null)?.name;
    if (typeof name !== 'string' || name === '' || !name.isWellFormed()) throw invalidArgument(`${at} needs a workflow or a workflow name, got ${typeof name === 'string' ? JSON.stringify(name) : typeof workflow}.`);
    const given = options.childId;
    if (given !== undefined && (typeof given !== 'string' || given === '' || !given.isWellFormed())) {
      throw invalidArgument(`${at} needs childId to be a non-empty well-formed string, got ${typeof given === 'string' ? JSON.stringify(given) : typeof given}.`);
    }
    if (options.cancelWithParent !== undefined && typeof options.cancelWithParent !== 'boolean') throw invalidArgument(`${at}: cancelWithParent must be a boolean.`);
    // Derived from the call's position, so every attempt of this turn names the same child.
    const childId = given ?? `${this.taskId}/c${this.turn}.${this.#seq + 1}`;
    const stopped = this.intercept({ kind: 'child', op: 'start', childId, workflow: name });
    if (stopped) return stopped;
    const payload = encodeFor(this.#converter, input, 'input', `${at}, input of child ${childId}`);
    const seq = ++this.#seq;
    if (!this.#replayed(seq, { kind: 'child', op: 'start', childId, workflow: name })) {
      this.#checkFenced();
      const detached = options.cancelWithParent === false;
      await this.#reserve().record(() => this.#host.record({ kind: 'child', seq, op: 'start', childId, workflow: name, input: payload, detached }));
    }
    return { childId, result: () => this.awaitChild<CO>(childId) };
  }

  async awaitChild<O = unknown>(childId: string): Promise<O> {
    if (typeof childId !== 'string' || childId === '') throw invalidArgument(`Task ${this.taskId}, turn ${this.turn}: ctx.awaitChild() needs a child id.`);
    const stopped = this.intercept({ kind: 'child', op: 'await', childId });
    if (stopped) return stopped;
    const seq = ++this.#seq;
    const recorded = this.#replayed(seq, { kind: 'child', op: 'await', childId });
    let outcome: ChildOutcome | undefined;
    if (recorded) outcome = CALLS.child.result(recorded, this.#spec.taken).outcome;
    else {
      this.#checkFenced();
      // The engine acks once the child has ended and ChildEnded is durable; the turn's signal
      // (cancel, timeout, shutdown) stops the wait here, while the record slot stays taken.
      const reply = this.#reserve().record(() => this.#host.record({ kind: 'child', seq, op: 'await', childId }));
      reply.catch(() => undefined);
      outcome = (await untilAborted(reply, this.signal)).outcome;
    }
    if (!outcome) throw new TurnlogError('TURNLOG_HISTORY_INVARIANT', `Task ${this.taskId}, turn ${this.turn}: child ${childId} was awaited without an outcome.`);
    if (outcome.status === 'completed' || outcome.status === 'suspended') return this.#converter.fromPayload<O>(outcome.output ?? this.#converter.toPayload(undefined));
    const cause = outcome.failure ? failureToError(outcome.failure) : undefined;
    throw new ChildFailedError(this.taskId, childId, outcome.status, outcome.failure?.message ?? outcome.reason ?? '', cause ? { cause } : {});
  }

  async waitFor<T = unknown>(name: string, options: WaitOptions = {}): Promise<WaitResult<T>> {
    const timeoutMs = options.timeoutMs;
    if (timeoutMs !== undefined && (typeof timeoutMs !== 'number' || !Number.isFinite(timeoutMs) || timeoutMs < 0)) {
      throw invalidArgument(`Task ${this.taskId}, turn ${this.turn}: ctx.waitFor() timeoutMs must be a finite number of milliseconds >= 0, got ${String(timeoutMs)}.`);
    }
    if (typeof name !== 'string' || name === '') throw invalidArgument(`Task ${this.taskId}: ctx.waitFor() needs a non-empty string signal name, got ${typeof name === 'string' ? '""' : typeof name}.`);
    if (!name.isWellFormed()) throw invalidArgument(`Task ${this.taskId}: ctx.waitFor() ${illFormedText('signal name', name)}.`);
    const stopped = this.intercept({ kind: 'wait', name });
    if (stopped) return stopped;
    const seq = ++this.#seq;
    const recorded = this.#replayed(seq, { kind: 'wait', name });
    let ended = recorded && CALLS.wait.result(recorded, this.#spec.taken).ended;
    if (!recorded) {
      this.#checkFenced();
      const call = timeoutMs === undefined ? { kind: 'wait' as const, seq, name } : { kind: 'wait' as const, seq, name, timeoutMs };
      await this.#reserve().record(() => this.#host.record(call));
    }
    // Not yet ended (a new wait, or a re-run of one that was waiting): the engine ends it,
    // with a signal or at the recorded deadline; the turn's signal (timeout, cancel) cuts it short.
    ended ??= await untilAborted(this.#host.wait(seq), this.signal);
    if (ended.timedOut) return { ok: false, timedOut: true };
    return { ok: true, value: this.#converter.fromPayload<T>(ended.value ?? this.#converter.toPayload(undefined)) };
  }

  suspend<O>(reason: string, output?: O): Suspension<O> {
    if (this.#spec.kind !== 'multi-turn') {
      throw new TurnlogError(
        'TURNLOG_WRONG_KIND',
        `Task ${this.taskId}: ctx.suspend() is for multi-turn workflows; workflow ${this.workflow} is one-shot. Return a value instead, or define it with kind: 'multi-turn'.`,
      );
    }
    return { [SUSPENSION]: true, reason, output };
  }

  exitForRecovery(reason = 'engine shutting down'): ExitForRecovery {
    if (!this.#shutdownRequested) {
      throw new TurnlogError(
        'TURNLOG_EXIT_FOR_RECOVERY_OUTSIDE_SHUTDOWN',
        `Task ${this.taskId}, turn ${this.turn}: exitForRecovery() is only allowed while the engine shuts down (ctx.shutdownRequested). Finish the turn, or throw to fail it.`,
      );
    }
    return { [EXIT]: true, reason };
  }

  /**
   * Reserves the next record slot; its `record` must be called exactly once. With no earlier slot
   * open the write starts synchronously: no promise per record beyond the write's own (each one
   * runs the step scope's async hooks, docs/performance.md).
   */
  #reserve(): Slot {
    const slot = this.#reserved++;
    return {
      record: <T, R = T>(write: () => Promise<T>, then?: (v: T) => R): Promise<R> => {
        if (slot === this.#released) return this.#write(write, then);
        return new Promise<void>((r) => this.#slotWaiters.set(slot, r)).then(() => this.#write(write, then));
      },
    };
  }

  /** Runs a slot's write, then releases the slot (whatever the outcome) to the next one; `then` maps the reply. */
  #write<T, R = T>(write: () => Promise<T>, then?: (v: T) => R): Promise<R> {
    let pending: Promise<T>;
    try {
      this.#checkFenced();
      pending = write();
    } catch (err) {
      pending = Promise.reject(err);
    }
    return pending.then(
      (v) => {
        this.#release();
        return then ? then(v) : (v as unknown as R);
      },
      (err: unknown) => {
        // The store could not take the record: the handler must not go on past it, nor record
        // on top of the gap. Later records fail, and the attempt exits for recovery (runHandler).
        if ((err as { code?: unknown } | null)?.code === 'TURNLOG_STORE_UNAVAILABLE') {
          this.#storeLost ??= (err as Error).message;
          this.fence(`the store could not record a call (${this.#storeLost})`);
        }
        this.#release();
        throw err;
      },
    );
  }

  #release(): void {
    const next = ++this.#released;
    const waiter = this.#slotWaiters.get(next);
    if (waiter) {
      this.#slotWaiters.delete(next);
      waiter();
    }
  }

  #checkFenced(): void {
    if (this.#fenced !== undefined) throw new FencedError(this.taskId, this.turn, this.attempt, this.#fenced);
  }

  /** The call recorded at `seq`, checked against `call`; undefined past the recorded calls. */
  #replayed<C extends CallIntent>(seq: number, call: C): Recorded<C['kind']> | undefined {
    const recorded = this.#spec.calls[seq - 1];
    if (!recorded) return undefined;
    const diverged = replayMismatch(this.taskId, this.turn, seq, recorded, call);
    if (diverged) throw diverged;
    return recorded as Recorded<C['kind']>;
  }
}

/** `p`, or a rejection with the signal's reason once it aborts. */
function untilAborted<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const stop = (): void => reject(signal.reason);
    signal.addEventListener('abort', stop, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', stop);
        resolve(v);
      },
      (err) => {
        signal.removeEventListener('abort', stop);
        reject(err);
      },
    );
  });
}

function isSuspension(v: unknown): v is Suspension {
  return typeof v === 'object' && v !== null && (v as Record<symbol, unknown>)[SUSPENSION] === true;
}
function isExit(v: unknown): v is ExitForRecovery {
  return typeof v === 'object' && v !== null && (v as Record<symbol, unknown>)[EXIT] === true;
}

/**
 * Runs the handler to its outcome. Once the signal has aborted, a throw counts as the
 * abort's outcome (timed out, cancelled, or exit for recovery at shutdown), whatever was thrown.
 */
export async function runHandler<I, O, S>(
  // `ctx: never`: handlers of either payload mode; the context checks payloads at run time.
  handler: (ctx: never, input: I) => Promise<O | Suspension<O> | ExitForRecovery> | O | Suspension<O> | ExitForRecovery,
  ctx: TurnContextImpl<I, S>,
  converter: PayloadConverter,
): Promise<AttemptOutcome> {
  if (cryptoLoading) await cryptoLoading;
  let value: unknown;
  const lost = (): AttemptOutcome => ({ kind: 'exit-for-recovery', reason: `a record could not be written: ${ctx.storeLost}` });
  try {
    value = await handler(ctx as never, ctx.input);
  } catch (err) {
    if (ctx.storeLost !== undefined) return lost();
    switch (ctx.cancelKind) {
      case 'timeout':
        return { kind: 'timed-out' };
      case 'cancel':
        return { kind: 'cancelled', reason: (ctx.signal.reason as Error).message };
      case 'shutdown':
        return { kind: 'exit-for-recovery', reason: 'handler stopped at engine shutdown' };
      default:
        return { kind: 'failed', failure: errorToFailure(ctx.payloadRefusal ?? err) };
    }
  }
  if (ctx.storeLost !== undefined) return lost();
  const refused = ctx.payloadRefusal;
  if (refused && !isExit(value)) return { kind: 'failed', failure: errorToFailure(refused) };
  const at = `Task ${ctx.taskId}, turn ${ctx.turn}`;
  try {
    const state = ctx.state === undefined ? undefined : encodeFor(converter, ctx.state, 'state', `${at}, ctx.state`);
    if (isExit(value)) return { kind: 'exit-for-recovery', reason: value.reason };
    if (isSuspension(value)) {
      const out: AttemptOutcome = { kind: 'suspended', reason: value.reason };
      if (value.output !== undefined) out.output = encodeFor(converter, value.output, 'output', `${at}, suspend output`);
      if (state) out.state = state;
      return out;
    }
    const out: AttemptOutcome = { kind: 'completed', output: encodeFor(converter, value, 'output', `${at}, output`) };
    if (state) out.state = state;
    return out;
  } catch (err) {
    return { kind: 'failed', failure: errorToFailure(err) };
  }
}
