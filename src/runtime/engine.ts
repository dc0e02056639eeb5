/**
 * The engine's facade: the public API (open, activate, start, send, cancel, describe, results,
 * shutdown) over its parts — options.ts, task-cache.ts (the per-task lock), appender.ts,
 * drafts.ts (pure), driver.ts, supervisor.ts, results.ts and scanner.ts. It wires them and
 * owns the activation state; see docs/architecture.md, docs/workflows.md and docs/recovery.md.
 */
import { hostname } from 'node:os';
import { nanoid } from 'nanoid';
import {
  LastInputIdPreconditionError,
  PayloadEncodingError,
  PayloadTooLargeError,
  SteeringQueueFullError,
  TaskConflictError,
  TurnlogError,
  invalidArgument,
  isTurnlogError,
} from '../errors.js';
import { HISTORY_FORMAT_VERSION, type ExecutorKind, type HistoryEvent, type OperatorActionKind, type Payload } from '../history/events.js';
import type { TaskState } from '../history/state.js';
import type { TaskParent } from '../history/events.js';
import { payloadSize } from '../history/payload.js';
import { encodeHistoryFile, type HistoryFileFormat } from '../history/history-file.js';
import { illFormedText } from '../history/well-formed.js';
import { decide, fold, forkEvents } from '../replay/index.js';
import { encodeState } from '../history/state-codec.js';
import { appendHistory } from '../store/append-history.js';
import type { CorruptMark, FlowLimitStore, HistoryStore, ListOptions, TaskPage } from '../store/history-store.js';
import { checkTaskId } from '../store/keys.js';
import type { Executor } from '../executor/executor.js';
import { InlineExecutor } from '../executor/inline-executor.js';
import { assertOutsideWorker } from '../executor/isolation.js';
import { resolvePolicy, type Workflow } from '../workflow/define-workflow.js';
import type { PayloadMode } from '../workflow/json.js';
import { TaskHandle } from '../client/task-handle.js';
import type { SendOptions, StartOptions, TaskClient, TaskDescription, TurnResult } from '../client/task-client.js';
import { Appender } from './appender.js';
import { cancelDraft, type Draft } from './drafts.js';
import { newerStateError } from './migration.js';
import { failedTurnInputs, operatorDraft, type ActionArgs } from './operator.js';
import { Driver } from './driver.js';
import { CHILD_INPUT_ID, Children } from './children.js';
import { FaultInjector } from './fault.js';
import { checkId, isCaptureMode, resolveOptions, type ActivateOptions, type EngineOptions, type EngineSettings, type OperatorOptions } from './options.js';
import { TurnResults } from './results.js';
import { Observers, type EngineObserver } from './observe.js';
import { StreamHub, type StreamSource } from '../stream/hub.js';
import type { StreamItem, StreamOptions } from '../stream/items.js';
import type { Runtime } from './runtime.js';
import { Scanner } from './scanner.js';
import { Wakeups } from './wakeups.js';
import { LocalLimiter, SharedLimiter, type Limiter } from './limits.js';
import { SCHEDULE_WORKFLOW, Schedules, type ScheduleInfo, type ScheduleSpec } from './schedules.js';
import { Supervisor } from './supervisor.js';
import { TaskCache, type TaskEntry } from './task-cache.js';
import { Watcher } from './watcher.js';
import { Waits } from './waits.js';
import { noteEngineActivation } from './work-log.js';
import { startInspection } from './inspection.js';
import type { InspectServer } from '../inspect/server.js';

/** The owner of the void lease a fork leaves on the new task (the first claim takes a new generation). */
const FORK_LEASE_OWNER = 'turnlog-fork';

export type { SendOptions, StartOptions, TaskDescription } from '../client/task-client.js';

/** What an operator action did (the CLI prints `message`; `--json` prints the whole object). */
export interface OperatorResult {
  action: OperatorActionKind;
  taskId: string;
  /** False when there was nothing to do (a cancel of a task that already ended). */
  done: boolean;
  message: string;
  /** resend/resume: the turn re-sent and the new inputs' ids. */
  turn?: number;
  inputIds?: string[];
}
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
  #store: HistoryStore | undefined;
  #owner: string | undefined;
  #instance: string | undefined;
  readonly #executors = new Map<ExecutorKind, Executor>();
  readonly #cache: TaskCache;
  readonly #results: TurnResults;
  readonly #appender: Appender;
  readonly #supervisor: Supervisor;
  readonly #driver: Driver;
  readonly #scanner: Scanner;
  readonly #streamSource: StreamSource;
  /** Live stream items and readers (docs/streaming.md); a new one per activation. */
  #hub: StreamHub;
  readonly #watcher: Watcher;
  readonly #wakeups: Wakeups;
  readonly #children: Children;
  readonly #waits: Waits;
  #state: 'inactive' | 'activating' | 'open' | 'quiescing' | 'closed' = 'inactive';
  /** The recovery pass this activation started at open. */
  #recovery: Promise<void> = Promise.resolve();
  /** The live-inspection socket while open (docs/cli.md#live-inspection). */
  #inspection: InspectServer | undefined;
  /** Stops telling observers the store's group commits (HistoryStore.onCommit). */
  #unwatchCommits: (() => void) | undefined;
  /** Flow limits of steps (docs/time.md#flow-limits); a new one per activation. */
  #limiter: Limiter;
  readonly #schedules: Schedules;
  /** The workflows given to open (the built-in schedule workflow is not one of them). */
  readonly #userWorkflows: ReadonlyMap<string, Workflow<any, any, any, any>>;

  private constructor(options: EngineOptions, operatorOnly = false) {
    const o = (this.#o = resolveOptions(options, operatorOnly));
    this.#limiter = new LocalLimiter(o.flowLimits, o.clock);
    const engine = this;
    this.#rt = {
      ...o,
      observers: new Observers(o.log, o.observerOption, {
        workerPools: () => [...new Set(engine.#executors.values())].flatMap((ex) => (ex.workerCount === undefined ? [] : [{ executor: ex.kind, workers: ex.workerCount }])),
      }),
      get store() {
        return engine.store;
      },
      get owner() {
        return engine.owner;
      },
      get instance() {
        return engine.instance;
      },
      get open() {
        return engine.#state === 'open';
      },
      get limiter() {
        return engine.#limiter;
      },
    };
    this.#cache = new TaskCache(this.#rt);
    this.#results = new TurnResults(this.#rt);
    // Turn-result waiters listen on the seam like any observer (they also need the cached entry).
    this.#rt.observers.onAppend((t, before, events) => this.#results.afterAppend(t, before, events));
    this.#streamSource = {
      readEvents: (taskId, from) => this.store.readEvents(taskId, { fromEventId: from }),
      // An exclusive store or a turn this engine runs: every event passes here, no need to poll.
      writesHere: (taskId) => this.store.exclusive || this.#cache.get(taskId)?.active !== undefined,
      // Chunks never pass the codecs (they are not stored): only the converter.
      decoder: { value: (p) => this.#results.value(p), failure: (f) => (o.codec ? o.codec.decodeFailure(f) : f), chunk: (p) => o.converter.fromPayload(p) },
      setTimer: (fn, ms) => o.clock.setTimer(fn, ms, { background: true }),
    };
    this.#hub = new StreamHub(this.#streamSource, { bufferItems: o.streamBufferItems });
    this.#rt.observers.onAppend((t, _before, events) => this.#hub.appended(t.id, events));
    this.#rt.observers.onOutput((e) => this.#hub.output(e.taskId, e.afterEventId, e.turn, e.attempt, e.item, e.time, e.dropped));
    this.#appender = new Appender(
      this.#rt,
      this.#cache,
      FaultInjector.fromEnv(),
      (t, err) => this.#supervisor.fence(t, err),
      (t) => this.#supervisor.afterRefresh(t),
    );
    this.#supervisor = new Supervisor(this.#rt, this.#cache, this.#results, this.#appender, (t) => this.#driver.drive(t));
    this.#wakeups = new Wakeups(this.#rt, (id) => this.#scanner.wake(id));
    this.#children = new Children(this.#rt, {
      create: (id, wf, input, parent) => this.#createChild(id, wf, input, parent),
      turnResult: (id, inputId) => this.turnResult(id, inputId),
      cancel: (id, reason) => this.cancel(id, reason),
    });
    const waits = (this.#waits = new Waits(this.#rt, this.#cache, this.#appender));
    this.#rt.observers.onAppend((t, _before, events) => waits.afterAppend(t, events));
    this.#driver = new Driver(this.#rt, this.#executors, this.#cache, this.#appender, this.#supervisor, (id, at) => this.#wakeups.add(id, at), waits, this.#children);
    this.#watcher = new Watcher(this.#rt, this.#cache, this.#appender, this.#results, (t) => this.#driver.drive(t));
    this.#scanner = new Scanner(this.#rt, this.#cache, this.#driver, () => this.#watcher.poll());
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

  /** The store; TURNLOG_ENGINE_NOT_ACTIVATED before activation. */
  get store(): HistoryStore {
    if (!this.#store) throw this.#notActive('store');
    return this.#store;
  }

  /** Deployment identity, e.g. `<agent>|session:<id>`; set at activation. */
  get owner(): string {
    return this.#owner ?? this.#o.ownerOption ?? `${hostname()}|turnlog`;
  }

  /** This activation's identity (new on every activation unless given). */
  get instance(): string {
    if (!this.#instance) throw this.#notActive('instance');
    return this.#instance;
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
    const phase = options.onPhase ?? (() => undefined);
    try {
      this.#owner = options.owner ?? this.#o.ownerOption ?? `${hostname()}|turnlog`;
      this.#instance = options.instance ?? this.#o.instanceOption ?? `engine-${process.pid}-${nanoid(8)}`;
      // Both are written into every TurnStarted and LeaseClaimed: refuse what has no UTF-8 form.
      if (!this.#owner.isWellFormed()) throw invalidArgument(`${illFormedText('Engine owner', this.#owner)}.`);
      if (!this.#instance.isWellFormed()) throw invalidArgument(`${illFormedText('Engine instance', this.#instance)}.`);
      // Executors check their set-up (a process executor's module) before anything is opened.
      await this.#checkExecutors();
      await phase('open');
      this.#store = await this.#makeStore();
      await this.#store.open();
      if (this.#store.supports.flowLimits && this.#o.flowLimits.size > 0) {
        this.#limiter = new SharedLimiter(this.#store as FlowLimitStore, this.#o.flowLimits, this.#o.clock, this.#instance, this.#o.leaseMs);
      }
      this.#unwatchCommits = this.#store.onCommit?.((writes) => this.#rt.observers.groupCommitted(writes));
      for (const m of await this.#store.listCorrupt()) {
        this.#cache.markCorrupt(m);
        this.#o.log.error('task isolated: its stored history cannot be read', { taskId: m.taskId, key: m.key, error: m.message });
      }
      this.#state = 'open';
      // An operator engine (openForOperator) acts on request only: no socket, watcher, scan or recovery.
      if (this.#o.operatorOnly) return;
      this.#inspection = await startInspection(this.#rt, this.#o.inspect, (op, args) => this.#operatorAction(op, args));
      this.#watcher.start();
      // Scanner before recovery: every phase that can fail runs before any turn starts, so a
      // rolled-back activation never ran (nor interrupted) a handler (test: lifecycle "scanner fails twice").
      await phase('scanner');
      this.#scanner.arm();
      await phase('recovery');
      // Recovery runs in the background: open returns at once and serves new work meanwhile
      // (docs/recovery.md "What Engine.open waits for"); `recovered()` waits for this pass.
      const pass = this.recover();
      pass.catch((err: unknown) => this.#o.log.error('recovery at open failed; the periodic scan retries', { error: err }));
      this.#recovery = pass;
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

  async #makeStore(): Promise<HistoryStore> {
    if (typeof this.#o.storeSpec !== 'string') return this.#o.storeSpec;
    if (/^postgres(ql)?:\/\//i.test(this.#o.storeSpec)) {
      // A URL is a PostgreSQL store, never a LevelDB directory named `postgres:`.
      const { createPostgresStore, parsePostgresUrl } = await import('../store/postgres-store.js');
      return createPostgresStore(parsePostgresUrl(this.#o.storeSpec));
    }
    // Loaded on first activation, never at import: native modules cannot be in a startup snapshot.
    const { LevelHistoryStore } = await import('../store/level-store.js');
    return new LevelHistoryStore(this.#o.storeSpec);
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
    // A fresh random id names no stored task: no reads (the store's append still checks).
    const t = (options.taskId === undefined ? this.#cache.createNew(taskId) : undefined) ?? (await this.#cache.load(taskId));
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
    const t = await this.#cache.load(taskId);
    const state = t.state;
    if (!state) throw notFound(taskId);
    return this.#send(t, this.#workflow(state.workflow), input, options);
  }

  async #send(t: TaskEntry, wf: Workflow<any, any, any, any>, input: unknown, options: SendOptions): Promise<string> {
    const inputId = options.inputId ?? `in-${nanoid(12)}`;
    checkId('inputId', inputId);
    const payload = this.#inputPayload(t.id, inputId, input);
    return this.#queue(t, wf, inputId, payload, options, []);
  }

  /** Queues a prepared input under the task's lock; `before` drafts go into the same append. */
  async #queue(t: TaskEntry, wf: Workflow<any, any, any, any>, inputId: string, payload: Payload, options: SendOptions, before: Draft[]): Promise<string> {
    const deliverAt = scheduledTime(t.id, options.deliverAt);
    // In the sender's async context, before the lock: the trace context to record (turnlog/otel).
    const trace = this.#rt.observers.traceContext();
    const traced = trace ? { trace } : undefined;
    return this.#cache.mutate(t, async (t, retry) => {
      // Past or now: an ordinary input. Later: queued, not steering, taken by no turn before then.
      const scheduled = deliverAt !== undefined && deliverAt > this.#rt.clock.now() ? { deliverAt } : undefined;
      // A lost race after this input was written (the turn start lost it): decide again, no second copy.
      if (retry > 0 && t.state && (await this.#hasInput(t, inputId))) {
        await this.#driver.drive(t);
        return inputId;
      }
      const s = t.state;
      if (!s) {
        const policy = resolvePolicy(wf, this.#o.defaultExecutor);
        await this.#driver.drive(t, [
          { type: 'TaskCreated', workflow: wf.name, kind: wf.kind, policy, formatVersion: HISTORY_FORMAT_VERSION },
          { type: 'InputQueued', inputId, input: payload, steering: false, ...scheduled, ...traced },
        ]);
        return inputId;
      }
      if (s.workflow !== wf.name) {
        throw new TaskConflictError(t.id, s.status, `it runs workflow ${s.workflow}, not ${wf.name}. Use another taskId.`);
      }
      if (options.inputId !== undefined && (await this.#hasInput(t, options.inputId))) return options.inputId;
      // A state of newer code: refused before the input is written (docs/versioning.md#state-migrations).
      const newer = newerStateError(t.id, wf, s);
      if (newer) throw newer;
      if (options.ifLastInputId !== undefined && s.lastInputId !== undefined && s.lastInputId !== options.ifLastInputId) {
        throw new LastInputIdPreconditionError(t.id, options.ifLastInputId, s.lastInputId);
      }
      if (s.status === 'completed') {
        throw new TaskConflictError(t.id, 'completed', `it ended (${s.outcome ?? 'unknown'}) and takes no more input. Start a new task.`);
      }
      if (s.openTurn && !t.active) await this.#driver.drive(t); // recover inline (L3) before queueing
      if (scheduled) {
        await this.#driver.drive(t, [...before, { type: 'InputQueued', inputId, input: payload, steering: false, ...scheduled, ...traced }]);
        return inputId;
      }
      const busy = t.active !== undefined || t.state!.openTurn !== undefined;
      if (busy) {
        if (this.#o.operatorOnly) {
          throw new TaskConflictError(t.id, 'in_progress', `turn ${t.state!.turn} is running. Re-send once it has ended (an operator's re-send never steers a running turn).`);
        }
        if (!wf.steerable) {
          throw new TaskConflictError(t.id, 'in_progress', `turn ${t.state!.turn} is running and workflow ${wf.name} does not accept steering inputs. Wait for the turn, or enable steering.`);
        }
        if (t.state!.queue.filter((q) => q.deliverAt === undefined).length >= wf.policy.steeringMaxQueued) throw new SteeringQueueFullError(t.id, wf.policy.steeringMaxQueued);
      }
      await this.#driver.drive(t, [...before, { type: 'InputQueued', inputId, input: payload, steering: busy, ...traced }]);
      return inputId;
    });
  }

  /** The input as a payload, or a throw before anything is written (not JSON, over the limit). */
  #inputPayload(taskId: string, inputId: string, input: unknown): Payload {
    const subject = `Task ${taskId}, input ${inputId}`;
    let payload: Payload;
    try {
      payload = this.#o.converter.toPayload(input);
    } catch (err) {
      throw err instanceof PayloadEncodingError ? err.about(subject) : err;
    }
    const size = payloadSize(payload);
    if (size > this.#o.limits.inputBytes) throw new PayloadTooLargeError('input', size, this.#o.limits.inputBytes, subject);
    return payload;
  }

  /**
   * True if the task has ever received `inputId`. Scans the history (only for caller-chosen ids),
   * with the ids a compaction dropped (`HistoryCompacted.droppedInputIds`).
   */
  async #hasInput(t: TaskEntry, inputId: string): Promise<boolean> {
    const s = t.state!;
    if (s.lastInputId === inputId || s.queue.some((q) => q.inputId === inputId)) return true;
    for await (const e of this.store.iterateEvents(t.id)) {
      if (e.type === 'InputQueued' && e.inputId === inputId) return true;
      if (e.type === 'HistoryCompacted' && e.droppedInputIds?.includes(inputId)) return true;
    }
    return false;
  }

  /** Cancels a task: the open turn is cancelled (cooperatively, then by force after the grace), the task completes as cancelled. */
  async cancel(taskId: string, reason = 'cancelled by caller', scope: 'task' | 'turn' = 'task'): Promise<void> {
    await this.#cancel(taskId, reason, scope);
  }

  /** A child task for ctx.startChild (docs/children.md), or the state of the task that has its id. */
  async #createChild(childId: string, workflow: string, input: Payload, parent: TaskParent): Promise<TaskState | undefined> {
    const wf = this.#workflow(workflow);
    checkTaskId(childId);
    const size = payloadSize(input);
    if (size > this.#o.limits.inputBytes) throw new PayloadTooLargeError('input', size, this.#o.limits.inputBytes, `Task ${parent.taskId}, child ${childId} input`);
    const t = await this.#cache.load(childId);
    return this.#cache.mutate(t, async (t) => {
      if (t.state) return t.state;
      const created: Draft = { type: 'TaskCreated', workflow: wf.name, kind: wf.kind, policy: resolvePolicy(wf, this.#o.defaultExecutor), formatVersion: HISTORY_FORMAT_VERSION, parent };
      await this.#driver.drive(t, [created, { type: 'InputQueued', inputId: CHILD_INPUT_ID, input, steering: false }]);
      return undefined;
    });
  }

  /** Cancels; `record` (an operator action) goes into the same append. False when there was nothing to cancel. */
  async #cancel(taskId: string, reason: string, scope: 'task' | 'turn', record?: (s: TaskState) => Draft): Promise<boolean> {
    this.#assertOpen('cancel');
    const t = await this.#cache.load(taskId);
    const done = await this.#cache.mutate(t, async (t) => {
      const s = t.state;
      if (!s) throw notFound(taskId);
      const cancel = cancelDraft(s, scope, reason);
      if (!cancel) return false;
      const drafts = record ? [record(s), cancel] : [cancel];
      const active = t.active;
      if (active) {
        await this.#appender.append(t, drafts);
        this.#supervisor.cancelAttempt(active, 'cancel', reason);
        const grace = s.policy.graceMs;
        this.#supervisor.armCancelGrace(t, active, grace);
      } else {
        await this.#driver.drive(t, drafts);
      }
      return true;
    });
    // Once the parent's cancel is durable; again on a repeated cancel (a cascade cut short by a crash).
    if (scope === 'task' && (done || t.state?.outcome === 'cancelled')) await this.#children.cascade(t.state, reason);
    return done;
  }

  /**
   * Sends signal `name` with `value` to a task (docs/time.md#waiting-for-an-event-approvals): it
   * ends the turn's `ctx.waitFor(name)`, or is buffered (durably) until one waits. Returns its id.
   * @example await engine.signal('refund-42', 'approval', { approved: true, by: 'ana' });
   */
  async signal(taskId: string, name: string, value?: unknown): Promise<string> {
    this.#assertOpen('signal');
    return this.#waits.signal(taskId, name, value, notFound);
  }

  /** Withdraws a queued input that no turn has taken yet. */
  async withdraw(taskId: string, inputId: string, reason = 'withdrawn by caller'): Promise<void> {
    await this.#withdraw(taskId, inputId, reason, []);
  }

  async #withdraw(taskId: string, inputId: string, reason: string, before: Draft[]): Promise<void> {
    this.#assertOpen('withdraw');
    const t = await this.#cache.load(taskId);
    await this.#cache.mutate(t, async (t) => {
      // Inputs still queued when a task completed never run, but they cannot be withdrawn either.
      const q = t.state?.status === 'completed' ? undefined : t.state?.queue.find((x) => x.inputId === inputId);
      if (!q) {
        throw new TurnlogError('TURNLOG_INPUT_NOT_FOUND', `Task ${taskId} has no queued input ${inputId} (it may have been taken by a turn already).`);
      }
      // Its waiters are told by the seam (results.ts afterAppend), with the reason as stored.
      await this.#appender.append(t, [...before, { type: 'InputWithdrawn', inputId, reason }]);
    });
  }

  /** What the task looks like now, with the replayer's current decision (or `corrupt`, see {@link TaskDescription.corrupt}). */
  async describe(taskId: string): Promise<TaskDescription> {
    let t: TaskEntry;
    try {
      t = await this.#cache.load(taskId);
    } catch (err) {
      const mark = this.#cache.corruptMark(taskId);
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
        : decide(s, undefined, this.#o.clock.now()),
    };
    if (s.outcome) d.outcome = s.outcome;
    if (s.lastInputId) d.lastInputId = s.lastInputId;
    if (s.state) d.state = this.#results.value(s.state);
    if (s.lastOutput) d.lastOutput = this.#results.value(s.lastOutput);
    if (s.parent) d.parent = s.parent;
    if (s.children) d.children = s.children;
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
   * Forks a multi-turn task at the end of turn `atTurn`: a new task whose history is the
   * original's up to that turn's terminal event (inputs still queued then and a pending task
   * cancel left out), so the conversation can go on differently from there. The original is
   * untouched; the new task's `TaskCreated` records the origin (`forkedFrom`). Throws
   * TURNLOG_TASK_NOT_FOUND, TURNLOG_TURN_NOT_ENDED, TURNLOG_WRONG_KIND (one-shot) or
   * TURNLOG_TASK_CONFLICT (`newTaskId` taken); nothing is written then. docs/history.md#forks.
   * @example const retry = await engine.fork('chat-42', { atTurn: 3, newTaskId: 'chat-42-b' });
   */
  async fork<I = unknown, O = unknown>(taskId: string, options: { atTurn: number; newTaskId?: string }): Promise<TaskHandle<I, O>> {
    this.#assertOpen('fork');
    const newTaskId = options.newTaskId ?? `task-${nanoid(12)}`;
    checkTaskId(newTaskId);
    const src = await this.#cache.load(taskId);
    if (!src.state) throw notFound(taskId);
    const events = forkEvents(taskId, await this.store.readEvents(taskId), { atTurn: options.atTurn, newTaskId });
    const t = await this.#cache.load(newTaskId);
    await this.#cache.withLock(t, async (task) => {
      if (task.state) {
        throw new TurnlogError('TURNLOG_TASK_CONFLICT', `Task ${newTaskId} already exists; nothing was forked from ${taskId}. Pass another newTaskId.`);
      }
      const state = fold(newTaskId, events);
      await appendHistory(this.store, newTaskId, events, FORK_LEASE_OWNER, this.instance);
      await this.store.putSnapshot(newTaskId, { eventId: state.lastEventId, data: encodeState(state) });
      task.state = state;
      task.snapshotAt = state.lastEventId;
      task.lease = await this.store.getLease(newTaskId);
    });
    return new TaskHandle<I, O>(this, newTaskId, undefined);
  }

  /**
   * The outcome of the turn that took `inputId`: waits if it is queued or running, reads the
   * history if it already ended.
   */
  async turnResult<O = unknown>(taskId: string, inputId: string): Promise<TurnResult<O>> {
    const t = await this.#cache.load(taskId);
    const s = t.state;
    if (!s) throw notFound(taskId);
    return this.#results.turnResult<O>(t, s, inputId);
  }


  /**
   * @internal used by TaskHandle.nextTurn/result for a handle without an input id.
   * The result of the task's latest turn, for a handle without an input id (`engine.task(id)`):
   * a turn is open → waits for its end; none yet → waits for the first; else → the last ended
   * turn's result, read from the history. For a one-shot task that is its final outcome.
   * See docs/workflows.md "Results".
   */
  async latestTurnResult<O = unknown>(taskId: string): Promise<TurnResult<O>> {
    const t = await this.#cache.load(taskId);
    const s = t.state;
    if (!s) throw notFound(taskId);
    return this.#results.latestTurnResult<O>(t, s);
  }


  /**
   * Resolves once the recovery pass that activation started has decided every task that was due
   * at open: their turns are running again (it does not wait for them to end). Rejects if that
   * pass failed (also logged; the periodic scan retries). See docs/recovery.md.
   */
  async recovered(): Promise<void> {
    return this.#recovery;
  }

  /**
   * The task's stream: its turn lifecycle from the history and the output of its running
   * attempts, in order, each with an offset; `from` carries on after an offset. It ends when the
   * task completes, the signal aborts or the engine shuts down. See docs/streaming.md.
   * @example for await (const item of engine.stream('chat-42', { from: lastOffset })) show(item);
   */
  stream(taskId: string, options: StreamOptions = {}): AsyncGenerator<StreamItem, void, undefined> {
    this.#assertOpen('stream');
    if (typeof options !== 'object' || options === null) throw invalidArgument('stream() options must be an object: { from?, signal?, pollMs? }.');
    if (options.pollMs !== undefined && !(Number.isFinite(options.pollMs) && options.pollMs > 0)) {
      throw invalidArgument(`stream() pollMs must be a positive number of milliseconds, got ${String(options.pollMs)}.`);
    }
    return this.#stream(taskId, options);
  }

  async *#stream(taskId: string, options: StreamOptions): AsyncGenerator<StreamItem, void, undefined> {
    const t = await this.#cache.load(taskId);
    if (!t.state) throw notFound(taskId);
    yield* this.#hub.read(taskId, options);
  }

  /** Runs one recovery pass now (it also runs at open and every `scanIntervalMs`). */
  async recover(): Promise<void> {
    return this.#scanner.recover();
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
    this.#hub.close();
    this.#hub = new StreamHub(this.#streamSource, { bufferItems: this.#o.streamBufferItems });
    await this.#inspection?.close();
    this.#inspection = undefined;
    this.#watcher.stop();
    this.#unwatchCommits?.();
    this.#unwatchCommits = undefined;
    await this.#scanner.stop();
    this.#wakeups.stop();
    await this.#supervisor.stopAll(graceMs);
    this.#limiter.close();
    this.#limiter = new LocalLimiter(this.#o.flowLimits, this.#o.clock);
    await Promise.all([...this.#cache.entries()].map((t) => t.chain.catch(() => undefined)));
    for (const t of this.#cache.entries()) {
      this.#results.rejectAll(t, this.#results.deferred(t.id, t.state?.turn ?? 0, 'the engine shut down before the turn ended; the next engine recovers it'));
    }
    this.#cache.clear();
    for (const ex of new Set(this.#executors.values())) await ex.close().catch((err) => this.#o.log.warn('executor close failed', { error: err }));
    if (this.#store && typeof this.#o.storeSpec === 'string') await this.#store.close();
    this.#store = undefined;
  }

  /** Operator actions the inspection socket forwards (docs/cli.md#operator-actions). */
  #operatorAction(op: string, raw: Record<string, unknown>): Promise<unknown> | undefined {
    const text = (k: string, required = true): string | undefined => {
      const v = raw[k];
      if (v === undefined && !required) return undefined;
      if (typeof v !== 'string' || v === '') throw invalidArgument(`Operator action ${op} needs a non-empty ${k}.`);
      return v;
    };
    const run = async (): Promise<unknown> => {
      const reason = text('reason', false);
      const args: ActionArgs = { taskId: text('taskId')!, by: text('by')!, ...(reason === undefined ? {} : { reason }) };
      return this.operatorAction(op as OperatorActionKind, args, raw);
    };
    // `turnlog signal`: its record is the SignalReceived event (no OperatorAction).
    if (op === 'signal') return this.signal(text('taskId')!, text('name')!, raw['value']).then((signalId) => ({ action: 'signal', done: true, signalId, message: `signal ${signalId} sent to task ${String(raw['taskId'])}` }));
    return op === 'cancel' || op === 'withdraw' || op === 'resend' || op === 'resume' ? run() : undefined;
  }

  /**
   * An operator action (the CLI's `cancel`, `withdraw`, `resend`, `resume`), recorded in the
   * history as an `OperatorAction` event with `by`, in the same append as its effect. `extra`:
   * `{ scope: 'task' | 'turn' }` (cancel), `{ inputId }` (withdraw), `{ turn }` (resend).
   * See docs/cli.md#operator-actions and {@link Engine.openForOperator}.
   */
  async operatorAction(op: string, args: ActionArgs, extra: Record<string, unknown> = {}): Promise<OperatorResult> {
    for (let races = 0; ; races++) {
      try {
        return await this.#operatorActionOnce(op, args, extra);
      } catch (err) {
        // An operator engine writes under the generation it read: a claim in between (another
        // engine recovering the task) fences it; the re-read decides again on the new lease.
        if (!this.#o.operatorOnly || races >= 2 || !isTurnlogError(err, 'TURNLOG_STALE_GENERATION')) throw err;
      }
    }
  }

  async #operatorActionOnce(op: string, args: ActionArgs, extra: Record<string, unknown>): Promise<OperatorResult> {
    const { taskId, by } = args;
    const why = args.reason ?? `${op} by ${by} (turnlog CLI)`;
    switch (op) {
      case 'cancel': {
        const scope = extra['scope'] === 'turn' ? 'turn' : 'task';
        const kind: OperatorActionKind = scope === 'turn' ? 'cancel-turn' : 'cancel-task';
        const done = await this.#cancel(taskId, why, scope, (s) => operatorDraft(kind, args, { turn: s.openTurn?.turn ?? 0 }));
        const summary = await this.store.getSummary(taskId);
        return done
          ? { action: kind, taskId, done, message: `cancel of task ${taskId}${scope === 'turn' ? `'s open turn` : ''} recorded (by ${by})` }
          : { action: kind, taskId, done, message: `nothing to cancel: task ${taskId} is ${summary?.status ?? 'unknown'}${scope === 'turn' ? ' with no open turn' : ''}, or a cancel is already pending` };
      }
      case 'withdraw': {
        const inputId = extra['inputId'];
        if (typeof inputId !== 'string' || inputId === '') throw invalidArgument('Operator action withdraw needs an inputId.');
        await this.#withdraw(taskId, inputId, why, [operatorDraft('withdraw', args, { inputId })]);
        return { action: 'withdraw', taskId, done: true, message: `input ${inputId} of task ${taskId} withdrawn (by ${by})` };
      }
      case 'resend':
      case 'resume': {
        const turn = typeof extra['turn'] === 'number' ? extra['turn'] : undefined;
        return this.#resend(op, args, op === 'resend' ? turn : undefined);
      }
      default:
        throw invalidArgument(`Unknown operator action ${op}: use cancel, withdraw, resend or resume.`);
    }
  }

  /** Queues a failed turn's inputs again as a new turn (resend), or the last failed turn's (resume). */
  async #resend(kind: 'resend' | 'resume', args: ActionArgs, turn: number | undefined): Promise<OperatorResult> {
    this.#assertOpen(kind);
    const { taskId } = args;
    const t = await this.#cache.load(taskId);
    const s = t.state;
    if (!s) throw notFound(taskId);
    const found = failedTurnInputs(taskId, await this.store.readEvents(taskId), turn);
    const wf = this.#o.operatorOnly ? operatorWorkflow(s) : this.#workflow(s.workflow);
    const decode = this.#o.codec?.decode ?? ((p: Payload) => p);
    const ids: string[] = [];
    for (const [i, q] of found.inputs.entries()) {
      const newId = `in-${nanoid(12)}`;
      const before = i === 0 ? [operatorDraft(kind, args, { turn: found.turn, inputId: q.inputId, newInputId: newId })] : [];
      ids.push(await this.#queue(t, wf, newId, decode(q.input), {}, before));
    }
    return {
      action: kind,
      taskId,
      done: true,
      turn: found.turn,
      inputIds: ids,
      message: `turn ${found.turn}'s input${ids.length > 1 ? 's' : ''} (${found.inputs.map((q) => q.inputId).join(', ')}) re-sent as ${ids.join(', ')} (by ${args.by})`,
    };
  }

  async #checkExecutors(): Promise<void> {
    for (const [kind, ex] of this.#executors) {
      if (!ex.check) continue;
      const mine = [...this.#o.workflows.values()].filter((wf) => resolvePolicy(wf, this.#o.defaultExecutor).executor === kind);
      if (mine.length > 0) await ex.check(mine);
    }
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
    if (this.#state !== 'open') {
      throw new TurnlogError('TURNLOG_ENGINE_CLOSED', `engine.${api}() called on an engine that is ${this.#state}. Open a new engine with Engine.open().`);
    }
  }
}

/**
 * What an operator engine (no workflows) knows of a task's workflow, from its history: the name
 * and policy. Not steerable: a re-send while a turn runs is refused instead of steering it.
 */
function operatorWorkflow(s: TaskState): Workflow<any, any, any, any> {
  return { name: s.workflow, kind: s.kind, steerable: false, policy: s.policy } as unknown as Workflow<any, any, any, any>;
}

function notFound(taskId: string): TurnlogError {
  return new TurnlogError('TURNLOG_TASK_NOT_FOUND', `Task ${taskId} does not exist in this store. Check the id, or start it with engine.start().`);
}

/** `deliverAt` as epoch ms, or a TurnlogError naming the task before anything is written. */
function scheduledTime(taskId: string, at: number | Date | undefined): number | undefined {
  if (at === undefined) return undefined;
  const ms = at instanceof Date ? at.getTime() : at;
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms <= 0) {
    throw invalidArgument(`Task ${taskId}: deliverAt must be a Date or a time in ms since the epoch, got ${String(at)}. Pass e.g. Date.now() + 60_000.`);
  }
  return ms;
}
