/**
 * The observation seam: typed engine listeners (events appended, attempt started and ended,
 * non-durable output). Streaming, tracing, the CLI's live mode and the turn-result waiters all
 * listen here. A throwing listener is logged and never breaks the engine (invariant 10).
 */
import type { AttemptOutcome, EmitItem } from '../attempt/host.js';
import type { EntryMode, ExecutorKind, HistoryEvent, TraceContext } from '../history/events.js';
import type { TaskState } from '../history/state.js';
import type { PayloadConverter } from '../history/payload.js';
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
  /** This engine's appends: how long the store took to make them durable (ms, wall clock). */
  durationMs?: number;
  /**
   * The task's workflow, when the engine knows it (it has loaded the task): also for events of a
   * task whose `TaskCreated` another engine or process appended, such as a turn recovery finalizes.
   */
  workflow?: string;
}

/** A group commit of the engine's store went out: `writes` appends (and leases, snapshots) share one commit. */
export interface GroupCommitEvent {
  writes: number;
}

/** What an observer may read from the engine it is attached to, when it wants (e.g. a metric callback). */
export interface ObservedEngine {
  /** Live worker processes per executor that has them (process executors). */
  workerPools(): { executor: ExecutorKind; workers: number }[];
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
  /**
   * The trace context recorded with the turn's input (the first of its inputs that has one), by
   * whichever engine queued it: the turn's parent, also after a restart or on another engine.
   */
  trace?: TraceContext;
}

/** An attempt this engine started has ended, with its outcome as the executor reported it. */
export interface AttemptEndedEvent {
  taskId: string;
  turn: number;
  attempt: number;
  outcome: AttemptOutcome;
  time: number;
}

/**
 * Non-durable output of a running attempt: a `ctx.emit` chunk, or a step starting (never a replayed
 * one). Not recorded, lost on a crash (invariant 10). docs/streaming.md.
 */
export interface OutputEvent {
  taskId: string;
  turn: number;
  attempt: number;
  output: { kind: 'chunk'; data: unknown } | { kind: 'step-started'; seq: number; name: string };
  /** The task's last event id when it was produced: stream offsets sort it after that event. */
  afterEventId: number;
  /** Output a process worker dropped just before this one (its pipe to the engine was full). */
  dropped: number;
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
  /** The store's group commit sent a batch (stores with `onCommit`: LevelDB, PostgreSQL). */
  groupCommitted?(e: GroupCommitEvent): void;
  /** Called once when the observer is added to an engine, with what it may read from it later. */
  attached?(engine: ObservedEngine): void;
  /**
   * Called in the sender's async context when an input is queued (`start`, `send`, an operator's
   * re-send): the trace context to record with it (`InputQueued.trace`, durable), or undefined.
   * The first observer that returns a valid one wins. `attemptStarted` hands it back as `trace`.
   */
  traceContext?(): TraceContext | undefined;
}

/** Output as the host got it (a chunk still a payload), for the engine's own listener. */
export interface RawOutput extends Omit<OutputEvent, 'output'> {
  item: EmitItem;
}

/** The engine's own listener on appends: it also sees the cached entry and the state before. */
export type AppendListener = (t: TaskEntry, before: TaskState | undefined, events: readonly HistoryEvent[]) => void;

/** The registry the engine's parts call. One per engine. */
export class Observers {
  readonly #log: Logger;
  readonly #internal: AppendListener[] = [];
  readonly #internalOutput: ((e: RawOutput) => void)[] = [];
  #list: EngineObserver[] = [];

  readonly #engine: ObservedEngine;

  constructor(log: Logger, initial: readonly EngineObserver[] = [], engine: ObservedEngine = { workerPools: () => [] }) {
    this.#log = log;
    this.#engine = engine;
    for (const o of initial) this.add(o);
  }

  /** Adds a listener; returns its unsubscribe (idempotent). */
  add(o: EngineObserver): () => void {
    if (o.attached) this.#guard('attached', '', () => o.attached!(this.#engine));
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

  /** The engine's own output listener (the stream hub), called before the public ones. */
  onOutput(l: (e: RawOutput) => void): void {
    this.#internalOutput.push(l);
  }

  appended(t: TaskEntry, before: TaskState | undefined, events: readonly HistoryEvent[], origin: EventsAppendedEvent['origin'], durationMs?: number): void {
    // No closure per call for the engine's own listeners: this runs for every append.
    for (const l of this.#internal) {
      try {
        l(t, before, events);
      } catch (err) {
        this.#failed('eventsAppended', t.id, err);
      }
    }
    if (this.#list.length === 0 || events.length === 0) return;
    const e: EventsAppendedEvent = { taskId: t.id, events, generation: events[events.length - 1]!.generation, origin };
    if (durationMs !== undefined) e.durationMs = durationMs;
    const workflow = t.state?.workflow ?? before?.workflow;
    if (workflow !== undefined) e.workflow = workflow;
    for (const o of this.#list) if (o.eventsAppended) this.#guard('eventsAppended', t.id, () => o.eventsAppended!(e));
  }

  /** The trace context to record with an input being queued now (see EngineObserver.traceContext). */
  traceContext(): TraceContext | undefined {
    for (const o of this.#list) {
      if (!o.traceContext) continue;
      let c: TraceContext | undefined;
      try {
        c = o.traceContext();
      } catch (err) {
        this.#failed('traceContext', '', err);
        continue;
      }
      if (c !== undefined && validTrace(c)) return c.tracestate ? { traceparent: c.traceparent, tracestate: c.tracestate } : { traceparent: c.traceparent };
    }
    return undefined;
  }

  groupCommitted(writes: number): void {
    for (const o of this.#list) if (o.groupCommitted) this.#guard('groupCommitted', '', () => o.groupCommitted!({ writes }));
  }

  /** Whether a public listener has `hook` (a caller builds the hook's event only then). */
  listens(hook: 'attemptStarted'): boolean {
    for (const o of this.#list) if (o[hook]) return true;
    return false;
  }

  attemptStarted(e: AttemptStartedEvent): void {
    for (const o of this.#list) if (o.attemptStarted) this.#guard('attemptStarted', e.taskId, () => o.attemptStarted!(e));
  }

  attemptEnded(e: AttemptEndedEvent): void {
    for (const o of this.#list) if (o.attemptEnded) this.#guard('attemptEnded', e.taskId, () => o.attemptEnded!(e));
  }

  /** `converter` decodes a chunk only when a public listener wants the output (the hub decodes when read). */
  output(raw: RawOutput, converter: PayloadConverter): void {
    // No closure per call here: this runs for every token.
    for (const l of this.#internalOutput) {
      try {
        l(raw);
      } catch (err) {
        this.#failed('output', raw.taskId, err);
      }
    }
    let e: OutputEvent | undefined;
    for (const o of this.#list) {
      if (!o.output) continue;
      if (!e) {
        const { item, ...rest } = raw;
        const output: OutputEvent['output'] = item.kind === 'chunk' ? { kind: 'chunk', data: converter.fromPayload(item.data) } : { kind: 'step-started', seq: item.seq, name: item.name };
        e = { ...rest, output };
      }
      const ev = e;
      this.#guard('output', raw.taskId, () => o.output!(ev));
    }
  }

  #guard(hook: string, taskId: string, fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.#failed(hook, taskId, err);
    }
  }

  #failed(hook: string, taskId: string, err: unknown): void {
    this.#log.warn('observer failed; the engine carries on', { taskId, hook, error: err });
  }
}

/** W3C trace-context syntax (version 00 layout, not all-zero ids), and a bounded, printable tracestate. */
const TRACEPARENT = /^[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$/;
function validTrace(c: TraceContext): boolean {
  return typeof c.traceparent === 'string' && TRACEPARENT.test(c.traceparent) && (c.tracestate === undefined || (typeof c.tracestate === 'string' && c.tracestate.length <= 512 && /^[\x20-\x7e]*$/.test(c.tracestate)));
}

/** Tells the observers an attempt ended, once (a hard cap may have told them first). */
export function noteAttemptEnded(rt: Runtime, taskId: string, active: ActiveAttempt, outcome: AttemptOutcome): void {
  if (active.endNoted) return;
  active.endNoted = true;
  rt.observers.attemptEnded({ taskId, turn: active.turn, attempt: active.attempt, outcome, time: rt.clock.now() });
}

/** A running attempt's output (its host's `emit`), told to the observers; a zombie's is dropped. */
export function emitOutput(rt: Runtime, t: TaskEntry, active: ActiveAttempt, item: EmitItem, dropped = 0): void {
  if (t.active !== active || active.finalized) return;
  const raw: RawOutput = { taskId: t.id, turn: active.turn, attempt: active.attempt, item, afterEventId: t.state?.lastEventId ?? 0, dropped, time: rt.clock.now() };
  rt.observers.output(raw, rt.converter);
}
