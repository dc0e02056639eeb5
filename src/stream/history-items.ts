/**
 * History events as durable stream items: pure, one mapper per reader (it remembers why the last
 * attempt was interrupted, to say so when the next one starts). Events with no item (lease, marker,
 * cancel request, checkpoint) map to nothing; their offsets are simply not used.
 */
import type { FailureInfo, HistoryEvent, Payload } from '../history/events.js';
import type { DurableStreamItem } from './items.js';

/** How payloads and failures as stored become what a reader sees (codecs, then the converter). */
export interface StreamDecoder {
  value(p: Payload): unknown;
  failure(f: FailureInfo): FailureInfo;
  /** A live chunk (never stored, so no payload codecs). */
  chunk(p: Payload): unknown;
}

export class HistoryItems {
  readonly #taskId: string;
  readonly #decode: StreamDecoder;
  #interruption: string | undefined;

  constructor(taskId: string, decode: StreamDecoder) {
    this.#taskId = taskId;
    this.#decode = decode;
  }

  /**
   * Items are plain literals, not `{ ...base, ... }`: on Node 20 a spread followed by more
   * properties cost ~10 µs an item, a literal ~50 ns (profile in docs/performance.md).
   */
  map(e: HistoryEvent): DurableStreamItem | undefined {
    const offset = String(e.eventId);
    const taskId = this.#taskId;
    const time = e.time;
    switch (e.type) {
      case 'InputQueued':
        return { offset, taskId, time, kind: 'input-queued', inputId: e.inputId, input: this.#decode.value(e.input), steering: e.steering };
      case 'TurnStarted': {
        if (e.attempt === 1) {
          this.#interruption = undefined;
          return { offset, taskId, time, kind: 'turn-started', turn: e.turn, attempt: 1, inputIds: [...e.inputIds], entryMode: e.entryMode };
        }
        const reason = this.#interruption ?? 'the engine that ran the previous attempt stopped before the turn ended';
        this.#interruption = undefined;
        return { offset, taskId, time, kind: 'attempt-restarted', turn: e.turn, attempt: e.attempt, reason };
      }
      case 'WorkerCrashed':
        this.#interruption = `the worker crashed (${e.message})`;
        return undefined;
      case 'WorkerKilled':
        this.#interruption = `the worker was killed (${e.reason})`;
        return undefined;
      case 'TurnExitedForRecovery':
        this.#interruption = `the attempt exited for recovery (${e.reason})`;
        return undefined;
      case 'StepCompleted': {
        const item: DurableStreamItem = { offset, taskId, time, kind: 'step-completed', turn: e.turn, seq: e.seq, name: e.name };
        if (e.failure) item.failure = this.#decode.failure(e.failure);
        else if (e.result) item.result = this.#decode.value(e.result);
        return item;
      }
      case 'InputsTaken':
        return { offset, taskId, time, kind: 'inputs-taken', turn: e.turn, inputIds: [...e.inputIds] };
      case 'TurnCompleted': {
        const item: DurableStreamItem = { offset, taskId, time, kind: 'turn-ended', turn: e.turn, status: 'completed' };
        if (e.output) item.output = this.#decode.value(e.output);
        return item;
      }
      case 'TurnSuspended': {
        const item: DurableStreamItem = { offset, taskId, time, kind: 'turn-ended', turn: e.turn, status: 'suspended', reason: e.reason };
        if (e.output) item.output = this.#decode.value(e.output);
        return item;
      }
      case 'TurnFailed':
        return { offset, taskId, time, kind: 'turn-ended', turn: e.turn, status: 'failed', failure: this.#decode.failure(e.failure) };
      case 'TurnCancelled':
        return { offset, taskId, time, kind: 'turn-ended', turn: e.turn, status: 'cancelled', reason: e.reason };
      case 'TurnTimedOut':
        return { offset, taskId, time, kind: 'turn-ended', turn: e.turn, status: 'timed_out', reason: e.cause };
      case 'TaskCompleted':
        return { offset, taskId, time, kind: 'task-completed', outcome: e.outcome };
      default:
        return undefined;
    }
  }
}
