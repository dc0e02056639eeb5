/**
 * What the engine answers from a task's history: its description with the replayer's current
 * decision (or what a corrupt task's summary still tells), its export as a history file, and a
 * fork (a new task written from the read history, docs/history.md#forks).
 */
import { TurnlogError, taskNotFound } from '../errors.js';
import { encodeHistoryFile, type HistoryFileFormat } from '../history/history-file.js';
import { encodeState } from '../history/state-codec.js';
import { decide, fold, forkEvents } from '../replay/index.js';
import { appendHistory } from '../store/append-history.js';
import type { CorruptMark } from '../store/history-store.js';
import { checkTaskId } from '../store/keys.js';
import type { TaskDescription, TurnResult } from '../client/task-client.js';
import type { TaskState } from '../history/state.js';
import type { TurnResults } from './results.js';
import type { Runtime } from './runtime.js';
import type { TaskCache, TaskEntry } from './task-cache.js';
import { newTaskId as nextTaskId } from './task-ids.js';

/** The owner of the void lease a fork leaves on the new task (the first claim takes a new generation). */
const FORK_LEASE_OWNER = 'turnlog-fork';

export class Reads {
  readonly #rt: Runtime;
  readonly #cache: TaskCache;
  readonly #results: TurnResults;

  constructor(rt: Runtime, cache: TaskCache, results: TurnResults) {
    this.#rt = rt;
    this.#cache = cache;
    this.#results = results;
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
    if (!s) throw taskNotFound(taskId);
    const d: TaskDescription = {
      taskId,
      workflow: s.workflow,
      kind: s.kind,
      status: s.status,
      turn: s.turn,
      lastEventId: s.lastEventId,
      queuedInputIds: s.queue.map((q) => q.inputId),
      decision: t.active
        ? { kind: 'none', rule: 'owned', reason: `turn ${t.active.turn} attempt ${t.active.attempt} is running in this engine (${this.#rt.instance})` }
        : decide(s, undefined, this.#rt.clock.now()),
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
    const s = await this.#rt.store.getSummary(mark.taskId).catch(() => undefined);
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

  // turnResult and latestTurnResult are not async: a cached task's waiter promise is handed
  // back as it is, so a turn's end reaches the caller two promises and a tick sooner.

  /** The outcome of the turn that took `inputId` (engine.turnResult). */
  turnResult<O>(taskId: string, inputId: string): Promise<TurnResult<O>> {
    return this.#withTask(taskId, (t, s) => this.#results.turnResult<O>(t, s, inputId));
  }

  /** The result of the task's latest turn (engine.latestTurnResult). */
  latestTurnResult<O>(taskId: string): Promise<TurnResult<O>> {
    return this.#withTask(taskId, (t, s) => this.#results.latestTurnResult<O>(t, s));
  }

  /** `fn` on the task's entry and state: at once when cached, else after its load; a throw is a rejection. */
  #withTask<R>(taskId: string, fn: (t: TaskEntry, s: TaskState) => Promise<R>): Promise<R> {
    const on = (t: TaskEntry): Promise<R> => {
      const s = t.state;
      if (!s) throw taskNotFound(taskId);
      return fn(t, s);
    };
    try {
      const t = this.#cache.cached(taskId);
      return t ? on(t) : this.#cache.load(taskId).then(on);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** One task's history as a history file (the same bytes as `turnlog export`). */
  async exportHistory(taskId: string, format: HistoryFileFormat): Promise<Uint8Array> {
    const events = await this.#rt.store.readEvents(taskId);
    if (events.length === 0) throw taskNotFound(taskId);
    return encodeHistoryFile({ taskId, events }, format);
  }

  /** Forks `taskId` at the end of turn `atTurn` into a new task; returns the new task's id (Engine.fork). */
  async fork(taskId: string, options: { atTurn: number; newTaskId?: string }): Promise<string> {
    this.#rt.assertOpen('fork');
    const newTaskId = options.newTaskId ?? nextTaskId(this.#rt.clock.now());
    checkTaskId(newTaskId);
    const src = await this.#cache.load(taskId);
    if (!src.state) throw taskNotFound(taskId);
    const events = forkEvents(taskId, await this.#rt.store.readEvents(taskId), { atTurn: options.atTurn, newTaskId });
    const t = await this.#cache.load(newTaskId);
    await this.#cache.withLock(t, async (task) => {
      if (task.state) {
        throw new TurnlogError('TURNLOG_TASK_CONFLICT', `Task ${newTaskId} already exists; nothing was forked from ${taskId}. Pass another newTaskId.`);
      }
      const state = fold(newTaskId, events);
      await appendHistory(this.#rt.store, newTaskId, events, FORK_LEASE_OWNER, this.#rt.instance);
      const data = encodeState(state);
      await this.#rt.store.putSnapshot(newTaskId, { eventId: state.lastEventId, data });
      task.state = state;
      task.snapshotAt = state.lastEventId;
      task.snapshotBytes = data.length;
      task.lease = await this.#rt.store.getLease(newTaskId);
    });
    return newTaskId;
  }
}
