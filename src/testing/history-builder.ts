/**
 * History builder (`turnlog/testing`): write a history the way the engine would, one fluent call
 * per event — for replay tests, recovery tests and tests of your own tooling over histories.
 * Ids are dense from 1, times tick forward, turn/attempt/seq numbers are tracked for you; every
 * default can be overridden, and nothing is validated (so tests can build broken histories too).
 *
 * @example
 * const events = historyBuilder('t1')
 *   .created({ kind: 'multi-turn' })
 *   .input('hi')
 *   .turnStarted()
 *   .step('llm', { text: 'hello' })
 *   .completed({ reply: 'hello' })
 *   .build();
 */
import type {
  CancelScope,
  ChildStatus,
  EntryMode,
  ExecutorKind,
  FailureInfo,
  HistoryEvent,
  NewEvent,
  Payload,
  TaskOutcome,
  TimeoutCause,
  TraceContext,
  TurnPolicy,
  TurnTerminalEvent,
  WorkflowKind,
} from '../history/events.js';
import { HISTORY_FORMAT_VERSION } from '../history/events.js';
import { defaultPayloadConverter } from '../history/payload.js';

/** 2026-01-01T00:00:00.000Z: the builders' default clock start. */
export const T0 = Date.UTC(2026, 0, 1);

/** A small policy: 60 s turns, 5 s grace, 3 recoveries, 2 worker crashes, 9 steering inputs. */
export const DEFAULT_POLICY: TurnPolicy = {
  turnTimeoutMs: 60_000,
  graceMs: 5_000,
  maxRecoveries: 3,
  maxWorkerCrashes: 2,
  steeringMaxQueued: 9,
  executor: 'inline',
  stepRetry: { maxAttempts: 1, initialIntervalMs: 1000, backoffCoefficient: 2, maxIntervalMs: 60_000, nonRetryableTypes: [] },
};

/** A payload from a JS value (JSON), or the payload itself when given one. */
export function payload(value: unknown): Payload {
  if (isPayload(value)) return value;
  return defaultPayloadConverter.toPayload(value);
}

function isPayload(v: unknown): v is Payload {
  return typeof v === 'object' && v !== null && (v as Payload).data instanceof Uint8Array && typeof (v as Payload).metadata === 'object';
}

/** A failure from a message or a FailureInfo. */
export function failure(f: string | FailureInfo): FailureInfo {
  return typeof f === 'string' ? { message: f, type: 'Error' } : f;
}

export interface BuilderOptions {
  /** Clock start (default {@link T0}). */
  start?: number;
  /** Milliseconds the clock advances after each event (default 1000). */
  tick?: number;
  owner?: string;
  instance?: string;
}

type Extra<T extends HistoryEvent['type']> = Partial<Omit<Extract<HistoryEvent, { type: T }>, 'type' | 'eventId'>>;

/** Terminal options: `completeTask` appends TaskCompleted after the terminal (one-shot default). */
export interface TerminalOptions {
  completeTask?: TaskOutcome | false;
  turn?: number;
  time?: number;
}

type NewTerminal = TurnTerminalEvent extends infer E
  ? E extends TurnTerminalEvent
    ? Omit<E, 'eventId' | 'time' | 'generation'>
    : never
  : never;

const ONE_SHOT_OUTCOME = {
  TurnCompleted: 'succeeded',
  TurnSuspended: 'succeeded',
  TurnFailed: 'failed',
  TurnCancelled: 'cancelled',
  TurnTimedOut: 'timed_out',
} as const satisfies Record<string, TaskOutcome>;

export class HistoryBuilder {
  readonly taskId: string;
  readonly #events: HistoryEvent[] = [];
  #now: number;
  readonly #tick: number;
  #generation = 1;
  #owner: string;
  #instance: string;
  #kind: WorkflowKind = 'one-shot';
  #policy: TurnPolicy = DEFAULT_POLICY;
  #queue: { id: string; steering: boolean }[] = [];
  #inputSeq = 0;
  #turn = 0;
  #open = false;
  #attempt = 0;
  #seq = 0;
  #turnStartedAt = 0;
  #deadline = 0;

  constructor(taskId = 'task-1', opts: BuilderOptions = {}) {
    this.taskId = taskId;
    this.#now = opts.start ?? T0;
    this.#tick = opts.tick ?? 1000;
    this.#owner = opts.owner ?? 'engine-a';
    this.#instance = opts.instance ?? 'engine-a-1';
  }

  /** The time the next event gets. */
  get now(): number {
    return this.#now;
  }
  /** The last event's id (0 before the first). */
  get lastEventId(): number {
    return this.#events.length;
  }
  get generation(): number {
    return this.#generation;
  }
  /** The current (last started) turn and attempt, and whether it is open. */
  get turn(): { turn: number; attempt: number; open: boolean; seq: number; deadline: number; turnStartedAt: number } {
    return { turn: this.#turn, attempt: this.#attempt, open: this.#open, seq: this.#seq, deadline: this.#deadline, turnStartedAt: this.#turnStartedAt };
  }
  /** Input ids queued now, in order. */
  get queued(): readonly string[] {
    return this.#queue.map((q) => q.id);
  }
  get events(): readonly HistoryEvent[] {
    return this.#events;
  }

  /** Sets the clock. */
  at(time: number): this {
    this.#now = time;
    return this;
  }
  /** Moves the clock forward. */
  advance(ms: number): this {
    this.#now += ms;
    return this;
  }

  /** Appends any event; eventId, time and generation are filled in unless given. */
  raw(e: NewEvent | (Omit<NewEvent, 'time' | 'generation'> & { time?: number; generation?: number })): this {
    const full = { time: this.#now, generation: this.#generation, ...e, eventId: this.#events.length + 1 } as HistoryEvent;
    this.#events.push(full);
    this.#now = full.time + this.#tick;
    return this;
  }

  created(o: { workflow?: string; kind?: WorkflowKind; policy?: Partial<TurnPolicy>; formatVersion?: number } = {}): this {
    this.#kind = o.kind ?? 'one-shot';
    this.#policy = { ...DEFAULT_POLICY, ...o.policy };
    return this.raw({
      type: 'TaskCreated',
      workflow: o.workflow ?? 'test-workflow',
      kind: this.#kind,
      policy: this.#policy,
      formatVersion: o.formatVersion ?? HISTORY_FORMAT_VERSION,
    });
  }

  /** Queues an input (`id` defaults to `in-1`, `in-2`…; `steering` to "a turn is open"). */
  /** An input; with `deliverAt`, a scheduled one (`send(input, { deliverAt })`). */
  input(value: unknown = null, o: { id?: string; steering?: boolean; deliverAt?: number; trace?: TraceContext } = {}): this {
    const id = o.id ?? `in-${++this.#inputSeq}`;
    const steering = o.steering ?? this.#open;
    this.#queue.push({ id, steering });
    return this.raw({ type: 'InputQueued', inputId: id, input: payload(value), steering, ...(o.deliverAt === undefined ? {} : { deliverAt: o.deliverAt }), ...(o.trace === undefined ? {} : { trace: o.trace }) });
  }

  /** Withdraws a queued input (default: the last one queued). */
  withdraw(inputId?: string, reason = 'withdrawn by caller'): this {
    const id = inputId ?? this.#queue[this.#queue.length - 1]?.id ?? 'in-?';
    this.#queue = this.#queue.filter((q) => q.id !== id);
    return this.raw({ type: 'InputWithdrawn', inputId: id, reason });
  }

  /**
   * Starts a turn. Attempt 1 (default) takes the head of the queue, numbers the next turn,
   * stamps turnStartedAt = now and the deadline from the policy. Attempt > 1 re-opens the turn.
   */
  turnStarted(
    o: {
      turn?: number;
      attempt?: number;
      inputIds?: string[];
      entryMode?: EntryMode;
      steered?: boolean;
      executor?: ExecutorKind;
      pid?: number;
      owner?: string;
      instance?: string;
      turnStartedAt?: number;
      deadline?: number;
      workflowVersion?: number;
    } = {},
  ): this {
    const attempt = o.attempt ?? 1;
    const version = o.workflowVersion === undefined ? {} : { workflowVersion: o.workflowVersion };
    if (attempt === 1) {
      const head = this.#queue[0];
      const inputIds = o.inputIds ?? (head ? [head.id] : []);
      this.#queue = this.#queue.filter((q) => !inputIds.includes(q.id));
      this.#turn = o.turn ?? this.#turn + 1;
      this.#seq = 0;
      this.#turnStartedAt = o.turnStartedAt ?? this.#now;
      this.#deadline = o.deadline ?? this.#turnStartedAt + this.#policy.turnTimeoutMs;
      this.#open = true;
      this.#attempt = 1;
      return this.raw({
        type: 'TurnStarted',
        turn: this.#turn,
        attempt: 1,
        inputIds,
        entryMode: o.entryMode ?? (this.#turn === 1 ? 'fresh' : 'resumed'),
        steered: o.steered ?? head?.steering ?? false,
        owner: o.owner ?? this.#owner,
        instance: o.instance ?? this.#instance,
        executor: o.executor ?? this.#policy.executor,
        pid: o.pid ?? 1000,
        turnStartedAt: this.#turnStartedAt,
        deadline: this.#deadline,
        ...version,
      });
    }
    this.#attempt = attempt;
    this.#open = true;
    return this.raw({
      type: 'TurnStarted',
      turn: o.turn ?? this.#turn,
      attempt,
      inputIds: o.inputIds ?? [],
      entryMode: o.entryMode ?? 'recovered',
      steered: o.steered ?? false,
      owner: o.owner ?? this.#owner,
      instance: o.instance ?? this.#instance,
      executor: o.executor ?? this.#policy.executor,
      pid: o.pid ?? 1000 + attempt,
      turnStartedAt: o.turnStartedAt ?? this.#turnStartedAt,
      deadline: o.deadline ?? this.#deadline,
      ...version,
    });
  }

  /** A state migration (docs/versioning.md#state-migrations), recorded before the next turnStarted. */
  stateMigrated(state: unknown, o: { from: number; to: number }): this {
    return this.raw({ type: 'StateMigrated', fromVersion: o.from, toVersion: o.to, state: payload(state) });
  }

  /** The next attempt of the open turn (entry `recovered`, turn start and deadline unchanged). */
  recovered(o: { owner?: string; instance?: string; executor?: ExecutorKind } = {}): this {
    return this.turnStarted({ ...o, attempt: this.#attempt + 1 });
  }

  /** A completed step: `value` becomes its result unless `failure` is given. */
  step(name: string, value: unknown = null, o: { failure?: string | FailureInfo; durationMs?: number; seq?: number; attempt?: number; turn?: number } = {}): this {
    const e: Extra<'StepCompleted'> & { name: string } = {
      turn: o.turn ?? this.#turn,
      attempt: o.attempt ?? this.#attempt,
      seq: o.seq ?? ++this.#seq,
      name,
      durationMs: o.durationMs ?? 5,
    };
    if (o.failure !== undefined) e.failure = failure(o.failure);
    else e.result = payload(value);
    return this.raw({ type: 'StepCompleted', ...(e as Required<typeof e>) });
  }

  checkpoint(value: unknown, o: { seq?: number; turn?: number } = {}): this {
    return this.raw({ type: 'Checkpointed', turn: o.turn ?? this.#turn, seq: o.seq ?? ++this.#seq, data: payload(value) });
  }

  /** `ctx.patched(patchId)` (or `deprecatePatch`) took the new branch: its marker. */
  patch(patchId: string, o: { deprecated?: boolean; seq?: number; turn?: number } = {}): this {
    return this.raw({ type: 'PatchMarked', turn: o.turn ?? this.#turn, seq: o.seq ?? ++this.#seq, patchId, deprecated: o.deprecated ?? false });
  }
  /** `ctx.sleep(ms)`: its timer, firing at now + ms unless `fireAt` is given. */
  sleep(ms: number, o: { seq?: number; turn?: number; fireAt?: number } = {}): this {
    return this.raw({ type: 'TimerStarted', turn: o.turn ?? this.#turn, seq: o.seq ?? ++this.#seq, durationMs: ms, fireAt: o.fireAt ?? this.now + ms });
  }

  /** `ctx.startChild(workflow)`: its ChildStarted; the child id defaults to `<taskId>/c<turn>.<seq>`, as the context derives it. */
  childStarted(workflow: string, o: { childId?: string; detached?: boolean; seq?: number; turn?: number } = {}): this {
    const turn = o.turn ?? this.#turn;
    const seq = o.seq ?? ++this.#seq;
    return this.raw({ type: 'ChildStarted', turn, seq, childId: o.childId ?? `${this.taskId}/c${turn}.${seq}`, workflow, detached: o.detached ?? false });
  }

  /** `child.result()`: its ChildEnded (default `completed` with `output`; a `failure` makes it `failed`). */
  childEnded(childId: string, o: { output?: unknown; failure?: string | FailureInfo; status?: ChildStatus; reason?: string; seq?: number; turn?: number } = {}): this {
    const status: ChildStatus = o.status ?? (o.failure === undefined ? 'completed' : 'failed');
    const e: NewEvent = { type: 'ChildEnded', time: this.now, generation: this.#generation, turn: o.turn ?? this.#turn, seq: o.seq ?? ++this.#seq, childId, status };
    if (o.output !== undefined) e.output = payload(o.output);
    if (o.failure !== undefined) e.failure = failure(o.failure);
    if (o.reason !== undefined) e.reason = o.reason;
    return this.raw(e);
  }

  /** `ctx.takeInputs()`: takes the given (default: all) queued inputs into the open turn. */
  take(inputIds?: string[], o: { seq?: number; turn?: number } = {}): this {
    const ids = inputIds ?? this.#queue.map((q) => q.id);
    this.#queue = this.#queue.filter((q) => !ids.includes(q.id));
    return this.raw({ type: 'InputsTaken', turn: o.turn ?? this.#turn, seq: o.seq ?? ++this.#seq, inputIds: ids });
  }

  /** The timeout marker (`at` defaults to now, `graceUntil` to at + graceMs). */
  marker(o: { at?: number; graceUntil?: number; turn?: number } = {}): this {
    const at = o.at ?? this.#now;
    return this.raw({ type: 'TimeoutCancelRequested', turn: o.turn ?? this.#turn, at, graceUntil: o.graceUntil ?? at + this.#policy.graceMs });
  }

  cancel(scope: CancelScope = 'turn', reason = 'cancelled by caller', o: { turn?: number } = {}): this {
    return this.raw({ type: 'CancelRequested', scope, turn: o.turn ?? (this.#open ? this.#turn : 0), reason });
  }

  killed(o: { pid?: number; signal?: string; reason?: string } = {}): this {
    return this.raw({ type: 'WorkerKilled', turn: this.#turn, pid: o.pid ?? 1000 + this.#attempt - 1, signal: o.signal ?? 'SIGKILL', reason: o.reason ?? 'hard cap' });
  }

  crashed(o: { exitCode?: number | null; signal?: string | null; message?: string; pid?: number } = {}): this {
    return this.raw({
      type: 'WorkerCrashed',
      turn: this.#turn,
      attempt: this.#attempt,
      pid: o.pid ?? 1000 + this.#attempt - 1,
      exitCode: o.exitCode === undefined ? 1 : o.exitCode,
      signal: o.signal === undefined ? null : o.signal,
      message: o.message ?? 'worker exited unexpectedly',
    });
  }

  exitedForRecovery(reason = 'shutdown'): this {
    return this.raw({ type: 'TurnExitedForRecovery', turn: this.#turn, attempt: this.#attempt, reason });
  }

  completed(output?: unknown, o: TerminalOptions & { state?: unknown } = {}): this {
    const e: Extra<'TurnCompleted'> = { turn: o.turn ?? this.#turn };
    if (output !== undefined) e.output = payload(output);
    if (o.state !== undefined) e.state = payload(o.state);
    return this.#terminal({ type: 'TurnCompleted', turn: e.turn!, ...e }, o);
  }

  failed(f: string | FailureInfo = 'boom', o: TerminalOptions = {}): this {
    return this.#terminal({ type: 'TurnFailed', turn: o.turn ?? this.#turn, failure: failure(f) }, o);
  }

  suspended(reason = 'waiting for input', o: TerminalOptions & { output?: unknown; state?: unknown } = {}): this {
    const e: Extra<'TurnSuspended'> = {};
    if (o.output !== undefined) e.output = payload(o.output);
    if (o.state !== undefined) e.state = payload(o.state);
    return this.#terminal({ type: 'TurnSuspended', turn: o.turn ?? this.#turn, reason, ...e }, o);
  }

  cancelled(reason = 'cancelled', o: TerminalOptions = {}): this {
    return this.#terminal({ type: 'TurnCancelled', turn: o.turn ?? this.#turn, reason }, o);
  }

  timedOut(cause: TimeoutCause = 'cooperative', o: TerminalOptions = {}): this {
    return this.#terminal({ type: 'TurnTimedOut', turn: o.turn ?? this.#turn, cause }, o);
  }

  taskCompleted(outcome: TaskOutcome = 'succeeded'): this {
    return this.raw({ type: 'TaskCompleted', outcome });
  }

  /** A lease claim by a new instance: the generation goes up by one. */
  leaseClaimed(o: { owner?: string; instance?: string; expiresAt?: number; reason?: string; generation?: number } = {}): this {
    const previousGeneration = this.#generation;
    this.#generation = o.generation ?? this.#generation + 1;
    if (o.owner !== undefined) this.#owner = o.owner;
    this.#instance = o.instance ?? `${this.#owner}-${this.#generation}`;
    return this.raw({
      type: 'LeaseClaimed',
      owner: this.#owner,
      instance: this.#instance,
      previousGeneration,
      reason: o.reason ?? 'recovery',
      expiresAt: o.expiresAt ?? this.#now + 30_000,
    });
  }

  /** A copy of the events built so far. */
  build(): HistoryEvent[] {
    return this.#events.slice();
  }

  #terminal(e: NewTerminal, o: TerminalOptions): this {
    this.#open = false;
    this.raw(o.time === undefined ? e : { ...e, time: o.time });
    const complete = o.completeTask ?? (this.#kind === 'one-shot' ? ONE_SHOT_OUTCOME[e.type] : false);
    if (complete !== false) this.taskCompleted(complete);
    return this;
  }
}

/** Starts a history for `taskId`. */
export function historyBuilder(taskId = 'task-1', opts: BuilderOptions = {}): HistoryBuilder {
  return new HistoryBuilder(taskId, opts);
}

/** Renumbers event ids densely from 1 (for tests that insert or drop events). */
export function renumber(events: readonly HistoryEvent[]): HistoryEvent[] {
  return events.map((e, i) => ({ ...e, eventId: i + 1 }));
}
