/**
 * A handle on one task, bound to the last input it sent (from `engine.start()` or `send()`), or
 * to no input (from `engine.task(id)`: results are then the task's latest turn's). Cheap to
 * create; all state lives in the engine and the history.
 */
import { TurnOutcomeError } from '../errors.js';
import type { HistoryEvent } from '../history/events.js';
import { failureToError } from '../history/failure.js';
import type { SendOptions, TaskClient, TaskDescription, TurnResult } from './task-client.js';
import type { StreamItem, StreamOptions } from '../stream/items.js';

export type { TurnResult } from './task-client.js';


export class TaskHandle<I = unknown, O = unknown> {
  readonly taskId: string;
  #engine: TaskClient;
  #lastInputId: string | undefined;

  /** @internal use engine.start() or engine.task() (or a remote client's equivalent) */
  constructor(engine: TaskClient, taskId: string, inputId: string | undefined) {
    this.#engine = engine;
    this.taskId = taskId;
    this.#lastInputId = inputId;
  }

  /** The id of the last input this handle sent. */
  get inputId(): string | undefined {
    return this.#lastInputId;
  }

  /** Sends an input: it starts a turn now if the task is waiting, else it is queued (steering). Returns its id. */
  async send(input: I, options: SendOptions = {}): Promise<string> {
    const id = await this.#engine.sendInput(this.taskId, input, options);
    this.#lastInputId = id;
    return id;
  }

  /**
   * The outcome of the turn that took this handle's last input. Never throws for a failed turn.
   * A handle that sent no input (`engine.task(id)`) reports the task's latest turn instead: the
   * open turn's end, else the last ended turn, else (no turn yet) the first turn's end.
   */
  nextTurn(): Promise<TurnResult<O>> {
    // Not async: the client's call is, and passing its promise on saves two promises a call.
    if (!this.#lastInputId) return this.#engine.latestTurnResult<O>(this.taskId);
    return this.#engine.turnResult<O>(this.taskId, this.#lastInputId);
  }

  /** The outcome of the turn that took `inputId`. */
  turnResult(inputId: string): Promise<TurnResult<O>> {
    return this.#engine.turnResult<O>(this.taskId, inputId);
  }

  /**
   * The output of the turn that took this handle's last input; throws TurnOutcomeError unless it
   * completed or suspended. Without an input id (`engine.task(id)`), of the task's latest turn:
   * for a one-shot task, its final result, waiting for it if needed (Temporal's `getHandle(id).result()`).
   * @example const answer = await engine.task<string, string>('report-7').result();
   */
  result(): Promise<O> {
    // Not async: one reaction on the turn's result instead of an async function awaiting it.
    try {
      return this.nextTurn().then((r) => this.#output(r));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  #output(r: TurnResult<O>): O {
    switch (r.status) {
      case 'completed':
      case 'suspended':
        return r.output as O;
      case 'failed':
        throw new TurnOutcomeError('TURNLOG_TURN_FAILED', this.taskId, r.turn, `failed: ${r.failure?.message ?? 'unknown error'}`, {
          cause: r.failure ? failureToError(r.failure) : undefined,
        });
      case 'timed_out':
        throw new TurnOutcomeError('TURNLOG_TURN_TIMED_OUT', this.taskId, r.turn, `timed out (${r.reason ?? 'timeout'}).`);
      case 'cancelled':
      case 'withdrawn':
        throw new TurnOutcomeError('TURNLOG_TURN_CANCELLED', this.taskId, r.turn, `${r.status}${r.reason ? `: ${r.reason}` : ''}.`);
    }
  }

  /** Cancels the task: the running turn is cancelled and the task completes as cancelled. */
  cancel(reason?: string): Promise<void> {
    return this.#engine.cancel(this.taskId, reason, 'task');
  }

  /** Cancels only the running turn; a multi-turn task then suspends or takes its next input. */
  cancelTurn(reason?: string): Promise<void> {
    return this.#engine.cancel(this.taskId, reason, 'turn');
  }

  /** Withdraws a queued input that no turn has taken yet. */
  withdraw(inputId: string, reason?: string): Promise<void> {
    return this.#engine.withdraw(this.taskId, inputId, reason);
  }

  /**
   * Sends signal `name` with `value`: it ends the turn's `ctx.waitFor(name)`, or waits durably
   * (buffered) until a turn waits for it. Returns the signal's id. docs/time.md
   * @example await task.signal('approval', { approved: true });
   */
  signal(name: string, value?: unknown): Promise<string> {
    return this.#engine.signal(this.taskId, name, value);
  }

  describe(): Promise<TaskDescription> {
    return this.#engine.describe(this.taskId);
  }

  history(): Promise<HistoryEvent[]> {
    return this.#engine.history(this.taskId);
  }

  /**
   * The task's turns as they happen: lifecycle items from the history and what running attempts
   * emit, in order, each with an `offset`; pass the last one as `from` to carry on after it.
   * @example for await (const item of task.stream()) if (item.kind === 'chunk') process.stdout.write(String(item.data));
   */
  stream(options: StreamOptions = {}): AsyncIterable<StreamItem> {
    return this.#engine.stream(this.taskId, options);
  }
}
