/**
 * The input path (docs/workflows.md "Sending input"): an input becomes a payload (or is refused
 * before anything is written), is queued under the task's lock with the task's creation when it
 * is new, steers a running turn or waits for one, and is recorded once however often the caller
 * retries with the same id. Also a queued input's withdrawal and a child task's first input.
 */
import { nanoid } from 'nanoid';
import { LastInputIdPreconditionError, PayloadEncodingError, PayloadTooLargeError, SteeringQueueFullError, TaskConflictError, TurnlogError, invalidArgument, taskNotFound } from '../errors.js';
import { HISTORY_FORMAT_VERSION, type Payload, type TaskParent, type TraceContext } from '../history/events.js';
import { payloadSize } from '../history/payload.js';
import type { TaskState } from '../history/state.js';
import { checkTaskId } from '../store/keys.js';
import { resolvePolicy, type Workflow } from '../workflow/define-workflow.js';
import type { SendOptions, StartOptions } from '../client/task-client.js';
import type { Appender } from './appender.js';
import { CHILD_INPUT_ID } from './children.js';
import type { Draft } from './drafts.js';
import type { Driver } from './driver.js';
import { newerStateError } from './migration.js';
import { checkId } from './options.js';
import type { Runtime } from './runtime.js';
import type { LockedTask, TaskCache, TaskEntry } from './task-cache.js';
import { newTaskId } from './task-ids.js';

export class Inputs {
  readonly #rt: Runtime;
  readonly #cache: TaskCache;
  readonly #driver: Driver;
  readonly #appender: Appender;

  constructor(rt: Runtime, cache: TaskCache, driver: Driver, appender: Appender) {
    this.#rt = rt;
    this.#cache = cache;
    this.#driver = driver;
    this.#appender = appender;
  }

  /**
   * engine.start: the task (a fresh random id needs no read) and its input; resolves with
   * `made(taskId, inputId)`. Not async, for the promises (see send): a throw is a rejection.
   */
  start<H>(workflow: Workflow<any, any, any, any> | string, input: unknown, options: StartOptions, made: (taskId: string, inputId: string) => H): Promise<H> {
    try {
      this.#rt.assertOpen('start');
      const wf = typeof workflow === 'string' ? this.#rt.workflow(workflow) : this.#rt.workflow(workflow.name);
      // Time then 96 random bits (task-ids.ts): the store trusts that nothing is stored under it (TaskCache.createNew).
      const taskId = options.taskId ?? newTaskId(this.#rt.clock.now());
      checkTaskId(taskId);
      // A fresh random id names no stored task: no reads (the store's append still checks).
      const fresh = options.taskId === undefined ? this.#cache.createNew(taskId) : undefined;
      const sent = fresh ? this.send(fresh, wf, input, options) : this.#cache.load(taskId).then((t) => this.send(t, wf, input, options));
      return sent.then((inputId) => made(taskId, inputId));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** engine.sendInput (TaskHandle.send): an input to an existing task. */
  async sendInput(taskId: string, input: unknown, options: SendOptions): Promise<string> {
    this.#rt.assertOpen('send');
    const t = this.#cache.cached(taskId) ?? (await this.#cache.load(taskId));
    const state = t.state;
    if (!state) throw taskNotFound(taskId);
    return await this.send(t, this.#rt.workflow(state.workflow), input, options);
  }

  // send and queue are not async: an async function returning a promise makes two promises and two
  // ticks more, and every promise runs the step scope's hooks. Their bad arguments throw before
  // they return; every caller awaits them inside an async function, where that is a rejection.
  send(t: TaskEntry, wf: Workflow<any, any, any, any>, input: unknown, options: SendOptions): Promise<string> {
    const inputId = options.inputId ?? `in-${nanoid(12)}`;
    checkId('inputId', inputId);
    const payload = this.#inputPayload(t.id, inputId, input);
    return this.queue(t, wf, inputId, payload, options, []);
  }

  /** Queues a prepared input under the task's lock; `before` drafts go into the same append. */
  queue(t: TaskEntry, wf: Workflow<any, any, any, any>, inputId: string, payload: Payload, options: SendOptions, before: Draft[]): Promise<string> {
    const deliverAt = scheduledTime(t.id, options.deliverAt);
    // In the sender's async context, before the lock: the trace context to record (turnlog/otel).
    const trace = this.#rt.observers.traceContext();
    const traced = trace ? { trace } : undefined;
    return this.#cache.mutate(t, (t, retry) => {
      // Past or now: an ordinary input. Later: queued, not steering, taken by no turn before then.
      const scheduled = deliverAt !== undefined && deliverAt > this.#rt.clock.now() ? { deliverAt } : undefined;
      // A new task: no async function around the drive (two promises fewer a new task).
      if (!t.state) {
        const policy = resolvePolicy(wf, this.#rt.defaultExecutor);
        return this.#driver
          .drive(t, [
            { type: 'TaskCreated', workflow: wf.name, kind: wf.kind, policy, formatVersion: HISTORY_FORMAT_VERSION },
            { type: 'InputQueued', inputId, input: payload, steering: false, ...scheduled, ...traced },
          ])
          .then(() => inputId);
      }
      return this.#queueExisting(t, wf, inputId, payload, options, before, retry, scheduled, traced);
    });
  }

  /** {@link queue} for a task that exists, holding its lock. */
  async #queueExisting(
    t: LockedTask,
    wf: Workflow<any, any, any, any>,
    inputId: string,
    payload: Payload,
    options: SendOptions,
    before: Draft[],
    retry: number,
    scheduled: { deliverAt: number } | undefined,
    traced: { trace: TraceContext } | undefined,
  ): Promise<string> {
    // A lost race after this input was written (the turn start lost it): decide again, no second copy.
    if (retry > 0 && (await this.#hasInput(t, inputId))) {
      await this.#driver.drive(t);
      return inputId;
    }
    const s = t.state!;
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
      if (this.#rt.operatorOnly) {
        throw new TaskConflictError(t.id, 'in_progress', `turn ${t.state!.turn} is running. Re-send once it has ended (an operator's re-send never steers a running turn).`);
      }
      if (!wf.steerable) {
        throw new TaskConflictError(t.id, 'in_progress', `turn ${t.state!.turn} is running and workflow ${wf.name} does not accept steering inputs. Wait for the turn, or enable steering.`);
      }
      if (t.state!.queue.filter((q) => q.deliverAt === undefined).length >= wf.policy.steeringMaxQueued) throw new SteeringQueueFullError(t.id, wf.policy.steeringMaxQueued);
    }
    await this.#driver.drive(t, [...before, { type: 'InputQueued', inputId, input: payload, steering: busy, ...traced }]);
    return inputId;
  }

  /** The input as a payload, or a throw before anything is written (not JSON, over the limit). */
  #inputPayload(taskId: string, inputId: string, input: unknown): Payload {
    const subject = `Task ${taskId}, input ${inputId}`;
    let payload: Payload;
    try {
      payload = this.#rt.converter.toPayload(input);
    } catch (err) {
      throw err instanceof PayloadEncodingError ? err.about(subject) : err;
    }
    const size = payloadSize(payload);
    if (size > this.#rt.limits.inputBytes) throw new PayloadTooLargeError('input', size, this.#rt.limits.inputBytes, subject);
    return payload;
  }

  /**
   * True if the task has ever received `inputId`. Scans the history (only for caller-chosen ids),
   * with the ids a compaction dropped (`HistoryCompacted.droppedInputIds`).
   */
  async #hasInput(t: TaskEntry, inputId: string): Promise<boolean> {
    const s = t.state!;
    if (s.lastInputId === inputId || s.queue.some((q) => q.inputId === inputId)) return true;
    for await (const e of this.#rt.store.iterateEvents(t.id)) {
      if (e.type === 'InputQueued' && e.inputId === inputId) return true;
      if (e.type === 'HistoryCompacted' && e.droppedInputIds?.includes(inputId)) return true;
    }
    return false;
  }

  /** A child task for ctx.startChild (docs/children.md), or the state of the task that has its id. */
  async createChild(childId: string, workflow: string, input: Payload, parent: TaskParent): Promise<TaskState | undefined> {
    const wf = this.#rt.workflow(workflow);
    checkTaskId(childId);
    const size = payloadSize(input);
    if (size > this.#rt.limits.inputBytes) throw new PayloadTooLargeError('input', size, this.#rt.limits.inputBytes, `Task ${parent.taskId}, child ${childId} input`);
    const t = await this.#cache.load(childId);
    return this.#cache.mutate(t, async (t) => {
      if (t.state) return t.state;
      const created: Draft = { type: 'TaskCreated', workflow: wf.name, kind: wf.kind, policy: resolvePolicy(wf, this.#rt.defaultExecutor), formatVersion: HISTORY_FORMAT_VERSION, parent };
      await this.#driver.drive(t, [created, { type: 'InputQueued', inputId: CHILD_INPUT_ID, input, steering: false }]);
      return undefined;
    });
  }

  async withdraw(taskId: string, inputId: string, reason: string, before: Draft[]): Promise<void> {
    this.#rt.assertOpen('withdraw');
    const t = await this.#cache.load(taskId);
    await this.#cache.mutate(t, async (t) => {
      if (!t.state) throw taskNotFound(taskId);
      // Inputs still queued when a task completed never run, but they cannot be withdrawn either.
      const q = t.state?.status === 'completed' ? undefined : t.state?.queue.find((x) => x.inputId === inputId);
      if (!q) {
        throw new TurnlogError('TURNLOG_INPUT_NOT_FOUND', `Task ${taskId} has no queued input ${inputId} (it may have been taken by a turn already).`);
      }
      // Its waiters are told by the seam (results.ts afterAppend), with the reason as stored.
      await this.#appender.append(t, [...before, { type: 'InputWithdrawn', inputId, reason }]);
    });
  }
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
