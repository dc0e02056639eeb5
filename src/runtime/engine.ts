/**
 * The engine's facade: every public method of `Engine` (open, activate, start, send, cancel,
 * describe, results, stream, shutdown, …), each a delegation to a part wired in parts.ts — the
 * input path (inputs.ts), cancels, reads, operator actions, streams, turn results — over the
 * task cache, appender, driver, supervisor and scanner. It owns the activation state machine;
 * what one activation opens is activation.ts. See docs/architecture.md "The engine".
 */
import { hostname } from 'node:os';
import { TurnlogError, invalidArgument, taskNotFound as notFound } from '../errors.js';
import type { ExecutorKind, HistoryEvent } from '../history/events.js';
import type { HistoryFileFormat } from '../history/history-file.js';
import type { HistoryStore, ListOptions, TaskPage } from '../store/history-store.js';
import type { Executor } from '../executor/executor.js';
import { InlineExecutor } from '../executor/inline-executor.js';
import { assertOutsideWorker } from '../executor/isolation.js';
import type { Workflow } from '../workflow/define-workflow.js';
import type { PayloadMode } from '../workflow/json.js';
import { TaskHandle } from '../client/task-handle.js';
import type { SendOptions, StartOptions, TaskClient, TaskDescription, TurnResult } from '../client/task-client.js';
import type { ActionArgs } from './operator.js';
import type { OperatorResult } from './operator-actions.js';
import { wireParts, type Parts } from './parts.js';
import { Activation } from './activation.js';
import { isCaptureMode, resolveOptions, type ActivateOptions, type EngineOptions, type EngineSettings, type OperatorOptions } from './options.js';
import { Observers, type EngineObserver } from './observe.js';
import type { StreamItem, StreamOptions } from '../stream/items.js';
import { EngineRuntime, type Runtime } from './runtime.js';
import { SCHEDULE_WORKFLOW, Schedules, type ScheduleInfo, type ScheduleSpec } from './schedules.js';
import { noteEngineActivation } from './work-log.js';

export type { SendOptions, StartOptions, TaskDescription } from '../client/task-client.js';

export type { OperatorResult } from './operator-actions.js';
export { isCaptureMode, type ActivateOptions, type EngineOptions, type OperatorOptions } from './options.js';

/**
 * Opens with `Engine.open()`.
 * @example
 * const engine = await Engine.open({ store: '.turnlog', workflows: [supportAgent] });
 * const task = await engine.start(supportAgent, 'my order is late', { taskId: 'chat-42' });
 * console.log(await task.nextTurn());
 * await engine.shutdown();
 */
export class Engine implements TaskClient {
  readonly #o: EngineSettings;
  readonly #rt: Runtime;
  readonly #executors = new Map<ExecutorKind, Executor>();
  /** Every job of the engine, wired (parts.ts). */
  readonly #p: Parts;
  #state: 'inactive' | 'activating' | 'open' | 'quiescing' | 'closed' = 'inactive';
  /** What the current activation opened (activation.ts). */
  readonly #act: Activation;
  readonly #schedules: Schedules;
  /** The workflows given to open (the built-in schedule workflow is not one of them). */
  readonly #userWorkflows: ReadonlyMap<string, Workflow<any, any, any, any>>;

  private constructor(options: EngineOptions, operatorOnly = false) {
    const o = (this.#o = resolveOptions(options, operatorOnly));
    const engine = this;
    const observers = new Observers(o.log, o.observerOption, {
      workerPools: () => [...new Set(engine.#executors.values())].flatMap((ex) => (ex.workerCount === undefined ? [] : [{ executor: ex.kind, workers: ex.workerCount }])),
    });
    this.#rt = new EngineRuntime(o, observers, {
      store: () => engine.store,
      owner: () => engine.owner,
      instance: () => engine.instance,
      open: () => engine.#state === 'open',
      limiter: () => engine.#act.limiter,
      assertOpen: (api) => this.#assertOpen(api),
      workflow: (name) => this.#workflow(name),
    });
    this.#p = wireParts(this.#rt, this.#executors, this);
    this.#act = new Activation(this.#rt, this.#p, this.#executors);
    // Schedules run as tasks of a built-in workflow every engine registers (docs/time.md#schedules).
    if (o.workflows.has(SCHEDULE_WORKFLOW)) throw invalidArgument(`Workflow name ${SCHEDULE_WORKFLOW} is reserved for schedules; rename your workflow.`);
    this.#userWorkflows = new Map(o.workflows);
    this.#schedules = new Schedules({
      now: () => o.clock.now(),
      hasWorkflow: (name) => this.#userWorkflows.has(name),
      start: (wf, input, opts) => this.start(wf, input, opts),
      sendInput: (taskId, input, opts) => this.sendInput(taskId, input, opts),
      describe: (taskId) => this.describe(taskId),
      list: (opts) => this.list(opts),
      turnResult: (taskId, inputId) => this.turnResult(taskId, inputId),
      warn: (message, fields) => o.log.warn(message, fields),
    });
    o.workflows.set(SCHEDULE_WORKFLOW, this.#schedules.workflow);
    this.#executors.set('inline', new InlineExecutor(o.workflows, o.converter));
    for (const [kind, ex] of Object.entries(options.executors ?? {})) if (ex) this.#executors.set(kind as ExecutorKind, ex);
  }

  /**
   * Opens the store, starts the periodic scanner and starts recovery, and returns without waiting
   * for it: `await engine.recovered()` waits until every task due at open is decided (an exclusive
   * store's lock proves earlier owners dead; on a shared store such as PostgreSQL, tasks under a
   * live lease wait for it to expire, then a periodic scan recovers them). In capture mode (`capture: true` or
   * `TURNLOG_SNAPSHOT_CAPTURE=true`) it opens nothing: call `activate()` after restore.
   */
  static async open(options: EngineOptions): Promise<Engine> {
    assertOutsideWorker('Engine.open()');
    const engine = new Engine(options);
    if (!isCaptureMode(options)) await engine.activate();
    return engine;
  }

  /**
   * Opens an engine that only acts as an operator on a store that running engines share
   * (PostgreSQL): `operatorAction` (cancel, withdraw, resend, resume) appends the action, recorded
   * with `by`, under the task's current generation (fencing) without claiming the task. It runs no
   * turn, scans nothing and recovers nothing: the engine running the task hears the append
   * (LISTEN/NOTIFY) and acts on it. `turnlog cancel|withdraw|resend|resume --store postgres://…`.
   */
  static async openForOperator(options: OperatorOptions): Promise<Engine> {
    assertOutsideWorker('Engine.openForOperator()');
    const engine = new Engine({ ...options, workflows: [], inspect: false, scanIntervalMs: 0 }, true);
    await engine.activate();
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

  /** The store; TURNLOG_ENGINE_NOT_ACTIVATED before activation, TURNLOG_ENGINE_CLOSED once shut down. */
  get store(): HistoryStore {
    const store = this.#act.store;
    if (!store) throw this.#unavailable('store');
    return store;
  }

  /** Deployment identity, e.g. `<agent>|session:<id>`; set at activation. */
  get owner(): string {
    return this.#act.owner ?? this.#o.ownerOption ?? `${hostname()}|turnlog`;
  }

  /** This activation's identity (new on every activation unless given). */
  get instance(): string {
    const instance = this.#act.instance;
    if (!instance) throw this.#unavailable('instance');
    return instance;
  }

  /**
   * Activates the engine: open the store, arm one periodic scanner, start recovery (in the
   * background; `recovered()` waits for it).
   * On failure everything it did is rolled back and the engine stays inactive (retry allowed).
   * A no-op on an active engine.
   */
  async activate(options: ActivateOptions = {}): Promise<void> {
    if (this.#state === 'open') return;
    if (this.#state !== 'inactive') throw new TurnlogError('TURNLOG_ACTIVATION_FAILED', `Engine cannot activate while ${this.#state}.`);
    this.#state = 'activating';
    const spec = this.#o.storeSpec;
    noteEngineActivation({ store: typeof spec === 'string' ? spec : (spec.constructor?.name ?? 'a HistoryStore') });
    try {
      await this.#act.open(options);
      this.#state = 'open';
      // An operator engine (openForOperator) acts on request only: no socket, watcher, scan or recovery.
      if (this.#o.operatorOnly) return;
      await this.#act.start(options);
    } catch (err) {
      await this.#quiesce(0).catch((e) => this.#o.log.warn('rollback after failed activation failed', { error: e }));
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
    await this.#quiesce(options.graceMs ?? this.#o.shutdownGraceMs);
    this.#state = 'inactive';
  }

  /**
   * Adds a listener on this engine (appends, attempt starts and ends, non-durable output);
   * returns its unsubscribe. See {@link EngineObserver} and docs/architecture.md "A new observer".
   * @example const stop = engine.observe({ eventsAppended: (e) => metrics.count(e.events.length) });
   */
  observe(observer: EngineObserver): () => void {
    if (typeof observer !== 'object' || observer === null) throw invalidArgument('engine.observe() takes an object with optional eventsAppended, attemptStarted, attemptEnded and output methods.');
    return this.#rt.observers.add(observer);
  }

  /** The workflows this engine runs, by name. */
  get workflows(): ReadonlyMap<string, Workflow<any, any, any, any>> {
    return this.#userWorkflows;
  }

  /**
   * Creates or updates schedule `id`: each `cron` slot starts `workflow` with `input` as task
   * `<id>@<slotIso>`, once, however many engines share the store (docs/time.md#schedules).
   * @example await engine.schedule('digest', { cron: '0 8 * * mon-fri', workflow: 'digest', input: {}, timezone: 'Europe/Paris' });
   */
  schedule(id: string, spec: ScheduleSpec): Promise<ScheduleInfo> {
    this.#assertOpen('schedule');
    return this.#schedules.schedule(id, spec);
  }

  /** Removes schedule `id` (TURNLOG_SCHEDULE_NOT_FOUND if there is none); started runs go on. */
  unschedule(id: string): Promise<void> {
    this.#assertOpen('unschedule');
    return this.#schedules.unschedule(id);
  }

  /** The store's schedules, by id, with their next slot. */
  schedules(): Promise<ScheduleInfo[]> {
    this.#assertOpen('schedules');
    return this.#schedules.list();
  }

  // -------------------------------------------------------------------------------------------
  // Public task API

  /**
   * Sends `input` to a task, creating it if needed, and returns its handle. A new or suspended
   * task starts a turn at once; a busy steerable task queues the input (steering).
   */
  // Not async: the input path's promise makes the handle in its one reaction (every promise runs
  // the step scope's hooks; an async function awaiting it made two more a new task).
  start<I, O, S, P extends PayloadMode = 'json'>(
    // The input type is the workflow's, JSON-checked by defineWorkflow (an extra check here
    // would stop the literal widening of inputs to a workflow named by string).
    workflow: Workflow<I, O, S, P> | string,
    input: I,
    options: StartOptions = {},
  ): Promise<TaskHandle<I, O>> {
    return this.#p.inputs.start(workflow, input, options, (taskId, inputId) => new TaskHandle<I, O>(this, taskId, inputId));
  }

  /** A handle for an existing task (no I/O until used). */
  task<I = unknown, O = unknown>(taskId: string): TaskHandle<I, O> {
    return new TaskHandle<I, O>(this, taskId, undefined);
  }

  /** @internal used by TaskHandle.send */
  // Not async, nor turnResult and latestTurnResult: the callee is, and an async function returning
  // its promise makes two promises and two ticks more (every promise runs the step scope's hooks).
  sendInput(taskId: string, input: unknown, options: SendOptions = {}): Promise<string> {
    return this.#p.inputs.sendInput(taskId, input, options);
  }

  /** Cancels a task: the open turn is cancelled (cooperatively, then by force after the grace), the task completes as cancelled. */
  async cancel(taskId: string, reason = 'cancelled by caller', scope: 'task' | 'turn' = 'task'): Promise<void> {
    await this.#p.cancels.cancel(taskId, reason, scope);
  }

  /**
   * Sends signal `name` with `value` to a task (docs/time.md#waiting-for-an-event-approvals): it
   * ends the turn's `ctx.waitFor(name)`, or is buffered (durably) until one waits. Returns its id.
   * @example await engine.signal('refund-42', 'approval', { approved: true, by: 'ana' });
   */
  async signal(taskId: string, name: string, value?: unknown): Promise<string> {
    this.#assertOpen('signal');
    return this.#p.waits.signal(taskId, name, value, notFound);
  }

  /** Withdraws a queued input that no turn has taken yet. */
  async withdraw(taskId: string, inputId: string, reason = 'withdrawn by caller'): Promise<void> {
    await this.#p.inputs.withdraw(taskId, inputId, reason, []);
  }

  /** What the task looks like now, with the replayer's current decision (or `corrupt`, see {@link TaskDescription.corrupt}). */
  async describe(taskId: string): Promise<TaskDescription> {
    return this.#p.reads.describe(taskId);
  }

  /**
   * Tasks by status and workflow, a page at a time (`next` continues). Summaries are derived
   * from histories; a task isolated as corrupt carries `corrupt` (the record and the error).
   */
  async list(options: ListOptions = {}): Promise<TaskPage> {
    this.#assertOpen('list');
    return this.store.listTasks(options);
  }

  /** The task's events as stored; TURNLOG_TASK_NOT_FOUND for a task this store does not have. */
  async history(taskId: string): Promise<HistoryEvent[]> {
    const events = await this.store.readEvents(taskId);
    if (events.length === 0) throw notFound(taskId);
    return events;
  }

  /**
   * Exports one task's history as a history file (the same bytes as `turnlog export`), from
   * inside the process that holds the store: the CLI cannot open a store a running engine holds.
   * @example await writeFile('chat-42.json', await engine.exportHistory('chat-42'));
   */
  async exportHistory(taskId: string, format: HistoryFileFormat = 'json'): Promise<Uint8Array> {
    return this.#p.reads.exportHistory(taskId, format);
  }

  /**
   * Forks a multi-turn task at the end of turn `atTurn`: a new task whose history is the
   * original's up to that turn's terminal event (inputs still queued then and a pending task
   * cancel left out), so the conversation can go on differently from there. The original is
   * untouched; the new task's `TaskCreated` records the origin (`forkedFrom`). Throws
   * TURNLOG_TASK_NOT_FOUND, TURNLOG_TURN_NOT_ENDED, TURNLOG_WRONG_KIND (one-shot) or
   * TURNLOG_TASK_CONFLICT (`newTaskId` taken); nothing is written then. docs/history.md#forks.
   * @example const retry = await engine.fork('chat-42', { atTurn: 3, newTaskId: 'chat-42-b' });
   */
  async fork<I = unknown, O = unknown>(taskId: string, options: { atTurn: number; newTaskId?: string }): Promise<TaskHandle<I, O>> {
    return new TaskHandle<I, O>(this, await this.#p.reads.fork(taskId, options), undefined);
  }

  /**
   * The outcome of the turn that took `inputId`: waits if it is queued or running, reads the
   * history if it already ended.
   */
  turnResult<O = unknown>(taskId: string, inputId: string): Promise<TurnResult<O>> {
    return this.#p.reads.turnResult<O>(taskId, inputId);
  }

  /**
   * @internal used by TaskHandle.nextTurn/result for a handle without an input id.
   * The result of the task's latest turn, for a handle without an input id (`engine.task(id)`):
   * a turn is open → waits for its end; none yet → waits for the first; else → the last ended
   * turn's result, read from the history. For a one-shot task that is its final outcome.
   * See docs/workflows.md "Results".
   */
  latestTurnResult<O = unknown>(taskId: string): Promise<TurnResult<O>> {
    return this.#p.reads.latestTurnResult<O>(taskId);
  }

  /**
   * Resolves once the recovery pass that activation started has decided every task that was due
   * at open: their turns are running again (it does not wait for them to end). Rejects if that
   * pass failed (also logged; the periodic scan retries). See docs/recovery.md.
   */
  async recovered(): Promise<void> {
    return this.#act.recovery;
  }

  /**
   * The task's stream: its turn lifecycle from the history and the output of its running
   * attempts, in order, each with an offset; `from` carries on after an offset. It ends when the
   * task completes, the signal aborts or the engine shuts down. See docs/streaming.md.
   * @example for await (const item of engine.stream('chat-42', { from: lastOffset })) show(item);
   */
  stream(taskId: string, options: StreamOptions = {}): AsyncGenerator<StreamItem, void, undefined> {
    return this.#p.streams.read(taskId, options);
  }

  /**
   * Runs a recovery pass that starts no earlier than this call, and resolves when it ends (a pass
   * also runs at open and every `scanIntervalMs`). With a pass already in flight, one more runs
   * after it, so what was sent or left running before the call is seen.
   */
  async recover(): Promise<void> {
    return this.#p.scanner.recover();
  }

  /**
   * Stops the engine: running turns see `ctx.shutdownRequested` and an aborted signal and may
   * `exitForRecovery()`; after the grace, turns still running are left in progress (like a crash)
   * and recovered by the next engine. Waiters of unfinished turns get TURNLOG_TURN_DEFERRED.
   */
  async shutdown(options: { graceMs?: number } = {}): Promise<void> {
    if (this.#state === 'closed') return;
    if (this.#state === 'open' || this.#state === 'activating') await this.#quiesce(options.graceMs ?? this.#o.shutdownGraceMs);
    this.#state = 'closed';
  }

  /** Stops everything this activation started; leaves history and leases for recovery. */
  async #quiesce(graceMs: number): Promise<void> {
    this.#state = 'quiescing';
    await this.#act.quiesce(graceMs);
  }

  /**
   * An operator action (the CLI's `cancel`, `withdraw`, `resend`, `resume`), recorded in the
   * history as an `OperatorAction` event with `by`, in the same append as its effect. `extra`:
   * `{ scope: 'task' | 'turn' }` (cancel), `{ inputId }` (withdraw), `{ turn }` (resend).
   * See docs/cli.md#operator-actions and {@link Engine.openForOperator}.
   */
  async operatorAction(op: string, args: ActionArgs, extra: Record<string, unknown> = {}): Promise<OperatorResult> {
    return this.#p.operator.run(op, args, extra);
  }

  #workflow(name: string): Workflow<any, any, any, any> {
    const wf = this.#o.workflows.get(name);
    if (!wf) {
      throw new TurnlogError('TURNLOG_WORKFLOW_NOT_FOUND', `Workflow ${name} is not registered with this engine. Registered: ${[...this.#userWorkflows.keys()].join(', ') || '(none)'}. Pass it in Engine.open({ workflows }).`);
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
    if (this.#state !== 'open') throw this.#closed(`${api}()`);
  }

  #closed(api: string): TurnlogError {
    return new TurnlogError('TURNLOG_ENGINE_CLOSED', `engine.${api} called on an engine that is ${this.#state}. Open a new engine with Engine.open().`);
  }

  /**
   * What a getter of the activation's parts throws when there is none: shut down (or shutting
   * down) is TURNLOG_ENGINE_CLOSED, as docs/errors.md says; only an engine that can still be
   * activated (capture mode, deactivated) is TURNLOG_ENGINE_NOT_ACTIVATED. A stream made before
   * shutdown and first read after it reads the store through here (test: runtime/streams).
   */
  #unavailable(api: string): TurnlogError {
    return this.#state === 'closed' || this.#state === 'quiescing' ? this.#closed(api) : this.#notActive(api);
  }
}
