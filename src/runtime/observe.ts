/**
 * The observation seam: typed engine listeners (events appended, attempt started and ended,
 * non-durable output). Streaming, tracing, the CLI's live mode and the turn-result waiters all
 * listen here. A throwing listener is logged and never breaks the engine (invariant 10).
 */
import type { AttemptOutcome } from '../attempt/host.js';
import type { EntryMode, ExecutorKind, HistoryEvent } from '../history/events.js';
import type { TaskState } from '../history/state.js';
import type { Logger } from '../logger.js';
import type { Runtime } from './runtime.js';
import type { ActiveAttempt, TaskEntry } from './task-cache.js';

export type { AttemptOutcome } from '../attempt/host.js';

/** Events just written to a task's history (stamped, after payload codecs), in order. */
export interface EventsAppendedEvent {
  taskId: string;
  events: readonly HistoryEvent[];
  /** The generation they were written under. */
  generation: number;
  /** `engine`: this engine appended them; `other-writer`: read back after a ConcurrencyError. */
  origin: 'engine' | 'other-writer';
}

/** This engine started an attempt of a turn (its TurnStarted is durable). */
export interface AttemptStartedEvent {
  taskId: string;
  workflow: string;
  turn: number;
  attempt: number;
  entryMode: EntryMode;
  executor: ExecutorKind;
  /** Recorded calls a recovered attempt replays instead of running again. */
  replayedCalls: number;
  time: number;
}

/** An attempt this engine started has ended, with its outcome as the executor reported it. */
export interface AttemptEndedEvent {
  taskId: string;
  turn: number;
  attempt: number;
  outcome: AttemptOutcome;
  time: number;
}

/** Non-durable output of a running attempt (`ctx.emit`): never recorded, lost on a crash. */
export interface OutputEvent {
  taskId: string;
  turn: number;
  attempt: number;
  /** The chunk as emitted (a JSON value). */
  chunk: unknown;
  time: number;
}

/**
 * A listener on an engine. Every method is optional and called synchronously on the engine's
 * path: keep it cheap and hand slow work off. A throw is logged (`observer failed`) and ignored.
 * @example
 * const stop = engine.observe({ attemptEnded: (e) => console.log(e.taskId, e.outcome.kind) });
 */
export interface EngineObserver {
  eventsAppended?(e: EventsAppendedEvent): void;
  attemptStarted?(e: AttemptStartedEvent): void;
  attemptEnded?(e: AttemptEndedEvent): void;
  output?(e: OutputEvent): void;
}

/** The engine's own listener on appends: it also sees the cached entry and the state before. */
export type AppendListener = (t: TaskEntry, before: TaskState | undefined, events: readonly HistoryEvent[]) => void;

/** The registry the engine's parts call. One per engine. */
export class Observers {
  readonly #log: Logger;
  readonly #internal: AppendListener[] = [];
  #list: EngineObserver[] = [];

  constructor(log: Logger, initial: readonly EngineObserver[] = []) {
    this.#log = log;
    for (const o of initial) this.add(o);
  }

  /** Adds a listener; returns its unsubscribe (idempotent). */
  add(o: EngineObserver): () => void {
    // A new array per change: a listener that unsubscribes during a call does not skip another.
    this.#list = [...this.#list, o];
    return () => {
      this.#list = this.#list.filter((x) => x !== o);
    };
  }

  /** The engine's own append listener (turn-result waiters), called before the public ones. */
  onAppend(l: AppendListener): void {
    this.#internal.push(l);
  }

  /** True when some public listener wants output (the emit path skips work otherwise). */
  get wantsOutput(): boolean {
    return this.#list.some((o) => o.output);
  }

  appended(t: TaskEntry, before: TaskState | undefined, events: readonly HistoryEvent[], origin: EventsAppendedEvent['origin']): void {
    for (const l of this.#internal) this.#guard('eventsAppended', t.id, () => l(t, before, events));
    if (this.#list.length === 0 || events.length === 0) return;
    const e: EventsAppendedEvent = { taskId: t.id, events, generation: events[events.length - 1]!.generation, origin };
    for (const o of this.#list) if (o.eventsAppended) this.#guard('eventsAppended', t.id, () => o.eventsAppended!(e));
  }

  attemptStarted(e: AttemptStartedEvent): void {
    for (const o of this.#list) if (o.attemptStarted) this.#guard('attemptStarted', e.taskId, () => o.attemptStarted!(e));
  }

  attemptEnded(e: AttemptEndedEvent): void {
    for (const o of this.#list) if (o.attemptEnded) this.#guard('attemptEnded', e.taskId, () => o.attemptEnded!(e));
  }

  output(e: OutputEvent): void {
    for (const o of this.#list) if (o.output) this.#guard('output', e.taskId, () => o.output!(e));
  }

  #guard(hook: string, taskId: string, fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.#log.warn('observer failed; the engine carries on', { taskId, hook, error: err });
    }
  }
}

/** Tells the observers an attempt ended, once (a hard cap may have told them first). */
export function noteAttemptEnded(rt: Runtime, taskId: string, active: ActiveAttempt, outcome: AttemptOutcome): void {
  if (active.endNoted) return;
  active.endNoted = true;
  rt.observers.attemptEnded({ taskId, turn: active.turn, attempt: active.attempt, outcome, time: rt.clock.now() });
}
