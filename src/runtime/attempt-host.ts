/**
 * The host of one inline attempt (TurnHost) and the env its records are built with (RecordEnv):
 * what the driver (driver.ts) hands an attempt, split from it. A record takes the task's lock,
 * builds its drafts with the call's row (attempt/calls.ts) and appends them; a race with a
 * same-generation writer goes on top, anything else is fenced.
 */
import { FencedError, invalidArgument, isTurnlogError } from '../errors.js';
import type { Payload } from '../history/events.js';
import type { TaskState, WaitOutcome } from '../history/state.js';
import { isDue } from '../replay/index.js';
import type { EmitItem, TurnHost } from '../attempt/host.js';
import { callSpec, type CallRecord, type CallRecords, type CallReplies, type RecordEnv, type Recording } from '../attempt/calls.js';
import { sleep, type Timer } from './clock.js';
import { isStale, type Appender } from './appender.js';
import { oversized, type Draft } from './drafts.js';
import { emitOutput } from './observe.js';
import type { Runtime } from './runtime.js';
import type { Supervisor } from './supervisor.js';
import type { Waits } from './waits.js';
import { MAX_RACES, type ActiveAttempt, type LockedTask, type TaskCache, type TaskEntry } from './task-cache.js';

/** After a ConcurrencyError (and its re-read): the history still has this attempt's turn open. */
export function stillOurs(t: TaskEntry, active: ActiveAttempt, err: unknown): boolean {
  const ot = t.state?.openTurn;
  return isTurnlogError(err, 'TURNLOG_CONCURRENCY') && !active.finalized && ot?.turn === active.turn && ot.attempt === active.attempt;
}

function releaseGrant(active: ActiveAttempt, seq: number): void {
  active.grants?.get(seq)?.release();
  active.grants?.delete(seq);
}

/** The task's queued inputs a turn may take now: scheduled ones only once due. */
function dueInputs(t: TaskEntry, now: number): TaskState['queue'] {
  const q = t.state?.queue ?? [];
  return q.every((x) => x.deliverAt === undefined) ? q : q.filter((x) => isDue(x, now));
}

/** What an {@link AttemptHost} uses of its driver. */
export interface HostDeps {
  readonly rt: Runtime;
  readonly cache: TaskCache;
  readonly appender: Appender;
  readonly supervisor: Supervisor;
  readonly waits: Waits;
  prepareChild(taskId: string, active: ActiveAttempt, call: CallRecords['child'], check: () => void): Promise<CallRecords['child']>;
}

/**
 * The host of one attempt (TurnHost) and the env its records are built with (RecordEnv): one
 * object an attempt. As closures it was a dozen functions and a context an attempt, and an env
 * object with five more functions every record (heap profile of recovering 10,000 one-step tasks:
 * ~2.3 KB a task in the turn start's `build` and the record's `locked`, docs/performance.md).
 * Methods are called on the object (the executors and the call rows never take one off it).
 */
export class AttemptHost implements TurnHost, RecordEnv {
  readonly turn: number;
  readonly attempt: number;
  readonly at: string;
  readonly #d: HostDeps;
  readonly #t: TaskEntry;
  readonly #active: ActiveAttempt;

  constructor(deps: HostDeps, t: TaskEntry, active: ActiveAttempt) {
    this.#d = deps;
    this.#t = t;
    this.#active = active;
    this.turn = active.turn;
    this.attempt = active.attempt;
    this.at = `Task ${t.id}, turn ${active.turn}`;
  }

  // RecordEnv
  oversized(field: Parameters<RecordEnv['oversized']>[0], p: Payload | undefined, subject: string): ReturnType<RecordEnv['oversized']> {
    return oversized(this.#d.rt.limits, field, p, subject);
  }
  queue(): TaskState['queue'] {
    return dueInputs(this.#t, this.#d.rt.clock.now());
  }
  decode(p: Payload): Payload {
    const codec = this.#d.rt.codec;
    return codec ? codec.decode(p) : p;
  }
  empty(): Payload {
    return this.#d.rt.converter.toPayload(undefined);
  }
  now(): number {
    return this.#d.rt.clock.now();
  }

  // TurnHost
  record<C extends CallRecord>(call: C): Promise<CallReplies[C['kind']]> {
    try {
      // The step's fn is done: its flow-limit slot is free for the next step.
      if (call.kind === 'step') releaseGrant(this.#active, call.seq);
    } catch (err) {
      return Promise.reject(err);
    }
    if (call.kind === 'child') {
      // Only a child this task started (its ChildStarted is folded in, from this turn or an
      // earlier one): any other id would wait on another task's input, or another parent's child.
      const c = call as CallRecords['child'];
      if (c.op === 'await' && !this.#t.state?.children?.some((k) => k.childId === c.childId)) {
        return Promise.reject(invalidArgument(`Task ${this.#t.id}, turn ${this.#active.turn}: ctx.awaitChild(${JSON.stringify(c.childId)}): task ${c.childId} is not a child this task started; nothing was recorded. Await the childId of a ctx.startChild() handle.`));
      }
    }
    // Outside the parent's lock: creating a child locks the child, and a wait can be long.
    if (call.kind === 'child') return this.#d.prepareChild(this.#t.id, this.#active, call as CallRecords['child'], () => this.#check()).then((c) => this.#locked(c as C));
    return this.#locked(call);
  }

  async acquire(limit: string, seq: number, signal: AbortSignal): Promise<number> {
    const t = this.#t;
    const active = this.#active;
    const { rt, supervisor } = this.#d;
    // A shared slot that may have expired in the store (renewals failed for leaseMs) stops the
    // attempt as a lapsed lease does: another engine may hold the slot now (docs/time.md#flow-limits).
    const lost = () => {
      if (t.active === active && !active.finalized) supervisor.lapse(t, active, `the flow-limit slot of step ${seq} (limit ${limit}) was not renewed within leaseMs (${rt.leaseMs} ms)`);
    };
    const grant = await rt.limiter.acquire(limit, signal, `${this.at}, step ${seq}`, lost);
    // An attempt that ended while the step waited gives the slot straight back.
    if (active.grantsReleased) grant.release();
    else (active.grants ??= new Map()).set(seq, grant);
    return grant.waitedMs;
  }

  pendingInputCount(): number {
    return dueInputs(this.#t, this.#d.rt.clock.now()).length;
  }
  sleep(ms: number, signal: AbortSignal): Promise<void> {
    return sleep(this.#d.rt.clock, ms, signal);
  }
  setTimer(fn: () => void, ms: number): Timer {
    return this.#d.rt.clock.setTimer(fn, ms);
  }
  wait(seq: number): Promise<WaitOutcome> {
    return this.#d.waits.wait(this.#t, this.#active, seq);
  }
  random(): number {
    return this.#d.rt.random();
  }
  emit(item: EmitItem, dropped?: number): void {
    emitOutput(this.#d.rt, this.#t, this.#active, item, dropped);
  }

  #check(): void {
    const t = this.#t;
    const active = this.#active;
    if (t.active !== active || active.finalized) {
      throw new FencedError(t.id, active.turn, active.attempt, 'the turn was finalized without it');
    }
    if (active.refused) throw active.refused;
  }

  // A zombie's record gets FencedError (never retried, docs/errors.md), not the store's error.
  #fenced(err: unknown): never {
    const t = this.#t;
    const active = this.#active;
    if (isStale(err)) throw new FencedError(t.id, active.turn, active.attempt, `another instance took the task over at generation ${err.current}`, { cause: err });
    if (active.finalized) throw new FencedError(t.id, active.turn, active.attempt, 'another writer ended the turn', { cause: err });
    throw err;
  }

  #locked<C extends CallRecord>(call: C): Promise<CallReplies[C['kind']]> {
    return this.#d.cache.withLockNow(this.#t, (t) => {
      this.#check();
      const rec = callSpec(call.kind).append(call as never, this) as Recording<CallReplies[C['kind']]>;
      if (rec.refused) throw (this.#active.refused = rec.refused);
      return this.#record(t, rec.events, rec.reply);
    });
  }

  /**
   * A record does not depend on what a same-generation writer appended (a send, a withdraw): when
   * the re-read history still has this attempt's turn open, it goes on top instead of failing.
   * Promise chains, not async functions, on this path: every promise runs the step scope's
   * async hooks, and a durable step's CPU is mostly this path (docs/performance.md).
   * The reply is the append's reaction itself: one promise a try, where a `.catch` and a `.then` made two.
   */
  #record<R>(t: LockedTask, drafts: () => Draft[], reply: () => R, races = 0): Promise<R> {
    let appended: Promise<void>;
    try {
      appended = this.#d.appender.append(t, drafts());
    } catch (err) {
      appended = Promise.reject(err);
    }
    const active = this.#active;
    return appended.then(reply, (err: unknown) => {
      if (races >= MAX_RACES || t.active !== active || !stillOurs(t, active, err)) return this.#fenced(err);
      return this.#record(t, drafts, reply, races + 1);
    });
  }
}
