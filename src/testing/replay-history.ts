/**
 * Replay testing (Temporal's `runReplayHistory` for turns): re-executes every recorded turn of a
 * history with its recorded input, state and call results, and throws NonDeterminismError when
 * the handler asks for other calls or ends differently. Nothing a step wraps runs again.
 * See docs/testing.md.
 */
import { readFile, readdir, stat } from 'node:fs/promises';
import { join, resolve as resolvePath } from 'node:path';
import { pathToFileURL } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import { FencedError, NonDeterminismError, ReplayStalledError, TurnlogError, invalidArgument } from '../errors.js';
import type { HistoryEvent, Payload, TurnExitedForRecovery, TurnTerminalEvent } from '../history/events.js';
import { isTurnTerminal } from '../history/events.js';
import { parseHistoryFile } from '../history/history-file.js';
import type { PayloadCodec, PayloadConverter } from '../history/payload.js';
import { moduleConverter, payloadPipeline } from '../history/pipeline.js';
import type { OpenTurn, RecordedCall, TaskState } from '../history/state.js';
import { fold, withFullStates } from '../replay/fold.js';
import { decodeState } from '../history/state-codec.js';
import { TurnContextImpl, runHandler } from '../attempt/context.js';
import type { AttemptOutcome, CancelKind, TurnHost, TurnSpec } from '../attempt/host.js';
import { describeCall, replayMismatch, type CallIntent } from '../attempt/calls.js';
import type { Workflow } from '../workflow/define-workflow.js';
import { turnSpecFor } from '../attempt/turn-spec.js';
import { replayInWorker } from './replay-isolate.js';
import { SettleWatch, withSettleTracking } from './settle-watch.js';

import { workflowMap, type WorkflowSource } from '../workflow/workflow-source.js';
export { isWorkflow, workflowMap, type WorkflowSource } from '../workflow/workflow-source.js';

export interface ReplayHistoryOptions {
  /** The events, or the path of a history file (`turnlog export`, JSON or binary). */
  history: readonly HistoryEvent[] | string;
  /**
   * The workflows, or the path or file URL of a JavaScript module exporting them (required
   * with `isolate: 'worker'`, which loads it in the worker thread).
   */
  workflows: WorkflowSource | string | URL;
  /** The task id used in errors; selects the task of a multi-task file. Default: the file's, or `replay`. */
  taskId?: string;
  /** The engine's payload codecs, when the history was written with some (encryption, compression). */
  payloadCodecs?: readonly PayloadCodec[];
  /**
   * The engine's `payloadConverter`, when it has one. Default: the JSON converter. With
   * `isolate: 'worker'` it must be the module's `payloadConverter` export (that is what the worker uses).
   */
  payloadConverter?: PayloadConverter;
  /** Called after each turn replays cleanly (the CLI prints per-turn lines with it). */
  onTurn?: (result: TurnReplayResult) => void;
  /**
   * Per turn: a handler that has not settled after this many ms fails the replay with
   * `TURNLOG_REPLAY_TIMEOUT` (default {@link DEFAULT_REPLAY_TIMEOUT_MS}; 0 for none). In-process,
   * a handler that blocks the thread cannot be stopped: see `isolate`.
   */
  timeoutMs?: number;
  /**
   * `none` (default): replay in this thread; a handler that blocks it (`for (;;) {}`) hangs
   * the replay. `worker`: replay in a worker thread that is terminated at `timeoutMs`, so
   * every replay ends (`workflows` must be a module path; payload codecs run in this thread).
   */
  isolate?: 'none' | 'worker';
}

/** The default per-turn replay time limit. */
export const DEFAULT_REPLAY_TIMEOUT_MS = 30_000;

/** How one recorded turn replayed. */
export interface TurnReplayResult {
  turn: number;
  /** The attempt that was replayed: the turn's last. */
  attempt: number;
  /** The turn's terminal event, or for a history that ends mid-turn its last event. */
  eventId: number;
  /** The recorded terminal type; undefined when the history ends mid-turn. */
  terminal: TurnTerminalEvent['type'] | undefined;
  /**
   * `ok`: the handler made the recorded calls and ended as recorded. `cut-off`: the turn was
   * stopped from outside (timeout, cancel, kill, crash, end of history): the recorded calls
   * matched, and the replay stopped where the recording did; the outcome is not compared.
   * `older-version`: not replayed: the workflow has `migrateState`, so its state shape changed at
   * its `version`, and this turn was recorded by an older version (on the old shape).
   */
  status: 'ok' | 'cut-off' | 'older-version';
  /** Recorded calls (steps, checkpoints, takeInputs) of the turn. */
  calls: number;
  /** How the replayed handler ended; undefined when it was stopped at the end of a cut-off record. */
  outcome: AttemptOutcome['kind'] | undefined;
  /**
   * Patch ids whose `ctx.patched()` took the old branch in this turn (no marker where the code
   * asked): the turn ran before the patch. docs/versioning.md#when-is-deprecatepatch-safe
   */
  oldPatches: string[];
}

/** What {@link replayHistory} replayed. */
export interface ReplayReport {
  taskId: string;
  workflow: string;
  events: number;
  /** Number of turns replayed. */
  turns: number;
  results: TurnReplayResult[];
  /**
   * Every patch id some turn of this history took old-way, sorted: while a fixture lists an id,
   * its old branch is still needed to replay it (`deprecatePatch` would fail it).
   */
  oldPatches: string[];
}

/**
 * Replays a recorded history against the current workflow code. Resolves with a report when
 * every turn asks for the recorded calls in the recorded order and ends with the recorded
 * outcome; throws {@link NonDeterminismError} (turn, event id, expected, actual) when not,
 * HistoryInvariantError for a history that does not fold.
 *
 * @example
 * import { replayHistory } from 'turnlog/testing';
 * it('replays the recorded conversation', async () => {
 *   await replayHistory({ history: 'test/fixtures/histories/support.json', workflows: [supportAgent] });
 * });
 */
export async function replayHistory(options: ReplayHistoryOptions): Promise<ReplayReport> {
  const { taskId, events } = await resolveHistory(options.history, options.taskId);
  // Codecs here; the converter where the workflows are (this thread, or the worker's module).
  const codecs = payloadPipeline({ codecs: options.payloadCodecs });
  const full = withFullStates(taskId, events);
  const decoded = codecs.chain ? full.map(codecs.decodeEvent) : full;
  const timeoutMs = timeoutOf(options.timeoutMs);
  const { workflows } = options;
  const isModule = typeof workflows === 'string' || workflows instanceof URL;
  if (options.isolate === 'worker') {
    if (!isModule) {
      throw invalidArgument(`Task ${taskId}: isolate: 'worker' loads the workflows in a worker thread, so pass workflows as a module path or file URL, not as objects.`);
    }
    // The worker takes the module's own `payloadConverter` export, as process workers do.
    await checkWorkerConverter(`Task ${taskId}`, moduleHref(workflows), options.payloadConverter);
    return replayInWorker({ taskId, events: decoded, module: moduleHref(workflows), timeoutMs, onTurn: options.onTurn });
  }
  const mod = isModule ? ((await import(moduleHref(workflows))) as Record<string, unknown>) : undefined;
  const wfs = workflowMap(mod ?? (workflows as WorkflowSource));
  // A module's own `payloadConverter` export applies as in a worker, unless one is passed.
  return replayEvents(taskId, decoded, wfs, options.onTurn, timeoutMs, undefined, options.payloadConverter ?? (mod && moduleConverter(mod)));
}

/**
 * In a worker thread the replay uses the module's `payloadConverter` export (functions cannot
 * cross threads): a different converter given by the caller is refused, never silently ignored.
 */
async function checkWorkerConverter(subject: string, href: string, converter: PayloadConverter | undefined): Promise<void> {
  if (converter === undefined) return;
  const exported = ((await import(href)) as Record<string, unknown>)['payloadConverter'];
  if (exported === converter) return;
  throw invalidArgument(
    `${subject}: isolate: 'worker' replays with the workflows module's own \`payloadConverter\` export (a converter cannot cross into the worker thread), and ${href} ${exported === undefined ? 'exports none' : 'exports a different one'}. Export the converter as \`payloadConverter\` from the module, or replay with isolate: 'none'.`,
  );
}

function moduleHref(m: string | URL): string {
  return m instanceof URL ? m.href : m.startsWith('file:') ? m : pathToFileURL(resolvePath(m)).href;
}

function timeoutOf(ms: number | undefined): number {
  if (ms === undefined) return DEFAULT_REPLAY_TIMEOUT_MS;
  if (!Number.isFinite(ms) || ms < 0) throw invalidArgument(`replay timeoutMs must be a number of milliseconds >= 0 (0: no limit), got ${ms}.`);
  return ms;
}

/** Every task of every history file in a folder, and what went wrong with each. */
export interface ReplayHistoriesReport {
  files: number;
  tasks: number;
  turns: number;
  reports: (ReplayReport & { file: string })[];
}

/** One failing file (or one failing task of a multi-task file). */
export interface ReplayFailure {
  file: string;
  taskId: string | undefined;
  error: Error;
}

/**
 * Thrown by {@link replayHistories} when any file fails: lists every failing file and its error
 * (`failures`, and `errors` as an AggregateError), plus the reports of those that passed.
 */
export class ReplayFailuresError extends AggregateError {
  override readonly name = 'ReplayFailuresError';
  constructor(
    readonly failures: readonly ReplayFailure[],
    readonly report: ReplayHistoriesReport,
  ) {
    const lines = failures.map((f) => `  ${f.file}${f.taskId ? ` (task ${f.taskId})` : ''}: ${f.error.message}`);
    super(
      failures.map((f) => f.error),
      `${failures.length} of ${report.tasks + failures.length} recorded histories failed to replay:\n${lines.join('\n')}\n` +
        'Fix the workflow code (docs/determinism.md), or re-record the history if the change is intended.',
    );
  }
}

/** File names that {@link replayHistories} reads. */
export const HISTORY_FILE_PATTERN = /\.(json|bin|history)$/;

/**
 * Replays every history file in `folder` (`*.json`, `*.bin`, `*.history`; every task of
 * multi-task files) and reports all failures, not just the first.
 *
 * @example
 * it('replays every golden history', async () => {
 *   const report = await replayHistories('test/fixtures/histories', [supportAgent]);
 *   expect(report.tasks).toBeGreaterThan(0);
 * });
 */
export async function replayHistories(
  folder: string,
  workflows: WorkflowSource | string | URL,
  options: Pick<ReplayHistoryOptions, 'payloadCodecs' | 'payloadConverter' | 'timeoutMs' | 'isolate'> = {},
): Promise<ReplayHistoriesReport> {
  const names = (await readdir(folder)).filter((n) => HISTORY_FILE_PATTERN.test(n)).sort();
  const files: string[] = [];
  for (const n of names) if ((await stat(join(folder, n))).isFile()) files.push(join(folder, n));
  if (files.length === 0) {
    throw invalidArgument(`Folder ${folder} holds no history files (*.json, *.bin, *.history). Export some with \`turnlog export <task> -o ${folder}/<name>.json\`.`);
  }
  const timeoutMs = timeoutOf(options.timeoutMs);
  const isModule = typeof workflows === 'string' || workflows instanceof URL;
  const worker = options.isolate === 'worker';
  if (worker && !isModule) {
    throw invalidArgument(`Folder ${folder}: isolate: 'worker' loads the workflows in a worker thread, so pass workflows as a module path or file URL, not as objects.`);
  }
  if (worker) await checkWorkerConverter(`Folder ${folder}`, moduleHref(workflows as string | URL), options.payloadConverter);
  const mod = !worker && isModule ? ((await import(moduleHref(workflows))) as Record<string, unknown>) : undefined;
  const wfs = worker ? undefined : workflowMap(mod ?? (workflows as WorkflowSource));
  const converter = options.payloadConverter ?? (mod && moduleConverter(mod));
  const codecs = payloadPipeline({ codecs: options.payloadCodecs });
  const report: ReplayHistoriesReport = { files: files.length, tasks: 0, turns: 0, reports: [] };
  const failures: ReplayFailure[] = [];
  for (const file of files) {
    let tasks;
    try {
      tasks = parseHistoryFile(await readFile(file), file).tasks;
    } catch (err) {
      failures.push({ file, taskId: undefined, error: asError(err) });
      continue;
    }
    for (const t of tasks) {
      try {
        const full = withFullStates(t.taskId, t.events);
        const events = codecs.chain ? full.map(codecs.decodeEvent) : full;
        const r = wfs
          ? await replayEvents(t.taskId, events, wfs, undefined, timeoutMs, undefined, converter)
          : await replayInWorker({ taskId: t.taskId, events, module: moduleHref(workflows as string | URL), timeoutMs, onTurn: undefined });
        report.reports.push({ ...r, file });
        report.tasks++;
        report.turns += r.turns;
      } catch (err) {
        failures.push({ file, taskId: t.taskId, error: asError(err) });
      }
    }
  }
  if (failures.length > 0) throw new ReplayFailuresError(failures, report);
  return report;
}

function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

/** The events and task id of a history given as events or a file path. */
export async function resolveHistory(
  history: readonly HistoryEvent[] | string,
  taskId: string | undefined,
): Promise<{ taskId: string; events: readonly HistoryEvent[] }> {
  if (typeof history !== 'string') return { taskId: taskId ?? 'replay', events: history };
  const file = parseHistoryFile(await readFile(history), history);
  const task = taskId === undefined ? (file.tasks.length === 1 ? file.tasks[0] : undefined) : file.tasks.find((t) => t.taskId === taskId);
  if (!task) {
    const ids = file.tasks.map((t) => t.taskId).join(', ');
    throw invalidArgument(
      taskId === undefined
        ? `History file ${history} holds ${file.tasks.length} tasks (${ids}). Pass taskId to pick one, or use replayHistories() on its folder.`
        : `History file ${history} has no task ${taskId}; it holds ${ids || 'none'}.`,
    );
  }
  return task;
}

// ---------------------------------------------------------------------------------------------
// The replay proper

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
