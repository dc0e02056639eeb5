/**
 * Replay testing (Temporal's `runReplayHistory` for turns): re-executes every recorded turn of a
 * history with its recorded input, state and call results, and throws NonDeterminismError when
 * the handler asks for other calls or ends differently. Nothing a step wraps runs again.
 * See docs/testing.md.
 */
import { readFile, readdir, stat } from 'node:fs/promises';
import { join, resolve as resolvePath } from 'node:path';
import { pathToFileURL } from 'node:url';
import { TurnlogError, invalidArgument } from '../errors.js';
import type { HistoryEvent, TurnTerminalEvent } from '../history/events.js';
import { parseHistoryFile } from '../history/history-file.js';
import type { PayloadCodec, PayloadConverter } from '../history/payload.js';
import { moduleConverter, payloadPipeline } from '../history/pipeline.js';
import { withFullStates } from '../replay/fold.js';
import type { AttemptOutcome } from '../attempt/host.js';
import { replayInWorker } from './replay-isolate.js';
import { replayEvents } from './replay-turn.js';

import { workflowMap, type WorkflowSource } from '../workflow/workflow-source.js';
export { isWorkflow, workflowMap, type WorkflowSource } from '../workflow/workflow-source.js';
export { ENGINE_FAILURE_CODES, replayEvents, type ReplayProgress } from './replay-turn.js';

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
  const names = (await listFolder(folder)).filter((n) => HISTORY_FILE_PATTERN.test(n)).sort();
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
      tasks = parseHistoryFile(await readHistoryBytes(file), file).tasks;
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

/** The folder's entries; a missing folder is a wrong path, as an empty one is. */
async function listFolder(folder: string): Promise<string[]> {
  try {
    return await readdir(folder);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const what = code === 'ENOENT' ? 'does not exist' : code === 'ENOTDIR' ? 'is not a folder' : `cannot be read (${(err as Error).message})`;
    throw invalidArgument(`Folder ${folder} ${what}. Pass the folder that holds the history files (relative paths resolve against ${process.cwd()}).`);
  }
}

/** A history file's bytes; one that cannot be read is TURNLOG_HISTORY_FILE naming it, like a malformed one. */
async function readHistoryBytes(path: string): Promise<Uint8Array> {
  try {
    return await readFile(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const what = code === 'ENOENT' ? 'does not exist' : code === 'EISDIR' ? 'is a folder (replay a folder with replayHistories)' : `cannot be read (${(err as Error).message})`;
    throw new TurnlogError('TURNLOG_HISTORY_FILE', `History file ${path} ${what}. Check the path (relative paths resolve against ${process.cwd()}).`, { cause: err });
  }
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
  const file = parseHistoryFile(await readHistoryBytes(history), history);
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

