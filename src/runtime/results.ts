/**
 * Turn results and their waiters: what `handle.nextTurn()` and `turnResult()` wait for, how a
 * turn's terminal event becomes a TurnResult, and who is told when a turn ends, is deferred or
 * its inputs never run. No appends, no timers: it reads the history only to answer after the fact.
 * Waiters are settled from the observation seam (`afterAppend`), by the events that settle them.
 */
import { TurnOutcomeError, TurnlogError } from '../errors.js';
import { isTurnTerminal, type HistoryEvent, type Payload, type TurnTerminalEvent } from '../history/events.js';
import type { TaskState } from '../history/state.js';
import type { TurnResult } from '../client/task-client.js';
import type { Runtime } from './runtime.js';
import type { TaskEntry } from './task-cache.js';

const RECENT_RESULTS = 64;

export class TurnResults {
  readonly #rt: Runtime;

  constructor(rt: Runtime) {
    this.#rt = rt;
  }

  /**
   * The outcome of the turn that took `inputId`: waits if it is queued or running, reads the
   * history if it already ended.
   */
  turnResult<O = unknown>(t: TaskEntry, s: TaskState, inputId: string): Promise<TurnResult<O>> {
    const pending =
      s.queue.some((q) => q.inputId === inputId) ||
      (s.openTurn && (s.openTurn.inputIds.includes(inputId) || s.openTurn.taken.some((q) => q.inputId === inputId)));
    if (pending && s.status !== 'completed') {
      if (!this.#rt.open) return Promise.reject(this.deferred(t.id, s.openTurn?.turn ?? s.turn, 'the engine is shut down'));
      // The waiter's own promise, not an async function's wrapping it: two promises and two ticks
      // less a waited turn (every promise runs the step scope's hooks).
      return new Promise<TurnResult<O>>((resolve, reject) => {
        const list = t.waiters.get(inputId) ?? [];
        list.push({ resolve: resolve as (v: TurnResult) => void, reject });
        if (t.waiters.size === 0) t.waiters = new Map(); // its own map: it starts as the shared empty one
        t.waiters.set(inputId, list);
      });
    }
    return this.#endedResult<O>(t, inputId);
  }

  /** The outcome of an input whose turn ended (or that never ran): kept, or read from the history. */
  async #endedResult<O>(t: TaskEntry, inputId: string): Promise<TurnResult<O>> {
    const taskId = t.id;
    const found = t.recent.get(inputId) ?? (await this.#findTurnResult(taskId, inputId));
    if (typeof found === 'number') {
      throw new TurnlogError(
        'TURNLOG_INPUT_NOT_FOUND',
        `Task ${taskId} has no input ${inputId} in its kept history: turns 1..${found} were compacted (docs/history.md#compaction), so the result of an input they took is no longer stored. Read it before the turn is compacted, or raise compaction.keepTurns.`,
      );
    }
    if (!found) {
      throw new TurnlogError('TURNLOG_INPUT_NOT_FOUND', `Task ${taskId} has no input ${inputId}. Use the id returned by start() or send().`);
    }
    return found as TurnResult<O>;
  }

  /**
   * The result of the task's latest turn, for a handle without an input id (`engine.task(id)`):
   * a turn is open → waits for its end; none yet → waits for the first; else → the last ended
   * turn's result, read from the history. For a one-shot task that is its final outcome.
   * See docs/workflows.md "Results".
   */
  async latestTurnResult<O = unknown>(t: TaskEntry, s: TaskState): Promise<TurnResult<O>> {
    const taskId = t.id;
    if (s.status !== 'completed' && (s.openTurn || s.turn === 0)) {
      if (!this.#rt.open) throw this.deferred(taskId, s.openTurn?.turn ?? s.turn, 'the engine is shut down');
      return new Promise<TurnResult<O>>((resolve, reject) => {
        t.turnWaiters.push({ resolve: resolve as (v: TurnResult) => void, reject });
      });
    }
    if (s.turn === 0) return { taskId, turn: 0, inputIds: [], status: 'cancelled', reason: `the task completed (${s.outcome ?? 'unknown'}) before any turn ran` };
    const found = t.lastResult?.turn === s.turn ? t.lastResult : await this.#findLastTurnResult(taskId, s.turn);
    if (!found) throw new TurnlogError('TURNLOG_HISTORY_INVARIANT', `Task ${taskId}: turn ${s.turn} ended but its terminal event is missing. Export the task with \`turnlog export\` and inspect it.`);
    return found as TurnResult<O>;
  }

  /**
   * The seam's listener (observe.ts): what `events`, just appended over `before`, settle — a turn's
   * terminal (its inputs' waiters), an exit for recovery (deferred), a withdraw, a task cancel or end
   * (queued inputs never run). Called for this engine's appends and another writer's, read back.
   */
  afterAppend(t: TaskEntry, before: TaskState | undefined, events: readonly HistoryEvent[]): void {
    const open = before?.openTurn?.turn;
    let terminal = false;
    let exited = false;
    let settle = false;
    for (const e of events) {
      if (e.type === 'InputWithdrawn') this.resolveWaiters(t, [e.inputId], { taskId: t.id, turn: 0, inputIds: [e.inputId], status: 'withdrawn', reason: e.reason });
      else if (isTurnTerminal(e)) terminal ||= e.turn === open;
      else if (e.type === 'TurnExitedForRecovery') exited ||= e.turn === open;
      else if (e.type === 'CancelRequested') settle ||= e.scope === 'task';
      else if (e.type === 'TaskCompleted') settle ||= !terminal;
    }
    if (terminal) this.afterTerminal(t, before!);
    else if (exited) this.deferWaiters(t, before!);
    // After afterTerminal: a task cancel's reason is what its queued inputs' results keep.
    if (settle) this.settleQueued(t, 'cancelled', 'the task was cancelled before this input ran');
  }

  /** Rejects every waiter of the task with `err` (the task was fenced, or the engine shut down). */
  rejectAll(t: TaskEntry, err: unknown): void {
    for (const [, list] of t.waiters) for (const w of list) w.reject(err);
    for (const w of t.turnWaiters.splice(0)) w.reject(err);
    t.waiters.clear();
  }

  /** After a turn's terminal: resolve the waiters of its inputs; on task completion, settle the queue. */
  afterTerminal(t: TaskEntry, before: TaskState): void {
    const s = t.state!;
    const ot = before.openTurn;
    const terminal = t.lastTerminal;
    if (ot && terminal && terminal.turn === ot.turn) {
      const ids = [...ot.inputIds, ...ot.taken.map((q) => q.inputId)];
      const result = this.#resultFromEvent(t.id, terminal, ids);
      t.lastResult = result;
      this.resolveWaiters(t, ids, result);
      for (const w of t.turnWaiters.splice(0)) w.resolve(result);
    }
    if (s.status === 'completed') this.settleQueued(t, 'cancelled', `the task completed (${s.outcome}) before this input ran`);
  }

  /**
   * After a re-read of another engine's appends: resolve the waiters whose input's turn ended
   * (or was withdrawn, or will never run), and turn waiters once no turn is open. Reads the history.
   */
  async settleEnded(t: TaskEntry): Promise<void> {
    const s = t.state;
    if (!s) return;
    for (const id of [...t.waiters.keys()]) {
      const pending = s.queue.some((q) => q.inputId === id) || (s.openTurn && (s.openTurn.inputIds.includes(id) || s.openTurn.taken.some((q) => q.inputId === id)));
      if (pending && s.status !== 'completed') continue;
      const r = t.recent.get(id) ?? (await this.#findTurnResult(t.id, id));
      if (r && typeof r !== 'number') this.resolveWaiters(t, [id], r);
    }
    if (t.turnWaiters.length && !s.openTurn && s.turn > 0) {
      const r = t.lastResult?.turn === s.turn ? t.lastResult : await this.#findLastTurnResult(t.id, s.turn);
      if (r) for (const w of t.turnWaiters.splice(0)) w.resolve(r);
    }
  }

  value(p: Payload): unknown {
    return this.#rt.converter.fromPayload(this.#rt.codec ? this.#rt.codec.decode(p) : p);
  }

  async #findTurnResult(taskId: string, inputId: string): Promise<TurnResult | number | undefined> {
    let turn = 0;
    let seen = false;
    let compactedTurns = 0;
    const turnInputs = new Map<number, string[]>();
    for await (const e of this.#rt.store.iterateEvents(taskId)) {
      // A compaction that lists its dropped inputs (proto field 5) says whether this was one.
      if (e.type === 'HistoryCompacted') compactedTurns = e.droppedInputIds === undefined || e.droppedInputIds.includes(inputId) ? e.turns : 0;
      else if (e.type === 'InputQueued' && e.inputId === inputId) seen = true;
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
    // Not in the kept events: with a compacted history, an input of a dropped turn.
    return compactedTurns > 0 ? compactedTurns : undefined;
  }

  /** The result of turn `turn` (ended), from the history: its terminal and every input it took. */
  async #findLastTurnResult(taskId: string, turn: number): Promise<TurnResult | undefined> {
    const inputIds: string[] = [];
    for await (const e of this.#rt.store.iterateEvents(taskId)) {
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
        if (e.output) r.output = this.value(e.output);
        break;
      case 'TurnSuspended':
        r.status = 'suspended';
        r.reason = e.reason;
        if (e.output) r.output = this.value(e.output);
        break;
      case 'TurnFailed':
        r.status = 'failed';
        r.failure = this.#rt.codec ? this.#rt.codec.decodeFailure(e.failure) : e.failure;
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

  resolveWaiters(t: TaskEntry, inputIds: string[], result: TurnResult): void {
    // Its own map at the first result: it starts as the shared empty one (TaskEntry).
    if (inputIds.length > 0 && t.recent.size === 0) t.recent = new Map();
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
  settleQueued(t: TaskEntry, status: 'cancelled', reason: string): void {
    for (const q of t.state?.queue ?? []) {
      this.resolveWaiters(t, [q.inputId], { taskId: t.id, turn: 0, inputIds: [q.inputId], status, reason });
    }
    // A task that completed with no turn left to end (cancelled while pending or suspended).
    if (t.state?.status === 'completed' && t.turnWaiters.length) {
      const s = t.state;
      const result: TurnResult = s.turn > 0 && t.lastResult?.turn === s.turn ? t.lastResult : { taskId: t.id, turn: s.turn, inputIds: [], status, reason };
      for (const w of t.turnWaiters.splice(0)) w.resolve(result);
    }
  }

  deferWaiters(t: TaskEntry, before: TaskState): void {
    const ot = before.openTurn;
    if (!ot) return;
    for (const id of [...ot.inputIds, ...ot.taken.map((q) => q.inputId)]) {
      const list = t.waiters.get(id);
      if (!list) continue;
      t.waiters.delete(id);
      for (const w of list) w.reject(this.deferred(t.id, ot.turn, 'the turn exited for recovery; the next engine re-runs it'));
    }
    for (const w of t.turnWaiters.splice(0)) w.reject(this.deferred(t.id, ot.turn, 'the turn exited for recovery; the next engine re-runs it'));
  }

  deferred(taskId: string, turn: number, why: string): TurnOutcomeError {
    return new TurnOutcomeError('TURNLOG_TURN_DEFERRED', taskId, turn, `${why}. Ask again on the engine that recovers it: handle.turnResult(inputId), or engine.task(taskId).result().`);
  }
}
