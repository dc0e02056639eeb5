/**
 * Named waits (`ctx.waitFor`) of attempts running here, and the signals that end them
 * (docs/time.md#waiting-for-an-event-approvals). A wait is one recorded call (WaitStarted); this
 * engine ends it by appending WaitEnded, with the first buffered signal of its name
 * (SignalReceived, appended here or by another engine and heard through the watcher) or at its
 * recorded deadline (one engine-clock timer per wait, cancelled with the attempt). Nothing polls.
 */
import { nanoid } from 'nanoid';
import { FencedError, PayloadEncodingError, PayloadTooLargeError, TaskConflictError, TurnlogError, invalidArgument, isTurnlogError } from '../errors.js';
import type { HistoryEvent, Payload } from '../history/events.js';
import { payloadSize } from '../history/payload.js';
import type { WaitOutcome } from '../history/state.js';
import { illFormedText } from '../history/well-formed.js';
import { isStale, type Appender } from './appender.js';
import { waitEndDraft } from './drafts.js';
import type { Runtime } from './runtime.js';
import { MAX_RACES, type ActiveAttempt, type LockedTask, type TaskCache, type TaskEntry } from './task-cache.js';

interface PendingWait {
  active: ActiveAttempt;
  seq: number;
  promise: Promise<WaitOutcome>;
  resolve(o: WaitOutcome): void;
  reject(err: unknown): void;
}

export class Waits {
  readonly #rt: Runtime;
  readonly #cache: TaskCache;
  readonly #appender: Appender;
  /** Waits of running attempts not ended yet, by task, then seq. */
  readonly #pending = new Map<TaskEntry, Map<number, PendingWait>>();

  constructor(rt: Runtime, cache: TaskCache, appender: Appender) {
    this.#rt = rt;
    this.#cache = cache;
    this.#appender = appender;
  }

  /** Waits pending here now (tests, inspection). */
  get size(): number {
    let n = 0;
    for (const m of this.#pending.values()) n += m.size;
    return n;
  }

  /**
   * The end of the recorded wait at `seq` of `active` (a new wait, or a re-run of one that was
   * waiting): ends it now when a signal is buffered or its deadline passed, else when one comes.
   */
  wait(t: TaskEntry, active: ActiveAttempt, seq: number): Promise<WaitOutcome> {
    let waits = this.#pending.get(t);
    const known = waits?.get(seq);
    if (known && known.active === active) return known.promise;
    let resolve!: (o: WaitOutcome) => void;
    let reject!: (err: unknown) => void;
    const promise = new Promise<WaitOutcome>((res, rej) => ((resolve = res), (reject = rej)));
    promise.catch(() => undefined); // the handler may have stopped waiting (cancel)
    if (!waits) this.#pending.set(t, (waits = new Map()));
    waits.set(seq, { active, seq, promise, resolve, reject });
    const call = t.state?.openTurn?.calls[seq - 1];
    if (call?.kind === 'wait' && call.deadline !== undefined) this.#arm(t, active, call.deadline);
    void this.#settle(t);
    return promise;
  }

  /**
   * Settles the task's waits at `deadline`. Node can fire a timer a millisecond before Date.now()
   * reads its due time; the wait would then see nothing due and never be checked again (1 in 40
   * runs of the wait crash matrix hung until the turn timed out), so an early timer arms again.
   */
  #arm(t: TaskEntry, active: ActiveAttempt, deadline: number): void {
    const delay = Math.max(0, deadline - this.#rt.clock.now());
    active.timers.push(
      this.#rt.clock.setTimer(() => {
        if (active.finalized) return;
        if (this.#rt.clock.now() < deadline) this.#arm(t, active, deadline);
        else void this.#settle(t);
      }, delay),
    );
  }

  /** After every append to a task (this engine's or, re-read, another writer's): a signal may end a wait. */
  afterAppend(t: TaskEntry, events: readonly HistoryEvent[]): void {
    if (!this.#pending.has(t) || events.every((e) => e.type === 'WaitEnded')) return;
    void this.#settle(t);
  }

  /** Appends `task.signal(name, value)` to a task that has not completed; returns its signal id. */
  async signal(taskId: string, name: string, value: unknown, notFound: (taskId: string) => Error): Promise<string> {
    if (typeof name !== 'string' || name === '') throw invalidArgument(`Task ${taskId}: a signal needs a non-empty string name, got ${typeof name === 'string' ? '""' : typeof name}.`);
    if (!name.isWellFormed()) throw invalidArgument(`Task ${taskId}: signal ${illFormedText('name', name)}.`);
    const signalId = `sig-${nanoid(12)}`;
    const subject = `Task ${taskId}, signal "${name}"`;
    let payload: Payload;
    try {
      payload = this.#rt.converter.toPayload(value);
    } catch (err) {
      throw err instanceof PayloadEncodingError ? err.about(subject) : err;
    }
    const size = payloadSize(payload);
    if (size > this.#rt.limits.inputBytes) throw new PayloadTooLargeError('input', size, this.#rt.limits.inputBytes, subject);
    const t = await this.#cache.load(taskId);
    await this.#cache.mutate(t, async (t) => {
      const s = t.state;
      if (!s) throw notFound(taskId);
      if (s.status === 'completed') {
        throw new TaskConflictError(taskId, 'completed', `it ended (${s.outcome ?? 'unknown'}) and takes no more signals. Start a new task.`);
      }
      await this.#appender.append(t, [{ type: 'SignalReceived', signalId, name, value: payload }]);
    });
    return signalId;
  }

  /** Ends what can end among the task's pending waits, in seq order; drops those of ended attempts. */
  async #settle(t: TaskEntry): Promise<void> {
    await this.#cache
      .withLock(t, async (t) => {
        const waits = this.#pending.get(t);
        if (!waits) return;
        for (const [seq, w] of [...waits].sort((a, b) => a[0] - b[0])) {
          try {
            const ended = await this.#end(t, w);
            if (!ended) continue;
            waits.delete(seq);
            w.resolve(ended);
          } catch (err) {
            waits.delete(seq);
            w.reject(err);
          }
        }
        if (waits.size === 0 && this.#pending.get(t) === waits) this.#pending.delete(t);
      })
      .catch((err) => this.#rt.log.warn('ending a wait failed', { taskId: t.id, error: err }));
  }

  /** The wait's outcome once durable (appending WaitEnded when it ends now); undefined while it waits. */
  async #end(t: LockedTask, w: PendingWait): Promise<WaitOutcome | undefined> {
    for (let races = 0; ; races++) {
      const ot = t.state?.openTurn;
      if (t.active !== w.active || w.active.finalized || ot?.turn !== w.active.turn || ot.attempt !== w.active.attempt) {
        throw new FencedError(t.id, w.active.turn, w.active.attempt, 'the turn ended while it waited');
      }
      const call = ot.calls[w.seq - 1];
      if (call?.kind !== 'wait') throw new TurnlogError('TURNLOG_NON_DETERMINISM', `Task ${t.id}, turn ${ot.turn}: call ${w.seq} is not a recorded wait.`);
      if (call.ended) return this.#decoded(call.ended);
      // A timed-out or cancelled turn's handler has stopped waiting (ctx.signal aborted) and is
      // never re-run: ending the wait now would take a signal nobody sees. It stays buffered.
      if (ot.marker !== undefined || ot.cancelRequested !== undefined) return undefined;
      const draft = waitEndDraft(t.state!, w.seq, this.#rt.clock.now());
      if (!draft) return undefined;
      try {
        await this.#appender.append(t, [draft]);
      } catch (err) {
        // Another writer appended first (a signal from another engine): decide again on the re-read history.
        if (isStale(err) || !isTurnlogError(err, 'TURNLOG_CONCURRENCY') || races >= MAX_RACES) throw err;
      }
    }
  }

  #decoded(o: WaitOutcome): WaitOutcome {
    const decode = this.#rt.codec?.decode;
    return o.value !== undefined && decode ? { ...o, value: decode(o.value) } : o;
  }
}
