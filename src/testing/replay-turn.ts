/**
 * The replay proper, shared by replayHistory, replayHistories and the replay worker: folds a
 * history turn by turn and re-runs each recorded turn's handler against its recorded calls,
 * stopping it where it leaves the recorded path. See docs/testing.md.
 */
import { isDeepStrictEqual } from 'node:util';
import { FencedError, NonDeterminismError, ReplayStalledError, TurnlogError } from '../errors.js';
import type { HistoryEvent, Payload, TurnExitedForRecovery, TurnTerminalEvent } from '../history/events.js';
import { isTurnTerminal } from '../history/events.js';
import type { PayloadConverter } from '../history/payload.js';
import { payloadPipeline } from '../history/pipeline.js';
import type { OpenTurn, RecordedCall, TaskState } from '../history/state.js';
import { fold } from '../replay/fold.js';
import { decodeState } from '../history/state-codec.js';
import { TurnContextImpl, runHandler } from '../attempt/context.js';
import type { AttemptOutcome, CancelKind, TurnHost, TurnSpec } from '../attempt/host.js';
import { describeCall, replayMismatch, type CallIntent } from '../attempt/calls.js';
import type { Workflow } from '../workflow/define-workflow.js';
import { turnSpecFor } from '../attempt/turn-spec.js';
import { SettleWatch, withSettleTracking } from './settle-watch.js';
import type { ReplayReport, TurnReplayResult } from './replay-history.js';

/**
 * Codes of the TurnFailed events the engine writes itself; replay treats those turns as cut off.
 * TURNLOG_PAYLOAD_TOO_LARGE: the engine's configured limits, which a replay does not know, turned
 * a completed turn (or a checkpoint) into this failure (test: "payload limits" in replay-history.test).
 * TURNLOG_STATE_MIGRATION_FAILED: the migrateState hook threw before the handler ran.
 */
export const ENGINE_FAILURE_CODES = ['TURNLOG_WORKER_START', 'TURNLOG_WORKER_PROTOCOL', 'TURNLOG_WORKER_CRASHED', 'TURNLOG_WORKFLOW_NOT_FOUND', 'TURNLOG_PAYLOAD_TOO_LARGE', 'TURNLOG_STATE_MIGRATION_FAILED'] as const;
const CUT_OFF_FAILURE_CODES: ReadonlySet<string> = new Set(ENGINE_FAILURE_CODES);

/**
 * A TurnFailed the engine wrote itself, not the handler's own end: a worker that failed to start,
 * broke the protocol or crashed too often, an unregistered workflow, a payload over the engine's
 * limits, or the replayer's `recoveries-exhausted` rule (type `RecoveriesExhausted`: the last
 * attempt died with the engine).
 */
function failedFromOutside(f: { type: string; code?: string }): boolean {
  return f.type === 'RecoveriesExhausted' || CUT_OFF_FAILURE_CODES.has(f.code ?? '');
}

/**
 * Where a replay is, for a watcher in another thread: [turn, its last attempt's start event,
 * the last recorded call handed back (0: none)]. Readable while the replaying thread is blocked.
 * @internal
 */
export type ReplayProgress = Int32Array;

/** @internal The replay proper, shared by replayHistory, replayHistories and the replay worker. */
export function replayEvents(
  taskId: string,
  events: readonly HistoryEvent[],
  workflows: ReadonlyMap<string, Workflow<any, any, any, any>>,
  onTurn: ((r: TurnReplayResult) => void) | undefined,
  timeoutMs: number,
  progress?: ReplayProgress,
  converter?: PayloadConverter,
): Promise<ReplayReport> {
  return withSettleTracking(() => replayTracked(taskId, events, workflows, onTurn, timeoutMs, progress, payloadPipeline({ converter }).converter));
}

async function replayTracked(
  taskId: string,
  events: readonly HistoryEvent[],
  workflows: ReadonlyMap<string, Workflow<any, any, any, any>>,
  onTurn: ((r: TurnReplayResult) => void) | undefined,
  timeoutMs: number,
  progress: ReplayProgress | undefined,
  converter: PayloadConverter,
): Promise<ReplayReport> {
  const results: TurnReplayResult[] = [];
  let s: TaskState | undefined;
  let wf: Workflow<any, any, any, any> | undefined;
  let start = 0;
  // Per open turn: the last attempt's TurnStarted, its exit for recovery, and whether a worker was killed.
  let lastStart: HistoryEvent | undefined;
  let exit: TurnExitedForRecovery | undefined;
  let killed = false;
  // Queued inputs after each event of the open turn: what ctx.pendingInputCount read live.
  let queued = 0;
  let pending = new Map<number, number>();
  // One fold per segment (previous terminal .. next terminal) keeps the replay linear in events.
  for (let k = 0; k <= events.length; k++) {
    const e = events[k];
    if (e !== undefined) {
      if (e.type === 'TurnStarted') {
        lastStart = e;
        exit = undefined;
        if (e.attempt === 1) {
          killed = false;
          queued -= e.inputIds.length;
          pending = new Map();
        }
      } else if (e.type === 'WorkerKilled') killed = true;
      else if (e.type === 'TurnExitedForRecovery') exit = e;
      else if (e.type === 'InputQueued') queued++;
      else if (e.type === 'InputWithdrawn') queued--;
      else if (e.type === 'InputsTaken') queued -= e.inputIds.length;
      else if (e.type === 'HistoryCompacted') queued = decodeState(e.state).queue.length;
      pending.set(e.eventId, queued);
      if (!isTurnTerminal(e) || k === 0) continue;
    }
    s = s === undefined ? fold(taskId, events.slice(0, Math.max(k, 1))) : fold(taskId, events.slice(start, k), s);
    start = k;
    wf ??= lookupWorkflow(workflows, s);
    const ot = s.openTurn;
    if (ot === undefined) {
      if (e !== undefined) s = fold(taskId, [e], s); // throws: a terminal with no open turn
      continue;
    }
    // Validate the terminal before running code against it.
    const after = e === undefined ? undefined : fold(taskId, [e], s);
    const terminal = e as TurnTerminalEvent | undefined;
    if (wf.migrateState !== undefined && wf.version !== undefined && (ot.workflowVersion ?? 0) < wf.version) {
      // Code whose state shape changed never runs on the old one (the engine migrates first).
      const result: TurnReplayResult = { turn: ot.turn, attempt: ot.attempt, eventId: terminal?.eventId ?? events[events.length - 1]?.eventId ?? 0, terminal: terminal?.type, status: 'older-version', calls: ot.calls.length, outcome: undefined, oldPatches: [] };
      results.push(result);
      onTurn?.(result);
      if (after) {
        s = after;
        start = k + 1;
      }
      continue;
    }
    const cutOff =
      terminal === undefined ||
      terminal.type === 'TurnTimedOut' ||
      terminal.type === 'TurnCancelled' ||
      killed ||
      !ot.attemptRunning ||
      (terminal.type === 'TurnFailed' && failedFromOutside(terminal.failure));
    const result = await replayTurn({
      s,
      ot,
      wf,
      terminal,
      cutOff,
      lastStartEventId: lastStart?.eventId ?? ot.startedEventId,
      lastStartTime: lastStart?.time ?? ot.turnStartedAt,
      lastEventId: events[events.length - 1]?.eventId ?? 0,
      pending,
      converter,
      exit,
      timeoutMs,
      progress,
    });
    results.push(result);
    onTurn?.(result);
    if (after) {
      s = after;
      start = k + 1;
    }
  }
  if (s === undefined) s = fold(taskId, events);
  const oldPatches = [...new Set(results.flatMap((r) => r.oldPatches))].sort();
  return { taskId, workflow: s.workflow, events: events.length, turns: results.length, results, oldPatches };
}

function lookupWorkflow(workflows: ReadonlyMap<string, Workflow<any, any, any, any>>, s: TaskState): Workflow<any, any, any, any> {
  const wf = workflows.get(s.workflow);
  if (wf) return wf;
  const known = [...workflows.keys()].join(', ') || 'none';
  throw new TurnlogError(
    'TURNLOG_WORKFLOW_NOT_FOUND',
    `Task ${s.taskId}: the history was recorded by workflow ${s.workflow}, which is not among the workflows given to replay (${known}). Pass it in { workflows }.`,
  );
}

interface TurnInput {
  s: TaskState;
  ot: OpenTurn;
  wf: Workflow<any, any, any, any>;
  terminal: TurnTerminalEvent | undefined;
  cutOff: boolean;
  lastStartEventId: number;
  lastStartTime: number;
  lastEventId: number;
  /** Queue length after each event id of the turn. */
  pending: ReadonlyMap<number, number>;
  converter: PayloadConverter;
  /** The last attempt's TurnExitedForRecovery: it saw the engine's shutdown. */
  exit: TurnExitedForRecovery | undefined;
  timeoutMs: number;
  progress: ReplayProgress | undefined;
}

/** A cancel (timeout marker or cancel request) to deliver at its place among the recorded calls. */
interface PendingAbort {
  eventId: number;
  kind: CancelKind;
  reason: string;
}

/** Why a replay stopped the handler: it left the recorded path. */
interface Stop {
  seq: number;
  /** The call the handler made (`step "x"`). */
  actual: string;
  /** The recorded call at that position, if any. */
  recorded: RecordedCall | undefined;
  /** The call differs from the recorded one (the shared replay check's error). */
  diverged: NonDeterminismError | undefined;
}

async function replayTurn(t: TurnInput): Promise<TurnReplayResult> {
  const { s, ot, terminal, converter } = t;
  // What the engine would have given the last attempt: the checkpoint and cancel state as of
  // its start; later aborts are delivered in recorded order by ReplayContext.
  const aborts: PendingAbort[] = [];
  if (ot.marker) aborts.push({ eventId: ot.marker.eventId, kind: 'timeout', reason: 'recorded timeout marker' });
  if (ot.cancelRequested) aborts.push({ eventId: ot.cancelRequested.eventId, kind: 'cancel', reason: ot.cancelRequested.reason });
  // The shutdown itself is not recorded; the exit says the attempt saw it before it ended.
  if (t.exit) aborts.push({ eventId: t.exit.eventId, kind: 'shutdown', reason: `recorded exit for recovery: ${t.exit.reason}` });
  aborts.sort((a, b) => a.eventId - b.eventId);
  const spec: TurnSpec = {
    ...turnSpecFor(s, () => converter.toPayload(undefined)),
    timeoutExceeded: aborts.some((a) => a.kind === 'timeout' && a.eventId < t.lastStartEventId),
    cancelRequested: aborts.some((a) => a.kind === 'cancel' && a.eventId < t.lastStartEventId),
  };
  delete spec.checkpoint;
  const checkpoint = lastCheckpointBefore(ot.calls, t.lastStartEventId);
  if (checkpoint) spec.checkpoint = checkpoint;

  // The live queue length the handler saw: as of the last recorded call it got back.
  let ctxRef: ReplayContext<unknown, unknown> | undefined;
  const host = replayHost(t.lastStartTime, () => t.pending.get(ctxRef?.lastCallEventId ?? t.lastStartEventId) ?? 0);
  const eventId = terminal?.eventId ?? t.lastEventId;
  const base = { turn: ot.turn, attempt: ot.attempt, eventId, terminal: terminal?.type, calls: ot.calls.length };
  if (t.progress) {
    Atomics.store(t.progress, 0, ot.turn);
    Atomics.store(t.progress, 1, t.lastStartEventId);
    Atomics.store(t.progress, 2, 0);
  }
  const ctx = new ReplayContext(spec, host, converter, t.wf.initialState, aborts.filter((a) => a.eventId > t.lastStartEventId), t.progress, !t.cutOff && terminal !== undefined);
  ctxRef = ctx;
  const outcome = await settleTurn(t, ctx, eventId);
  const stop = ctx.stop;
  const endOfTurn = `the end of the turn (${terminal?.type ?? 'history ends'}) after ${ot.calls.length} call${ot.calls.length === 1 ? '' : 's'}`;
  if (stop) {
    if (stop.diverged) throw stop.diverged;
    if (t.cutOff) return { ...base, status: 'cut-off', outcome: undefined, oldPatches: ctx.oldPatches };
    throw new NonDeterminismError(s.taskId, ot.turn, eventId, endOfTurn, stop.actual);
  }
  const o = outcome as AttemptOutcome;
  const missing = ot.calls[ctx.callsMade];
  if (missing) {
    throw new NonDeterminismError(s.taskId, ot.turn, missing.eventId, `${describeCall(missing)} at position ${missing.seq}`, `end the turn after ${ctx.callsMade} call${ctx.callsMade === 1 ? '' : 's'} (${describeOutcome(o, converter)})`);
  }
  if (t.cutOff || !terminal) return { ...base, status: 'cut-off', outcome: o.kind, oldPatches: ctx.oldPatches };
  const mismatch = compareOutcome(terminal, o, converter);
  if (mismatch) throw new NonDeterminismError(s.taskId, ot.turn, terminal.eventId, mismatch.expected, mismatch.actual);
  return { ...base, status: 'ok', outcome: o.kind, oldPatches: ctx.oldPatches };
}

/** Runs the handler until it ends or leaves the recorded path; rejects when it never can. */
function settleTurn(t: TurnInput, ctx: ReplayContext<unknown, unknown>, eventId: number): Promise<AttemptOutcome | void> {
  const { ot, terminal } = t;
  const stalled = (code: 'TURNLOG_REPLAY_STALLED' | 'TURNLOG_REPLAY_TIMEOUT'): ReplayStalledError => {
    const last = ctx.lastCall;
    const ending = terminal ? `${terminal.type} at event ${eventId}` : `the history ending mid-turn at event ${eventId}`;
    const detail =
      code === 'TURNLOG_REPLAY_STALLED'
        ? `cannot finish: the handler waits for something replay will never deliver (recorded ending: ${ending})`
        : `did not settle within ${t.timeoutMs} ms (recorded ending: ${ending})`;
    const where = last ? `${describeCall(last)} at position ${last.seq}` : `the start of attempt ${ot.attempt}`;
    return new ReplayStalledError(code, t.s.taskId, ot.turn, last?.eventId ?? t.lastStartEventId, where, detail);
  };
  return new Promise((resolve, reject) => {
    const watch = new SettleWatch({
      timeoutMs: t.timeoutMs,
      onCheck: (quiet) => ctx.deliverWaiting(quiet),
      onStall: () => reject(stalled('TURNLOG_REPLAY_STALLED')),
      onTimeout: () => reject(stalled('TURNLOG_REPLAY_TIMEOUT')),
    });
    const done = (v: AttemptOutcome | void): void => {
      watch.stop();
      resolve(v);
    };
    void Promise.race([watch.run(() => runHandler(t.wf.turn, ctx, t.converter)), ctx.stopped]).then(done);
  });
}

function lastCheckpointBefore(calls: readonly RecordedCall[], eventId: number): Payload | undefined {
  let out: Payload | undefined;
  for (const c of calls) {
    if (c.eventId > eventId) break;
    if (c.kind === 'checkpoint') out = c.data;
  }
  return out;
}

function replayHost(now: number, pendingInputCount: () => number): TurnHost {
  // Only reached past the recorded calls, which ReplayContext intercepts first.
  const never = (): never => {
    throw new TurnlogError('TURNLOG_NON_DETERMINISM', 'replay host: a call past the recorded ones reached the host (bug in turnlog/testing).');
  };
  return {
    record: async () => never(),
    pendingInputCount,
    now: () => now,
    sleep: async () => {},
    // A recorded wait that never ended (the turn was stopped while it waited): only an abort ends it.
    wait: () => new Promise(() => {}),
  };
}

/**
 * The one context implementation, with every call checked against the record *before* it runs,
 * so a diverging handler never executes a step's function (which would call the real model).
 */
class ReplayContext<I, S> extends TurnContextImpl<I, S> {
  readonly #calls: readonly RecordedCall[];
  readonly #aborts: PendingAbort[];
  readonly #progress: ReplayProgress | undefined;
  /** The turn's end is recorded: past the calls, the record goes on (a patch absent there ran old-way). */
  readonly #ended: boolean;
  readonly #oldPatches: string[] = [];
  #made = 0;
  #stop: Stop | undefined;
  #resolveStopped!: () => void;
  /** Resolves when the handler leaves the recorded path; the handler is then abandoned. */
  readonly stopped = new Promise<void>((r) => (this.#resolveStopped = r));

  constructor(
    spec: TurnSpec,
    host: TurnHost,
    converter: PayloadConverter,
    initialState: (() => S) | undefined,
    aborts: PendingAbort[],
    progress: ReplayProgress | undefined,
    ended: boolean,
  ) {
    super(spec, host, converter, initialState);
    this.#ended = ended;
    this.#calls = spec.calls;
    this.#aborts = aborts;
    this.#progress = progress;
  }

  get stop(): Stop | undefined {
    return this.#stop;
  }
  /** Calls the handler made along the recorded path. */
  get callsMade(): number {
    return this.#made;
  }
  /** The event id of the last recorded call handed back, undefined before the first. */
  get lastCallEventId(): number | undefined {
    return this.#calls[this.#made - 1]?.eventId;
  }
  /** The last recorded call handed back, undefined before the first. */
  get lastCall(): RecordedCall | undefined {
    return this.#calls[this.#made - 1];
  }

  /**
   * Delivers aborts the live attempt got while it waited: every abort recorded after the last
   * call once the handler has made them all, else (only when it waits on nothing of its own,
   * `quiet`) the next one, which is then the only thing that can wake it. True when it delivered.
   */
  deliverWaiting(quiet: boolean): boolean {
    if (this.#stop || this.#aborts.length === 0) return false;
    if (this.#made === this.#calls.length) this.#deliverAborts(Infinity);
    else if (quiet) this.#deliverAborts(this.#aborts[0]!.eventId + 1);
    else return false;
    return true;
  }

  /** Patch ids that took the old branch, in call order. */
  get oldPatches(): string[] {
    return [...this.#oldPatches];
  }
  protected override get recordContinues(): boolean {
    return this.#ended;
  }
  protected override patchTaken(patchId: string, newBranch: boolean): void {
    if (!newBranch && !this.#stop) this.#oldPatches.push(patchId);
  }

  /** Checks each call against the record before it runs (the context's one replay check). */
  protected override intercept(call: CallIntent): Promise<never> | undefined {
    if (this.#stop) return this.#reject();
    const seq = this.#made + 1;
    const recorded = this.#calls[seq - 1];
    const diverged = recorded && replayMismatch(this.taskId, this.turn, seq, recorded, call);
    if (!recorded || diverged) {
      this.#stop = { seq, actual: describeCall(call), recorded, diverged };
      this.#resolveStopped();
      return this.#reject();
    }
    this.#made = seq;
    if (this.#progress) Atomics.store(this.#progress, 2, recorded.eventId);
    // Aborts recorded before this call reached the handler before it; later ones wait for
    // the handler to wait (deliverWaiting), as they did live.
    this.#deliverAborts(recorded.eventId);
    return undefined;
  }

  #deliverAborts(beforeEventId: number): void {
    while (this.#aborts.length > 0 && this.#aborts[0]!.eventId < beforeEventId) {
      const a = this.#aborts.shift()!;
      this.cancel(a.kind, a.reason);
    }
  }

  #reject(): Promise<never> {
    const stop = this.#stop!;
    const err = stop.diverged ?? new FencedError(this.taskId, this.turn, this.attempt, 'replay reached the end of the recorded calls');
    return Promise.reject(err);
  }
}

function decode(p: Payload | undefined, converter: PayloadConverter): unknown {
  return p === undefined ? undefined : converter.fromPayload(p);
}

const PREVIEW_MAX = 200;
function preview(v: unknown): string {
  if (v === undefined) return 'undefined';
  if (v instanceof Uint8Array) return `<${v.length} bytes>`;
  const json = JSON.stringify(v);
  return json.length <= PREVIEW_MAX ? json : `${json.slice(0, PREVIEW_MAX)}… (${json.length - PREVIEW_MAX} more chars)`;
}

/** The replayed outcome as a verb phrase: "the handler did <this>". */
function describeOutcome(o: AttemptOutcome, converter: PayloadConverter): string {
  switch (o.kind) {
    case 'completed':
      return `complete with output ${preview(decode(o.output, converter))}`;
    case 'suspended':
      return `suspend ("${o.reason}")`;
    case 'failed':
      return `fail with ${o.failure.type}: ${o.failure.message}`;
    case 'cancelled':
      return `end cancelled (${o.reason})`;
    case 'timed-out':
      return 'end timed out';
    case 'exit-for-recovery':
      return `exit for recovery (${o.reason})`;
    default:
      return `end ${o.kind}`;
  }
}

function describeTerminal(e: TurnTerminalEvent, converter: PayloadConverter): string {
  switch (e.type) {
    case 'TurnCompleted':
      return `TurnCompleted with output ${preview(decode(e.output, converter))}`;
    case 'TurnSuspended':
      return `TurnSuspended ("${e.reason}")`;
    case 'TurnFailed':
      return `TurnFailed with ${e.failure.type}: ${e.failure.message}`;
    default:
      return e.type;
  }
}

/** Compares the replayed outcome with the recorded terminal; undefined when they agree. */
function compareOutcome(e: TurnTerminalEvent, o: AttemptOutcome, converter: PayloadConverter): { expected: string; actual: string } | undefined {
  const differs = { expected: describeTerminal(e, converter), actual: describeOutcome(o, converter) };
  const sameValue = (what: string, recorded: Payload | undefined, replayed: Payload | undefined) => {
    const a = decode(recorded, converter);
    const b = decode(replayed, converter);
    return isDeepStrictEqual(a, b) ? undefined : { expected: `${e.type} with ${what} ${preview(a)}`, actual: `end with ${what} ${preview(b)}` };
  };
  switch (e.type) {
    case 'TurnCompleted':
      if (o.kind !== 'completed') return differs;
      return sameValue('output', e.output, o.output) ?? sameValue('state', e.state, o.state);
    case 'TurnSuspended':
      if (o.kind !== 'suspended' || o.reason !== e.reason) return differs;
      return sameValue('output', e.output, o.output) ?? sameValue('state', e.state, o.state);
    case 'TurnFailed':
      if (o.kind !== 'failed' || o.failure.type !== e.failure.type || o.failure.message !== e.failure.message) return differs;
      return undefined;
    default:
      return undefined;
  }
}
