/**
 * The engine: owns the store, schedules turns, holds leases, runs the watchdog and recovers.
 * Every decision about what a task does next comes from the replayer's `decide`; the engine
 * carries it out. All writes to one task go through that task's lock, in order.
 * See docs/workflows.md and docs/recovery.md.
 */
import { hostname } from 'node:os';
import { nanoid } from 'nanoid';
import {
  FencedError,
  HistoryCorruptError,
  LastInputIdPreconditionError,
  type StaleGenerationError,
  PayloadEncodingError,
  PayloadTooLargeError,
  SteeringQueueFullError,
  TaskConflictError,
  TurnOutcomeError,
  TurnlogError,
  invalidArgument,
  isTurnlogError,
  isHistoryUnreadable as isUnreadable,
} from '../errors.js';
import {
  HISTORY_FORMAT_VERSION,
  isTurnTerminal,
  type ExecutorKind,
  type HistoryEvent,
  type Lease,
  type Payload,
  type TurnTerminalEvent,
} from '../history/events.js';
import { errorToFailure } from '../history/failure.js';
import { nextLease } from '../history/lease.js';
import { payloadSize, type PayloadConverter, type PayloadLimits } from '../history/payload.js';
import type { CodecChain } from '../history/payload-map.js';
import type { TaskState } from '../history/state.js';
import { encodeHistoryFile, type HistoryFileFormat } from '../history/history-file.js';
import { decodeState, encodeState } from '../history/state-codec.js';
import { illFormedText, wellFormedEvent } from '../history/well-formed.js';
import { decide, fold } from '../replay/index.js';
import type { Decision } from '../replay/decision.js';
import type { CorruptMark, HistoryStore, ListOptions, TaskPage } from '../store/history-store.js';
import { checkTaskId } from '../store/keys.js';
import { noteEngineActivation } from './work-log.js';
import type { Executor, AttemptHandle, Reservation } from '../executor/executor.js';
import { InlineExecutor } from '../executor/inline-executor.js';
import { assertOutsideWorker } from '../executor/isolation.js';
import type { AttemptOutcome, CancelKind, TurnHost, TurnSpec } from '../workflow/context.js';
import { resolvePolicy, type Workflow } from '../workflow/define-workflow.js';
import type { PayloadMode } from '../workflow/json.js';
import { turnSpecFor } from '../workflow/turn-spec.js';
import { sleep, systemClock, type Clock, type Timer } from './clock.js';
import { FaultInjector } from './fault.js';
import { TaskHandle } from '../client/task-handle.js';
import type { SendOptions, StartOptions, TaskClient, TaskDescription, TurnResult } from '../client/task-client.js';
import type { Logger } from '../logger.js';
import { outcomeLogLines } from './outcome-log.js';
import { finalizeDrafts, hardCapDrafts, oversized, outcomeDrafts, turnStartDrafts, withinLimits, type Draft } from './drafts.js';
import { checkId, isCaptureMode, resolveOptions, type ActivateOptions, type EngineOptions } from './options.js';

export type { SendOptions, StartOptions, TaskDescription } from '../client/task-client.js';
export { isCaptureMode, type ActivateOptions, type EngineOptions } from './options.js';

interface Deferred<T> {
  resolve(v: T): void;
  reject(e: unknown): void;
}

interface ActiveAttempt {
  turn: number;
  attempt: number;
  handle?: AttemptHandle;
  /** Set once the engine ended the turn itself (hard cap, shutdown): the late outcome is discarded. */
  finalized: boolean;
  /** Why the engine killed the worker, when it did. */
  killReason?: 'timeout' | 'cancel';
  /** A cancel that arrived before the handle existed. */
  pendingCancel?: [CancelKind, string];
  /** An oversized checkpoint was refused: every later record fails, and so does the turn. */
  refused?: PayloadTooLargeError;
  timers: Timer[];
  renewFailures: number;
  done: Promise<void>;
}

class TaskEntry {
  state: TaskState | undefined;
  lease: Lease | undefined;
  chain: Promise<unknown> = Promise.resolve();
  /** Operations queued on or holding the lock; a busy entry is never evicted. */
  busy = 0;
  active: ActiveAttempt | undefined;
  waiters = new Map<string, Deferred<TurnResult>[]>();
  /** Waiters for the end of the next turn, whatever input it takes (handles without an input id). */
  turnWaiters: Deferred<TurnResult>[] = [];
  snapshotAt = 0;
  /** The last turn terminal event appended by this engine (waiters' results are built from it). */
  lastTerminal: TurnTerminalEvent | undefined;
  /** Results of recently finished inputs, so `nextTurn()` after the fact needs no history scan. */
  recent = new Map<string, TurnResult>();
  /** The result of the last turn this engine saw end. */
  lastResult: TurnResult | undefined;
  constructor(readonly id: string) {}
}


/**
 * Opens with `Engine.open()`.
 * @example
 * const engine = await Engine.open({ store: '.turnlog', workflows: [supportAgent] });
 * const task = await engine.start(supportAgent, 'my order is late', { taskId: 'chat-42' });
 * console.log(await task.nextTurn());
 * await engine.shutdown();
 */
export class Engine implements TaskClient {
  readonly #storeSpec: string | HistoryStore;
  #store: HistoryStore | undefined;
  #owner: string | undefined;
  #instance: string | undefined;
  readonly #ownerOption: string | undefined;
  readonly #instanceOption: string | undefined;
  readonly #workflows: Map<string, Workflow<any, any, any, any>>;
  readonly #executors = new Map<ExecutorKind, Executor>();
  readonly #defaultExecutor: ExecutorKind;
  readonly #clock: Clock;
  readonly #codec: CodecChain | undefined;
  readonly #converter: PayloadConverter;
  readonly #limits: Readonly<PayloadLimits>;
  readonly #leaseMs: number;
  readonly #scanIntervalMs: number;
  readonly #shutdownGraceMs: number;
  readonly #snapshotEvery: number;
  readonly #maxCached: number;
  readonly #retentionMs: number | undefined;
  readonly #log: Logger;
  readonly #fault = FaultInjector.fromEnv();
  readonly #tasks = new Map<string, TaskEntry>();
  readonly #loading = new Map<string, Promise<TaskEntry>>();
  /** Tasks whose stored records cannot be read, isolated so every other task is served. */
  readonly #corrupt = new Map<string, CorruptMark>();
  #scanTimer: Timer | undefined;
  #scanning: Promise<void> | undefined;
  #state: 'inactive' | 'activating' | 'open' | 'quiescing' | 'closed' = 'inactive';

  private constructor(options: EngineOptions) {
    const o = resolveOptions(options);
    this.#workflows = o.workflows;
    this.#converter = o.converter;
    this.#storeSpec = o.storeSpec;
    this.#ownerOption = o.ownerOption;
    this.#instanceOption = o.instanceOption;
    this.#clock = o.clock;
    this.#codec = o.codec;
    this.#leaseMs = o.leaseMs;
    this.#scanIntervalMs = o.scanIntervalMs;
    this.#shutdownGraceMs = o.shutdownGraceMs;
    this.#snapshotEvery = o.snapshotEvery;
    this.#maxCached = o.maxCached;
    this.#retentionMs = o.retentionMs;
    this.#log = o.log;
    this.#defaultExecutor = o.defaultExecutor;
    this.#limits = o.limits;
    this.#executors.set('inline', new InlineExecutor(this.#workflows, this.#converter));
    for (const [kind, ex] of Object.entries(options.executors ?? {})) if (ex) this.#executors.set(kind as ExecutorKind, ex);
  }

  /**
   * Opens the store, recovers at once (the store's lock proves earlier owners dead), and
   * starts the periodic scanner. In capture mode (`capture: true` or
   * `TURNLOG_SNAPSHOT_CAPTURE=true`) it opens nothing: call `activate()` after restore.
   */
  static async open(options: EngineOptions): Promise<Engine> {
    assertOutsideWorker('Engine.open()');
    const engine = new Engine(options);
    if (!isCaptureMode(options)) await engine.activate();
    return engine;
  }

  /**
   * Builds an engine without any I/O: workflows are registered; no store, lease, timer or
   * worker exists until `activate()`. Safe to call while building a memory snapshot.
   */
  static create(options: EngineOptions): Engine {
    assertOutsideWorker('Engine.create()');
    return new Engine(options);
  }

  /** True once activated and until quiesced or shut down. */
  get active(): boolean {
    return this.#state === 'open';
  }

  /** The store; TURNLOG_ENGINE_NOT_ACTIVATED before activation. */
  get store(): HistoryStore {
    if (!this.#store) throw this.#notActive('store');
    return this.#store;
  }

  /** Deployment identity, e.g. `<agent>|session:<id>`; set at activation. */
  get owner(): string {
    return this.#owner ?? this.#ownerOption ?? `${hostname()}|turnlog`;
  }

  /** This activation's identity (new on every activation unless given). */
  get instance(): string {
    if (!this.#instance) throw this.#notActive('instance');
    return this.#instance;
  }

  /**
   * Activates the engine: open the store, arm one periodic scanner, recover at once.
   * On failure everything it did is rolled back and the engine stays inactive (retry allowed).
   * A no-op on an active engine.
   */
  async activate(options: ActivateOptions = {}): Promise<void> {
    if (this.#state === 'open') return;
    if (this.#state !== 'inactive') throw new TurnlogError('TURNLOG_ACTIVATION_FAILED', `Engine cannot activate while ${this.#state}.`);
    this.#state = 'activating';
    noteEngineActivation({ store: typeof this.#storeSpec === 'string' ? this.#storeSpec : (this.#storeSpec.constructor?.name ?? 'a HistoryStore') });
    const phase = options.onPhase ?? (() => undefined);
    try {
      this.#owner = options.owner ?? this.#ownerOption ?? `${hostname()}|turnlog`;
      this.#instance = options.instance ?? this.#instanceOption ?? `engine-${process.pid}-${nanoid(8)}`;
      // Both are written into every TurnStarted and LeaseClaimed: refuse what has no UTF-8 form.
      if (!this.#owner.isWellFormed()) throw invalidArgument(`${illFormedText('Engine owner', this.#owner)}.`);
      if (!this.#instance.isWellFormed()) throw invalidArgument(`${illFormedText('Engine instance', this.#instance)}.`);
      // Executors check their set-up (a process executor's module) before anything is opened.
      await this.#checkExecutors();
      await phase('open');
      this.#store = await this.#makeStore();
      await this.#store.open();
      for (const m of await this.#store.listCorrupt()) {
        this.#corrupt.set(m.taskId, m);
        this.#log.error('task isolated: its stored history cannot be read', { taskId: m.taskId, key: m.key, error: m.message });
      }
      this.#state = 'open';
      // Scanner before recovery: every phase that can fail runs before any turn starts, so a
      // rolled-back activation never ran (nor interrupted) a handler (test: lifecycle "scanner fails twice").
      await phase('scanner');
      this.#armScanner();
      await phase('recovery');
      await this.recover();
    } catch (err) {
      await this.#quiesce(0).catch((e) => this.#log.warn('rollback after failed activation failed', { error: e }));
      this.#state = 'inactive';
      throw err;
    }
  }

  /**
   * Quiesces to no open handles and leaves the engine inactive (re-activatable): scanner
   * stopped, running turns cancelled then left to recovery, workers stopped, store closed.
   * Queued inputs are never run during this. Use before a memory snapshot.
   */
  async deactivate(options: { graceMs?: number } = {}): Promise<void> {
    if (this.#state !== 'open') return;
    await this.#quiesce(options.graceMs ?? this.#shutdownGraceMs);
    this.#state = 'inactive';
  }

  async #makeStore(): Promise<HistoryStore> {
    if (typeof this.#storeSpec !== 'string') return this.#storeSpec;
    // Loaded on first activation, never at import: native modules cannot be in a startup snapshot.
    const { LevelHistoryStore } = await import('../store/level-store.js');
    return new LevelHistoryStore(this.#storeSpec);
  }

  /** The workflows this engine runs, by name. */
  get workflows(): ReadonlyMap<string, Workflow<any, any, any, any>> {
    return this.#workflows;
  }

  // -------------------------------------------------------------------------------------------
  // Public task API

  /**
   * Sends `input` to a task, creating it if needed, and returns its handle. A new or suspended
   * task starts a turn at once; a busy steerable task queues the input (steering).
   */
  async start<I, O, S, P extends PayloadMode = 'json'>(
    // The input type is the workflow's, JSON-checked by defineWorkflow (an extra check here
    // would stop the literal widening of inputs to a workflow named by string).
    workflow: Workflow<I, O, S, P> | string,
    input: I,
    options: StartOptions = {},
  ): Promise<TaskHandle<I, O>> {
    this.#assertOpen('start');
    const wf = typeof workflow === 'string' ? this.#workflow(workflow) : this.#workflow(workflow.name);
    const taskId = options.taskId ?? `task-${nanoid(12)}`;
    checkTaskId(taskId);
    const t = await this.#load(taskId);
    const inputId = await this.#send(t, wf, input, options);
    return new TaskHandle<I, O>(this, taskId, inputId);
  }

  /** A handle for an existing task (no I/O until used). */
  task<I = unknown, O = unknown>(taskId: string): TaskHandle<I, O> {
    return new TaskHandle<I, O>(this, taskId, undefined);
  }

  /** @internal used by TaskHandle.send */
  async sendInput(taskId: string, input: unknown, options: SendOptions = {}): Promise<string> {
    this.#assertOpen('send');
    const t = await this.#load(taskId);
    const state = t.state;
    if (!state) throw notFound(taskId);
    return this.#send(t, this.#workflow(state.workflow), input, options);
  }

  async #send(t: TaskEntry, wf: Workflow<any, any, any, any>, input: unknown, options: SendOptions): Promise<string> {
    const inputId = options.inputId ?? `in-${nanoid(12)}`;
    checkId('inputId', inputId);
    const payload = this.#inputPayload(t.id, inputId, input);
    return this.#withLock(t, async () => {
      const s = t.state;
      if (!s) {
        const policy = resolvePolicy(wf, this.#defaultExecutor);
        await this.#drive(t, [
          { type: 'TaskCreated', workflow: wf.name, kind: wf.kind, policy, formatVersion: HISTORY_FORMAT_VERSION },
          { type: 'InputQueued', inputId, input: payload, steering: false },
        ]);
        return inputId;
      }
      if (s.workflow !== wf.name) {
        throw new TaskConflictError(t.id, s.status, `it runs workflow ${s.workflow}, not ${wf.name}. Use another taskId.`);
      }
      if (options.inputId !== undefined && (await this.#hasInput(t, options.inputId))) return options.inputId;
      if (options.ifLastInputId !== undefined && s.lastInputId !== undefined && s.lastInputId !== options.ifLastInputId) {
        throw new LastInputIdPreconditionError(t.id, options.ifLastInputId, s.lastInputId);
      }
      if (s.status === 'completed') {
        throw new TaskConflictError(t.id, 'completed', `it ended (${s.outcome ?? 'unknown'}) and takes no more input. Start a new task.`);
      }
      if (s.openTurn && !t.active) await this.#drive(t); // recover inline (L3) before queueing
      const busy = t.active !== undefined || t.state!.openTurn !== undefined;
      if (busy) {
        if (!wf.steerable) {
          throw new TaskConflictError(t.id, 'in_progress', `turn ${t.state!.turn} is running and workflow ${wf.name} does not accept steering inputs. Wait for the turn, or enable steering.`);
        }
        if (t.state!.queue.length >= wf.policy.steeringMaxQueued) throw new SteeringQueueFullError(t.id, wf.policy.steeringMaxQueued);
      }
      await this.#drive(t, [{ type: 'InputQueued', inputId, input: payload, steering: busy }]);
      return inputId;
    });
  }

  /** The input as a payload, or a throw before anything is written (not JSON, over the limit). */
  #inputPayload(taskId: string, inputId: string, input: unknown): Payload {
    const subject = `Task ${taskId}, input ${inputId}`;
    let payload: Payload;
    try {
      payload = this.#converter.toPayload(input);
    } catch (err) {
      throw err instanceof PayloadEncodingError ? err.about(subject) : err;
    }
    const size = payloadSize(payload);
    if (size > this.#limits.inputBytes) throw new PayloadTooLargeError('input', size, this.#limits.inputBytes, subject);
    return payload;
  }

  /** True if the task has ever received `inputId`. Scans the history (only for caller-chosen ids). */
  async #hasInput(t: TaskEntry, inputId: string): Promise<boolean> {
    const s = t.state!;
    if (s.lastInputId === inputId || s.queue.some((q) => q.inputId === inputId)) return true;
    for await (const e of this.store.iterateEvents(t.id)) {
      if (e.type === 'InputQueued' && e.inputId === inputId) return true;
    }
    return false;
  }

  /** Cancels a task: the open turn is cancelled (cooperatively, then by force after the grace), the task completes as cancelled. */
  async cancel(taskId: string, reason = 'cancelled by caller', scope: 'task' | 'turn' = 'task'): Promise<void> {
    this.#assertOpen('cancel');
    const t = await this.#load(taskId);
    await this.#withLock(t, async () => {
      const s = t.state;
      if (!s) throw notFound(taskId);
      if (s.status === 'completed') return;
      if (s.cancelRequested || s.openTurn?.cancelRequested?.scope === 'task') return;
      if (scope === 'turn' && !s.openTurn) return;
      if (scope === 'turn' && s.openTurn?.cancelRequested) return;
      const draft: Draft = { type: 'CancelRequested', scope, turn: s.openTurn?.turn ?? 0, reason };
      const active = t.active;
      if (active) {
        await this.#append(t, [draft]);
        this.#cancelAttempt(active, 'cancel', reason);
        const grace = s.policy.graceMs;
        active.timers.push(this.#clock.setTimer(() => void this.#hardCap(t, active, 'cancel'), grace));
      } else {
        await this.#drive(t, [draft]);
      }
      if (scope === 'task') this.#settleQueued(t, 'cancelled', 'the task was cancelled before this input ran');
    });
  }

  /** Withdraws a queued input that no turn has taken yet. */
  async withdraw(taskId: string, inputId: string, reason = 'withdrawn by caller'): Promise<void> {
    this.#assertOpen('withdraw');
    const t = await this.#load(taskId);
    await this.#withLock(t, async () => {
      // Inputs still queued when a task completed never run, but they cannot be withdrawn either.
      const q = t.state?.status === 'completed' ? undefined : t.state?.queue.find((x) => x.inputId === inputId);
      if (!q) {
        throw new TurnlogError('TURNLOG_INPUT_NOT_FOUND', `Task ${taskId} has no queued input ${inputId} (it may have been taken by a turn already).`);
      }
      await this.#append(t, [{ type: 'InputWithdrawn', inputId, reason }]);
      this.#resolveWaiters(t, [inputId], { taskId, turn: 0, inputIds: [inputId], status: 'withdrawn', reason });
    });
  }

  /** What the task looks like now, with the replayer's current decision (or `corrupt`, see {@link TaskDescription.corrupt}). */
  async describe(taskId: string): Promise<TaskDescription> {
    let t: TaskEntry;
    try {
      t = await this.#load(taskId);
    } catch (err) {
      const mark = this.#corrupt.get(taskId);
      if (mark) return this.#describeCorrupt(mark, err);
      throw err;
    }
    const s = t.state;
    if (!s) throw notFound(taskId);
    const d: TaskDescription = {
      taskId,
      workflow: s.workflow,
      kind: s.kind,
      status: s.status,
      turn: s.turn,
      lastEventId: s.lastEventId,
      queuedInputIds: s.queue.map((q) => q.inputId),
      decision: t.active
        ? { kind: 'none', rule: 'owned', reason: `turn ${t.active.turn} attempt ${t.active.attempt} is running in this engine (${this.instance})` }
        : decide(s, undefined, this.#clock.now()),
    };
    if (s.outcome) d.outcome = s.outcome;
    if (s.lastInputId) d.lastInputId = s.lastInputId;
    if (s.state) d.state = this.#value(s.state);
    if (s.lastOutput) d.lastOutput = this.#value(s.lastOutput);
    if (s.openTurn) {
      d.openTurn = {
        turn: s.openTurn.turn,
        attempt: s.openTurn.attempt,
        entryMode: s.openTurn.entryMode,
        running: t.active !== undefined,
        deadline: s.openTurn.deadline,
        timeoutMarked: s.openTurn.marker !== undefined,
        cancelRequested: s.openTurn.cancelRequested !== undefined,
      };
    }
    return d;
  }

  /** A corrupt task as its summary (derived data, often still readable) and its mark tell it. */
  async #describeCorrupt(mark: CorruptMark, err: unknown): Promise<TaskDescription> {
    const s = await this.store.getSummary(mark.taskId).catch(() => undefined);
    if (!s) throw err;
    const d: TaskDescription = {
      taskId: mark.taskId,
      workflow: s.workflow,
      kind: s.kind,
      status: s.status,
      turn: s.turn,
      lastEventId: s.lastEventId,
      queuedInputIds: [],
      decision: {
        kind: 'none',
        rule: 'corrupt',
        reason: `stored record ${mark.key} cannot be read (${mark.code}); the engine runs nothing for this task and changes none of its records`,
      },
      corrupt: { key: mark.key, code: mark.code, message: mark.message },
    };
    if (s.outcome) d.outcome = s.outcome;
    if (s.lastInputId) d.lastInputId = s.lastInputId;
    return d;
  }

  /**
   * Tasks by status and workflow, a page at a time (`next` continues). Summaries are derived
   * from histories; a task isolated as corrupt carries `corrupt` (the record and the error).
   */
  async list(options: ListOptions = {}): Promise<TaskPage> {
    this.#assertOpen('list');
    return this.store.listTasks(options);
  }

  /** The task's events as stored. */
  async history(taskId: string): Promise<HistoryEvent[]> {
    return this.store.readEvents(taskId);
  }

  /**
   * Exports one task's history as a history file (the same bytes as `turnlog export`), from
   * inside the process that holds the store: the CLI cannot open a store a running engine holds.
   * @example await writeFile('chat-42.json', await engine.exportHistory('chat-42'));
   */
  async exportHistory(taskId: string, format: HistoryFileFormat = 'json'): Promise<Uint8Array> {
    const events = await this.store.readEvents(taskId);
    if (events.length === 0) throw notFound(taskId);
    return encodeHistoryFile({ taskId, events }, format);
  }

  /**
   * The outcome of the turn that took `inputId`: waits if it is queued or running, reads the
   * history if it already ended.
   */
  async turnResult<O = unknown>(taskId: string, inputId: string): Promise<TurnResult<O>> {
    const t = await this.#load(taskId);
    const s = t.state;
    if (!s) throw notFound(taskId);
    const pending =
      s.queue.some((q) => q.inputId === inputId) ||
      (s.openTurn && (s.openTurn.inputIds.includes(inputId) || s.openTurn.taken.some((q) => q.inputId === inputId)));
    if (pending && s.status !== 'completed') {
      if (this.#state !== 'open') throw this.#deferred(taskId, s.openTurn?.turn ?? s.turn, 'the engine is shut down');
      return new Promise<TurnResult<O>>((resolve, reject) => {
        const list = t.waiters.get(inputId) ?? [];
        list.push({ resolve: resolve as (v: TurnResult) => void, reject });
        t.waiters.set(inputId, list);
      });
    }
    const found = t.recent.get(inputId) ?? (await this.#findTurnResult(taskId, inputId));
    if (!found) {
      throw new TurnlogError('TURNLOG_INPUT_NOT_FOUND', `Task ${taskId} has no input ${inputId}. Use the id returned by start() or send().`);
    }
    return found as TurnResult<O>;
  }

  /**
   * @internal used by TaskHandle.nextTurn/result for a handle without an input id.
   * The result of the task's latest turn, for a handle without an input id (`engine.task(id)`):
   * a turn is open → waits for its end; none yet → waits for the first; else → the last ended
   * turn's result, read from the history. For a one-shot task that is its final outcome.
   * See docs/workflows.md "Results".
   */
  async latestTurnResult<O = unknown>(taskId: string): Promise<TurnResult<O>> {
    const t = await this.#load(taskId);
    const s = t.state;
    if (!s) throw notFound(taskId);
    if (s.status !== 'completed' && (s.openTurn || s.turn === 0)) {
      if (this.#state !== 'open') throw this.#deferred(taskId, s.openTurn?.turn ?? s.turn, 'the engine is shut down');
      return new Promise<TurnResult<O>>((resolve, reject) => {
        t.turnWaiters.push({ resolve: resolve as (v: TurnResult) => void, reject });
      });
    }
    if (s.turn === 0) return { taskId, turn: 0, inputIds: [], status: 'cancelled', reason: `the task completed (${s.outcome ?? 'unknown'}) before any turn ran` };
    const found = t.lastResult?.turn === s.turn ? t.lastResult : await this.#findLastTurnResult(taskId, s.turn);
    if (!found) throw new TurnlogError('TURNLOG_HISTORY_INVARIANT', `Task ${taskId}: turn ${s.turn} ended but its terminal event is missing. Export the task with \`turnlog export\` and inspect it.`);
    return found as TurnResult<O>;
  }

  /** Runs one recovery pass now (it also runs at open and every `scanIntervalMs`). */
  async recover(): Promise<void> {
    if (this.#state !== 'open') return;
    if (this.#scanning) return this.#scanning;
    this.#scanning = this.#recoverPass().finally(() => (this.#scanning = undefined));
    return this.#scanning;
  }

  /**
   * Stops the engine: running turns see `ctx.shutdownRequested` and an aborted signal and may
   * `exitForRecovery()`; after the grace, turns still running are left in progress (like a crash)
   * and recovered by the next engine. Waiters of unfinished turns get TURNLOG_TURN_DEFERRED.
   */
  async shutdown(options: { graceMs?: number } = {}): Promise<void> {
    if (this.#state === 'closed') return;
    if (this.#state === 'open' || this.#state === 'activating') await this.#quiesce(options.graceMs ?? this.#shutdownGraceMs);
    this.#state = 'closed';
  }

  /** Stops everything this activation started; leaves history and leases for recovery. */
  async #quiesce(graceMs: number): Promise<void> {
    this.#state = 'quiescing';
    this.#scanTimer?.cancel();
    this.#scanTimer = undefined;
    await this.#scanning?.catch(() => undefined);
    const running = [...this.#tasks.values()].filter((t) => t.active);
    for (const t of running) this.#cancelAttempt(t.active!, 'shutdown', 'engine shutdown');
    let timer: Timer | undefined;
    await Promise.race([
      Promise.all(running.map((t) => t.active?.done)),
      // Real time, not the engine clock: shutdown must end even when a test's manual clock stands still.
      new Promise<void>((r) => (timer = systemClock.setTimer(r, graceMs, { background: true }))),
    ]);
    timer?.cancel();
    for (const t of running) {
      const a = t.active;
      if (!a) continue;
      a.finalized = true;
      for (const tm of a.timers) tm.cancel();
      a.handle?.fence('engine shut down before the turn ended');
      a.handle?.kill?.('engine shutdown');
      t.active = undefined;
    }
    await Promise.all([...this.#tasks.values()].map((t) => t.chain.catch(() => undefined)));
    for (const t of this.#tasks.values()) {
      const deferred = this.#deferred(t.id, t.state?.turn ?? 0, 'the engine shut down before the turn ended; the next engine recovers it');
      for (const [, list] of t.waiters) for (const w of list) w.reject(deferred);
      for (const w of t.turnWaiters.splice(0)) w.reject(deferred);
      t.waiters.clear();
    }
    // The next activation may see another store or session: forget everything cached.
    this.#tasks.clear();
    this.#corrupt.clear();
    for (const ex of new Set(this.#executors.values())) await ex.close().catch((err) => this.#log.warn('executor close failed', { error: err }));
    if (this.#store && typeof this.#storeSpec === 'string') await this.#store.close();
    this.#store = undefined;
  }

  // -------------------------------------------------------------------------------------------
  // The driver: decide, then carry out

  /** Appends `pre` (if any) together with whatever the replayer decides next. Holds the lock. */
  async #drive(t: TaskEntry, pre: Draft[] = []): Promise<void> {
    let pending = pre;
    for (;;) {
      if (t.active || this.#state !== 'open') {
        if (pending.length) await this.#append(t, pending);
        return;
      }
      const preview = pending.length ? this.#preview(t, pending) : t.state;
      if (!preview) return;
      const decision = decide(preview, undefined, this.#clock.now());
      switch (decision.kind) {
        case 'none':
          if (pending.length) await this.#append(t, pending);
          return;
        case 'complete-task':
          await this.#append(t, [...pending, { type: 'TaskCompleted', outcome: decision.outcome }]);
          this.#settleQueued(t, 'cancelled', 'the task was cancelled before this input ran');
          return;
        case 'finalize-turn': {
          const before = preview;
          await this.#append(t, finalizeDrafts(decision, preview, pending));
          this.#afterTerminal(t, before);
          pending = [];
          continue;
        }
        case 'rerun':
        case 'start-turn':
          if (!this.#workflows.has(preview.workflow)) {
            // Not ours to run (a deploy without this workflow): leave the task untouched for
            // an engine that has it, instead of failing its turn (test: "unregistered workflow").
            if (pending.length) await this.#append(t, pending);
            this.#log.warn('task left waiting: its workflow is not registered with this engine', { taskId: t.id, workflow: preview.workflow });
            return;
          }
          await this.#startAttempt(t, decision, pending, preview);
          return;
      }
    }
  }

  async #startAttempt(
    t: TaskEntry,
    d: Extract<Decision, { kind: 'rerun' | 'start-turn' }>,
    pending: Draft[],
    preview: TaskState,
  ): Promise<void> {
    const now = this.#clock.now();
    const policy = preview.policy;
    // An exclusive store proves other instances dead: their leases count as expired.
    const current = t.lease && this.store.exclusive && t.lease.instance !== this.instance ? { ...t.lease, expiresAt: 0 } : t.lease;
    const lease = nextLease(t.id, current, { owner: this.owner, instance: this.instance, durationMs: this.#leaseMs, now }, preview.highestGeneration || 1);
    // Throws before anything is written when the workflow's executor is not configured.
    const executor = this.#executorFor(policy.executor);
    // A worker taken now lets TurnStarted name its pid (0: it waits for a free worker).
    const reservation = executor.reserve?.(t.id, preview.kind);
    const pid = policy.executor === 'inline' ? process.pid : (reservation?.pid ?? 0);
    const drafts = turnStartDrafts(d, preview, pending, {
      owner: this.owner,
      instance: this.instance,
      executor: policy.executor,
      pid,
      now,
      turnTimeoutMs: policy.turnTimeoutMs,
      lease,
      previous: t.lease,
    });
    try {
      await this.#append(t, drafts, lease, now);
    } catch (err) {
      reservation?.release();
      throw err;
    }
    const s = t.state!;
    const ot = s.openTurn!;
    const active: ActiveAttempt = { turn: ot.turn, attempt: ot.attempt, finalized: false, timers: [], renewFailures: 0, done: Promise.resolve() };
    t.active = active;
    const spec = turnSpecFor(s, this.#converter.toPayload(undefined), this.#codec);
    active.timers.push(this.#clock.setTimer(() => void this.#onDeadline(t, active), ot.deadline - now));
    this.#armRenewal(t, active);
    active.done = this.#runAttempt(t, active, executor, spec, reservation);
  }

  async #runAttempt(t: TaskEntry, active: ActiveAttempt, executor: Executor, spec: TurnSpec, reservation: Reservation | undefined): Promise<void> {
    let outcome: AttemptOutcome;
    try {
      const handle = await executor.start(spec, this.#host(t, active), reservation);
      active.handle = handle;
      // Fenced or shut down while the worker was starting: it must not run on unowned.
      if (active.finalized) {
        handle.fence('the turn was taken away while its worker started');
        handle.kill?.('the turn was taken away while its worker started');
      }
      if (active.pendingCancel) handle.cancel(...active.pendingCancel);
      outcome = await handle.outcome;
    } catch (err) {
      reservation?.release();
      const failure = errorToFailure(err);
      outcome = { kind: 'failed', failure: { ...failure, code: failure.code ?? 'TURNLOG_WORKER_START' } };
    }
    await this.#withLock(t, () => this.#finishAttempt(t, active, outcome)).catch((err) =>
      this.#logFailure('finishing a turn failed', { taskId: t.id, turn: active.turn }, err),
    );
  }

  #host(t: TaskEntry, active: ActiveAttempt): TurnHost {
    const check = () => {
      if (t.active !== active || active.finalized) {
        throw new FencedError(t.id, active.turn, active.attempt, 'the turn was finalized without it');
      }
      if (active.refused) throw active.refused;
    };
    // A zombie's record gets FencedError (never retried, docs/errors.md), not the store's error.
    const fenced = (err: unknown): never => {
      if (!isStale(err)) throw err;
      throw new FencedError(t.id, active.turn, active.attempt, `another instance took the task over at generation ${err.current}`, { cause: err });
    };
    const at = `Task ${t.id}, turn ${active.turn}`;
    return {
      recordStep: (rec) =>
        this.#withLock(t, async () => {
          check();
          const draft: Draft = { type: 'StepCompleted', turn: active.turn, attempt: active.attempt, seq: rec.seq, name: rec.name, durationMs: rec.durationMs };
          // An oversized result is recorded as the step's failure instead (same seq, no gap), and thrown.
          const tooLarge = rec.failure ? undefined : oversized(this.#limits, 'stepResult', rec.result, `${at}, step "${rec.name}" result`);
          if (rec.failure) draft.failure = rec.failure;
          else if (tooLarge) draft.failure = errorToFailure(tooLarge);
          else draft.result = rec.result ?? this.#converter.toPayload(undefined);
          await this.#append(t, [draft]).catch(fenced);
          if (tooLarge) throw tooLarge;
        }),
      recordCheckpoint: (seq, data) =>
        this.#withLock(t, async () => {
          check();
          // Nothing can stand at this seq instead, so the whole turn fails (#finishAttempt).
          const tooLarge = oversized(this.#limits, 'checkpoint', data, `${at}, checkpoint`);
          if (tooLarge) throw (active.refused = tooLarge);
          await this.#append(t, [{ type: 'Checkpointed', turn: active.turn, seq, data }]).catch(fenced);
        }),
      takeInputs: (seq) =>
        this.#withLock(t, async () => {
          check();
          const queue = t.state!.queue;
          await this.#append(t, [{ type: 'InputsTaken', turn: active.turn, seq, inputIds: queue.map((q) => q.inputId) }]).catch(fenced);
          const dec = this.#codec?.decode;
          return queue.map((q) => ({ inputId: q.inputId, input: dec ? dec(q.input) : q.input }));
        }),
      pendingInputCount: () => t.state?.queue.length ?? 0,
      now: () => this.#clock.now(),
      sleep: (ms, signal) => sleep(this.#clock, ms, signal),
    };
  }

  #cancelAttempt(active: ActiveAttempt, kind: CancelKind, reason: string): void {
    if (active.handle) active.handle.cancel(kind, reason);
    else active.pendingCancel = [kind, reason];
  }

  /** Tier 1: the marker first, then the cooperative cancel; tier 3 armed at the grace. */
  async #onDeadline(t: TaskEntry, active: ActiveAttempt): Promise<void> {
    await this.#withLock(t, async () => {
      if (t.active !== active || active.finalized || this.#state !== 'open') return;
      if (t.state!.openTurn?.marker) return;
      const now = this.#clock.now();
      const grace = t.state!.policy.graceMs;
      await this.#append(t, [{ type: 'TimeoutCancelRequested', turn: active.turn, at: now, graceUntil: now + grace }]);
      this.#cancelAttempt(active, 'timeout', `deadline ${new Date(t.state!.openTurn!.deadline).toISOString()} reached`);
      active.timers.push(this.#clock.setTimer(() => void this.#hardCap(t, active, 'timeout'), grace));
    }).catch((err) => this.#logFailure('timeout marker failed', { taskId: t.id }, err));
  }

  /** Tier 3: kill a worker (its `killed` outcome finalizes), or abandon an inline turn now. */
  async #hardCap(t: TaskEntry, active: ActiveAttempt, why: 'timeout' | 'cancel'): Promise<void> {
    await this.#withLock(t, async () => {
      if (t.active !== active || active.finalized || this.#state !== 'open') return;
      if (active.handle?.kill) {
        active.killReason = why;
        active.handle.kill(why === 'timeout' ? 'turn timeout hard cap' : 'cancel grace expired');
        return;
      }
      active.finalized = true;
      active.handle?.fence(why === 'timeout' ? 'turn timed out (hard cap)' : 'turn cancelled after the grace');
      for (const tm of active.timers) tm.cancel();
      t.active = undefined;
      const before = t.state!;
      await this.#append(t, hardCapDrafts(before, active.turn, why));
      this.#afterTerminal(t, before);
      await this.#drive(t);
    }).catch((err) => this.#logFailure('hard cap failed', { taskId: t.id }, err));
  }

  async #finishAttempt(t: TaskEntry, active: ActiveAttempt, outcome: AttemptOutcome): Promise<void> {
    for (const tm of active.timers) tm.cancel();
    if (t.active !== active || active.finalized) {
      this.#log.debug?.('late outcome discarded', { taskId: t.id, turn: active.turn, outcome: outcome.kind });
      return;
    }
    t.active = undefined;
    const s = t.state!;
    outcome = withinLimits(this.#limits, t.id, active, outcome);
    const { drafts, lease: leaseOut } = outcomeDrafts(s, active, outcome, t.lease, this.#clock.now());
    await this.#append(t, drafts, leaseOut);
    if (drafts.some(isTurnTerminal)) this.#afterTerminal(t, s);
    else if (outcome.kind === 'exit-for-recovery') this.#deferWaiters(t, s);
    await this.#drive(t);
  }

  /** After a turn's terminal: resolve the waiters of its inputs; on task completion, settle the queue. */
  #afterTerminal(t: TaskEntry, before: TaskState): void {
    const s = t.state!;
    const ot = before.openTurn;
    const terminal = t.lastTerminal;
    if (ot && terminal && terminal.turn === ot.turn) {
      const ids = [...ot.inputIds, ...ot.taken.map((q) => q.inputId)];
      const result = this.#resultFromEvent(t.id, terminal, ids);
      t.lastResult = result;
      this.#resolveWaiters(t, ids, result);
      for (const w of t.turnWaiters.splice(0)) w.resolve(result);
    }
    if (s.status === 'completed') this.#settleQueued(t, 'cancelled', `the task completed (${s.outcome}) before this input ran`);
  }

  #value(p: Payload): unknown {
    return this.#converter.fromPayload(this.#codec ? this.#codec.decode(p) : p);
  }

  async #findTurnResult(taskId: string, inputId: string): Promise<TurnResult | undefined> {
    let turn = 0;
    let seen = false;
    const turnInputs = new Map<number, string[]>();
    for await (const e of this.store.iterateEvents(taskId)) {
      if (e.type === 'InputQueued' && e.inputId === inputId) seen = true;
      else if (e.type === 'TurnStarted' && e.attempt === 1) turnInputs.set(e.turn, [...e.inputIds]);
      else if (e.type === 'InputsTaken') turnInputs.get(e.turn)?.push(...e.inputIds);
      else if (e.type === 'InputWithdrawn' && e.inputId === inputId) {
        return { taskId, turn: 0, inputIds: [inputId], status: 'withdrawn', reason: e.reason };
      } else if (e.type === 'TaskCompleted' && turn === 0 && seen) {
        return { taskId, turn: 0, inputIds: [inputId], status: 'cancelled', reason: `the task completed (${e.outcome}) before this input ran` };
      }
      if (turn === 0 && (e.type === 'TurnStarted' || e.type === 'InputsTaken') && e.inputIds.includes(inputId)) turn = e.turn;
      if (turn !== 0 && isTurnTerminal(e) && e.turn === turn) return this.#resultFromEvent(taskId, e, turnInputs.get(turn) ?? [inputId]);
    }
    return undefined;
  }

  /** The result of turn `turn` (ended), from the history: its terminal and every input it took. */
  async #findLastTurnResult(taskId: string, turn: number): Promise<TurnResult | undefined> {
    const inputIds: string[] = [];
    for await (const e of this.store.iterateEvents(taskId)) {
      if (e.type === 'TurnStarted' && e.attempt === 1 && e.turn === turn) inputIds.push(...e.inputIds);
      else if (e.type === 'InputsTaken' && e.turn === turn) inputIds.push(...e.inputIds);
      else if (isTurnTerminal(e) && e.turn === turn) return this.#resultFromEvent(taskId, e, inputIds);
    }
    return undefined;
  }

  #resultFromEvent(taskId: string, e: TurnTerminalEvent, inputIds: string[]): TurnResult {
    const r: TurnResult = { taskId, turn: e.turn, inputIds, status: 'completed' };
    switch (e.type) {
      case 'TurnCompleted':
        if (e.output) r.output = this.#value(e.output);
        break;
      case 'TurnSuspended':
        r.status = 'suspended';
        r.reason = e.reason;
        if (e.output) r.output = this.#value(e.output);
        break;
      case 'TurnFailed':
        r.status = 'failed';
        r.failure = this.#codec ? this.#codec.decodeFailure(e.failure) : e.failure;
        break;
      case 'TurnCancelled':
        r.status = 'cancelled';
        r.reason = e.reason;
        break;
      case 'TurnTimedOut':
        r.status = 'timed_out';
        r.reason = e.cause;
        break;
    }
    return r;
  }

  #resolveWaiters(t: TaskEntry, inputIds: string[], result: TurnResult): void {
    for (const id of inputIds) {
      t.recent.set(id, result);
      if (t.recent.size > RECENT_RESULTS) t.recent.delete(t.recent.keys().next().value!);
      const list = t.waiters.get(id);
      if (!list) continue;
      t.waiters.delete(id);
      for (const w of list) w.resolve(result);
    }
  }

  /** Inputs still queued when the task ended or was cancelled will never run: tell their waiters. */
  #settleQueued(t: TaskEntry, status: 'cancelled', reason: string): void {
    for (const q of t.state?.queue ?? []) {
      this.#resolveWaiters(t, [q.inputId], { taskId: t.id, turn: 0, inputIds: [q.inputId], status, reason });
    }
    // A task that completed with no turn left to end (cancelled while pending or suspended).
    if (t.state?.status === 'completed' && t.turnWaiters.length) {
      const s = t.state;
      const result: TurnResult = s.turn > 0 && t.lastResult?.turn === s.turn ? t.lastResult : { taskId: t.id, turn: s.turn, inputIds: [], status, reason };
      for (const w of t.turnWaiters.splice(0)) w.resolve(result);
    }
  }

  #deferWaiters(t: TaskEntry, before: TaskState): void {
    const ot = before.openTurn;
    if (!ot) return;
    for (const id of [...ot.inputIds, ...ot.taken.map((q) => q.inputId)]) {
      const list = t.waiters.get(id);
      if (!list) continue;
      t.waiters.delete(id);
      for (const w of list) w.reject(this.#deferred(t.id, ot.turn, 'the turn exited for recovery; the next engine re-runs it'));
    }
    for (const w of t.turnWaiters.splice(0)) w.reject(this.#deferred(t.id, ot.turn, 'the turn exited for recovery; the next engine re-runs it'));
  }

  #deferred(taskId: string, turn: number, why: string): TurnOutcomeError {
    return new TurnOutcomeError('TURNLOG_TURN_DEFERRED', taskId, turn, `${why}. Ask again on the engine that recovers it: handle.turnResult(inputId), or engine.task(taskId).result().`);
  }

  // -------------------------------------------------------------------------------------------
  // Appends, leases, loading

  /**
   * Numbers drafts into events. Drafts are fresh objects built here, so they are stamped in
   * place: an object spread over 19 event shapes costs ~7 µs each in V8, stamping ~0.1 µs.
   */
  #materialize(t: TaskEntry, drafts: Draft[], generation: number, time = this.#clock.now()): HistoryEvent[] {
    let id = t.state?.lastEventId ?? 0;
    const enc = this.#codec?.encodeEvent;
    const out: HistoryEvent[] = new Array(drafts.length);
    for (let i = 0; i < drafts.length; i++) {
      const e = drafts[i] as HistoryEvent;
      e.eventId = ++id;
      e.generation = generation;
      e.time = time;
      // Well-formed before folding: the state kept in memory is what a reload reads back.
      out[i] = wellFormedEvent(enc ? enc(e) : e, t.id);
    }
    return out;
  }

  #generation(t: TaskEntry): number {
    return Math.max(t.lease?.instance === this.instance ? t.lease.generation : 0, t.state?.highestGeneration ?? 0);
  }

  #preview(t: TaskEntry, drafts: Draft[]): TaskState {
    return fold(t.id, this.#materialize(t, drafts, this.#generation(t)), t.state);
  }

  /** Validates by folding first (an invalid batch throws before anything is written), then writes. */
  async #append(t: TaskEntry, drafts: Draft[], lease?: Lease, time?: number): Promise<void> {
    if (drafts.length === 0) return;
    const generation = lease ? lease.generation : this.#generation(t);
    const events = this.#materialize(t, drafts, generation, time);
    const next = fold(t.id, events, t.state);
    const expectedLastEventId = t.state?.lastEventId ?? 0;
    try {
      await this.store.append(t.id, events, lease ? { expectedLastEventId, generation, lease } : { expectedLastEventId, generation });
    } catch (err) {
      if (isStale(err)) this.#fenceTask(t, err);
      else if (isTurnlogError(err, 'TURNLOG_CONCURRENCY')) await this.#refresh(t, err);
      throw err;
    }
    const before = t.state;
    t.state = next;
    if (lease) t.lease = lease;
    for (const e of events) if (isTurnTerminal(e)) t.lastTerminal = e;
    for (const l of outcomeLogLines(t.id, before, events)) this.#log[l.level](l.message, l.fields);
    this.#fault?.afterAppend();
    if (next.lastEventId - t.snapshotAt >= this.#snapshotEvery) {
      t.snapshotAt = next.lastEventId;
      this.store
        .putSnapshot(t.id, { eventId: next.lastEventId, data: encodeState(next) })
        .catch((err) => this.#log.warn('snapshot write failed', { taskId: t.id, error: err }));
    }
  }

  /**
   * Another instance claimed the task at a higher generation: this engine is a zombie for it.
   * Stop the attempt (kill a worker, else cancel cooperatively), forget the cached entry so the
   * next call re-reads the history, and never retry (test: runtime/engine-fencing).
   */
  #fenceTask(t: TaskEntry, err: StaleGenerationError): void {
    const a = t.active;
    const detail = `another instance took task ${t.id} over at generation ${err.current}`;
    if (a) {
      a.finalized = true;
      for (const tm of a.timers) tm.cancel();
      a.handle?.fence(detail);
      if (a.handle?.kill) a.handle.kill(detail);
      else this.#cancelAttempt(a, 'cancel', detail);
      t.active = undefined;
    }
    if (this.#tasks.get(t.id) === t) this.#tasks.delete(t.id);
    const turn = a?.turn ?? t.state?.openTurn?.turn ?? t.state?.turn ?? 0;
    const deferred = this.#deferred(t.id, turn, `${detail}; this engine no longer runs it`);
    for (const [, list] of t.waiters) for (const w of list) w.reject(deferred);
    for (const w of t.turnWaiters.splice(0)) w.reject(deferred);
    t.waiters.clear();
    this.#log.warn('task fenced: another instance took it over; the attempt is stopped and not retried', {
      taskId: t.id,
      turn,
      attempt: a?.attempt ?? t.state?.openTurn?.attempt ?? 0,
      code: err.code,
      generation: err.generation,
      current: err.current,
    });
  }

  /** Logs a background failure; a fenced task was logged once already by #fenceTask. */
  #logFailure(message: string, fields: Record<string, unknown>, err: unknown): void {
    if (!isStale(err)) this.#log.error(message, { ...fields, error: err });
  }

  /**
   * A ConcurrencyError: someone else appended under our generation, so the cached state is
   * behind. Re-read the tail so the next call decides on the real history instead of failing
   * again forever; the failed call itself is not retried (its decision was made on stale state).
   */
  async #refresh(t: TaskEntry, err: unknown): Promise<void> {
    this.#log.warn('append lost a race with another writer; re-reading the history', { taskId: t.id, code: 'TURNLOG_CONCURRENCY', error: err });
    try {
      const events = await this.store.readEvents(t.id, { fromEventId: (t.state?.lastEventId ?? 0) + 1 });
      if (events.length) t.state = fold(t.id, events, t.state);
      t.lease = await this.store.getLease(t.id);
    } catch (e) {
      this.#log.error('re-reading the history failed; dropping the cached task', { taskId: t.id, error: e });
      if (!t.active && this.#tasks.get(t.id) === t) this.#tasks.delete(t.id);
    }
  }

  #armRenewal(t: TaskEntry, active: ActiveAttempt): void {
    const every = Math.max(1, Math.floor(this.#leaseMs / 2));
    const tick = () => {
      if (t.active !== active || active.finalized) return;
      void this.#withLock(t, async () => {
        if (t.active !== active || !t.lease) return;
        try {
          t.lease = await this.store.renewLease(t.id, t.lease, this.#leaseMs, this.#clock.now());
          active.renewFailures = 0;
        } catch (err) {
          if (isStale(err)) return this.#fenceTask(t, err);
          active.renewFailures++;
          this.#log.warn('lease renewal failed', { taskId: t.id, failures: active.renewFailures, error: err });
          if (active.renewFailures >= 3) this.#cancelAttempt(active, 'cancel', 'lease lost: three renewals failed');
        }
      }).finally(() => {
        if (t.active === active) active.timers.push(this.#clock.setTimer(tick, every));
      });
    };
    active.timers.push(this.#clock.setTimer(tick, every));
  }

  /**
   * The task's entry, loaded from the store on first use. The entry is pinned until the next
   * macrotask: its caller's continuation (microtasks) takes the lock or registers a waiter
   * first, so another task's load cannot evict it in between (test: review/engine-races).
   */
  async #load(taskId: string): Promise<TaskEntry> {
    const cached = this.#tasks.get(taskId);
    if (cached) return this.#pin(cached);
    const mark = this.#corrupt.get(taskId);
    if (mark) throw corruptError(mark);
    return this.#loadEntry(taskId);
  }

  #pin(t: TaskEntry): TaskEntry {
    t.busy++;
    setImmediate(() => t.busy--);
    return t;
  }

  async #loadEntry(taskId: string): Promise<TaskEntry> {
    let loading = this.#loading.get(taskId);
    if (!loading) {
      loading = (async () => {
        const t = new TaskEntry(taskId);
        // A snapshot is only a shortcut: an unreadable one means folding the whole history.
        const snap = await this.store.getSnapshot(taskId).catch((err: unknown) => {
          this.#log.warn('snapshot unreadable, folding the whole history', { taskId, error: err });
          return undefined;
        });
        let from: TaskState | undefined;
        if (snap) {
          try {
            from = decodeState(snap.data);
            t.snapshotAt = snap.eventId;
          } catch (err) {
            this.#log.warn('snapshot unreadable, folding the whole history', { taskId, error: err });
          }
        }
        try {
          const events = await this.store.readEvents(taskId, { fromEventId: (from?.lastEventId ?? 0) + 1 });
          t.state = events.length ? fold(taskId, events, from) : from;
          t.lease = await this.store.getLease(taskId);
        } catch (err) {
          throw await this.#isolate(taskId, err);
        }
        this.#evictIdle();
        this.#tasks.set(taskId, t);
        return this.#pin(t); // synchronously with the set: no other load can run in between
      })().finally(() => this.#loading.delete(taskId));
      this.#loading.set(taskId, loading);
    }
    return loading;
  }

  #evictIdle(): void {
    if (this.#tasks.size < this.#maxCached) return;
    for (const [id, t] of this.#tasks) {
      if (this.#tasks.size < this.#maxCached * 0.9) break;
      // A busy entry may be about to start a turn: evicting it would let a fresh entry
      // "recover" that turn while it runs (test: review/engine-races).
      if (!t.active && t.waiters.size === 0 && t.turnWaiters.length === 0 && t.busy === 0) this.#tasks.delete(id);
    }
  }

  /**
   * A task whose stored records cannot be read is isolated: logged once (key and task), marked
   * in the store (its own records untouched) and refused from then on. Returns what to throw.
   */
  async #isolate(taskId: string, err: unknown): Promise<unknown> {
    if (!isUnreadable(err)) return err;
    const key = err instanceof HistoryCorruptError ? err.key : `events/${taskId}/${(err as { eventId?: number }).eventId ?? '?'}`;
    const mark: CorruptMark = { taskId, key, code: err.code, message: err.message, time: this.#clock.now() };
    if (!this.#corrupt.has(taskId)) {
      this.#corrupt.set(taskId, mark);
      this.#log.error('task isolated: its stored history cannot be read', { taskId, key, error: err });
      await this.store.markCorrupt(mark).catch((e: unknown) => this.#log.warn('could not record the corrupt mark', { taskId, error: e }));
    }
    return err instanceof HistoryCorruptError ? err : corruptError(mark, err);
  }

  async #recoverPass(): Promise<void> {
    const now = this.#clock.now();
    const ids = new Set(await this.store.listRecoverable(now, this.instance));
    for (const status of ['suspended', 'pending'] as const) {
      let cursor: string | undefined;
      try {
        do {
          const page = await this.store.listTasks(cursor ? { status, cursor } : { status });
          for (const s of page.tasks) if (s.queued > 0 || status === 'pending') ids.add(s.taskId);
          cursor = page.next;
        } while (cursor);
      } catch (err) {
        // An unreadable summary: recover the tasks listed so far and every in-progress one.
        if (!isUnreadable(err)) throw err;
        this.#log.error('recovery could not list every task', { status, error: err });
      }
    }
    for (const id of ids) {
      if (this.#state !== 'open') return;
      if (this.#corrupt.has(id)) continue;
      let t: TaskEntry;
      try {
        t = await this.#load(id);
      } catch (err) {
        // A corrupt task was logged and marked by #isolate; every other task is still served.
        if (this.#corrupt.has(id)) continue;
        throw err;
      }
      if (t.active) continue;
      await this.#withLock(t, () => this.#drive(t)).catch((err) => this.#logFailure('recovery failed', { taskId: id }, err));
    }
    if (this.#retentionMs !== undefined && this.#state === 'open') {
      const purged = await this.store.purgeCompleted(this.#retentionMs, this.#clock.now()).catch((err: unknown) => {
        if (!isUnreadable(err)) throw err;
        this.#log.error('retention skipped: a summary cannot be read', { error: err });
        return [] as string[];
      });
      for (const id of purged) {
        const t = this.#tasks.get(id);
        if (t && t.waiters.size === 0 && t.turnWaiters.length === 0) this.#tasks.delete(id);
      }
      if (purged.length) this.#log.info('retention deleted completed tasks', { count: purged.length });
    }
  }

  #armScanner(): void {
    if (this.#scanIntervalMs <= 0) return;
    this.#scanTimer = this.#clock.setTimer(() => {
      void this.recover()
        .catch((err) => this.#log.error('recovery scan failed', { error: err }))
        .finally(() => {
          if (this.#state === 'open') this.#armScanner();
        });
    }, this.#scanIntervalMs, { background: true });
  }

  #withLock<T>(t: TaskEntry, fn: () => Promise<T>): Promise<T> {
    t.busy++;
    const run = t.chain.then(fn).finally(() => t.busy--);
    t.chain = run.catch(() => undefined);
    return run;
  }

  async #checkExecutors(): Promise<void> {
    for (const [kind, ex] of this.#executors) {
      if (!ex.check) continue;
      const mine = [...this.#workflows.values()].filter((wf) => resolvePolicy(wf, this.#defaultExecutor).executor === kind);
      if (mine.length > 0) await ex.check(mine);
    }
  }

  #executorFor(kind: ExecutorKind): Executor {
    const ex = this.#executors.get(kind);
    if (!ex) {
      throw new TurnlogError('TURNLOG_INVALID_ARGUMENT', `No ${kind} executor is configured. Pass Engine.open({ executors: { ${kind}: ... } }) or set the workflow's executor to 'inline'.`);
    }
    return ex;
  }

  #workflow(name: string): Workflow<any, any, any, any> {
    const wf = this.#workflows.get(name);
    if (!wf) {
      throw new TurnlogError('TURNLOG_WORKFLOW_NOT_FOUND', `Workflow ${name} is not registered with this engine. Registered: ${[...this.#workflows.keys()].join(', ') || '(none)'}. Pass it in Engine.open({ workflows }).`);
    }
    return wf;
  }

  #notActive(api: string): TurnlogError {
    return new TurnlogError(
      'TURNLOG_ENGINE_NOT_ACTIVATED',
      `engine.${api} used before the engine was activated (capture mode). Call engine.activate() or the snapshot lifecycle's afterRestore() first.`,
    );
  }

  #assertOpen(api: string): void {
    if (this.#state === 'inactive') throw this.#notActive(`${api}()`);
    if (this.#state !== 'open') {
      throw new TurnlogError('TURNLOG_ENGINE_CLOSED', `engine.${api}() called on an engine that is ${this.#state}. Open a new engine with Engine.open().`);
    }
  }
}

const RECENT_RESULTS = 64;

/** Any store's fencing rejection (by code, so a third-party store's error counts too). */
function isStale(err: unknown): err is StaleGenerationError {
  return isTurnlogError(err, 'TURNLOG_STALE_GENERATION');
}

/** What every API of an isolated task throws. */
function corruptError(mark: CorruptMark, cause?: unknown): HistoryCorruptError {
  return new HistoryCorruptError(
    mark.key,
    `task ${mark.taskId} is isolated, ${mark.code} found at ${new Date(mark.time).toISOString()}; \`turnlog show ${mark.taskId}\` shows what is readable`,
    cause === undefined ? {} : { cause },
  );
}

function notFound(taskId: string): TurnlogError {
  return new TurnlogError('TURNLOG_TASK_NOT_FOUND', `Task ${taskId} does not exist in this store. Check the id, or start it with engine.start().`);
}
