/**
 * `replayHistory({ isolate: 'worker' })`: the replay runs in a worker thread that loads the
 * workflows module by path and is terminated at the time limit, so a handler that blocks its
 * thread (`for (;;) {}`) still ends in a verdict. Errors cross the thread boundary as data.
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { HistoryInvariantError, NonDeterminismError, ReplayStalledError, TurnlogError, invalidArgument, type ErrorCode } from '../errors.js';
import type { HistoryEvent } from '../history/events.js';
import type { ReplayReport, TurnReplayResult } from './replay-history.js';

/** What the parent sends: the worker replays `events` against the module's workflows. */
export interface ReplayWorkerData {
  module: string;
  taskId: string;
  events: readonly HistoryEvent[];
  progress: Int32Array;
}

/** What the worker sends back. */
export type ReplayWorkerMessage =
  | { type: 'ready' }
  | { type: 'turn'; result: TurnReplayResult }
  | { type: 'done'; report: ReplayReport }
  | { type: 'error'; error: SerializedError };

export interface SerializedError {
  name: string;
  message: string;
  stack?: string;
  code?: string;
  fields: Record<string, unknown>;
}

/** Own data fields of an error (a TurnlogError subclass's ids), structured-clone safe. */
export function serializeError(err: unknown): SerializedError {
  if (!(err instanceof Error)) return { name: 'Error', message: String(err), fields: {} };
  const fields: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(err)) if (v === null || ['string', 'number', 'boolean'].includes(typeof v)) fields[k] = v;
  const out: SerializedError = { name: err.name, message: err.message, fields };
  if (err.stack !== undefined) out.stack = err.stack;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string') out.code = code;
  return out;
}

// The classes callers test with instanceof; any other TurnlogError keeps its code and message.
const CLASSES: Record<string, { prototype: object }> = { NonDeterminismError, ReplayStalledError, HistoryInvariantError };

function deserializeError(e: SerializedError): Error {
  const err: Error = e.code?.startsWith('TURNLOG_') ? new TurnlogError(e.code as ErrorCode, e.message) : new Error(e.message);
  const cls = CLASSES[e.name];
  if (cls) Object.setPrototypeOf(err, cls.prototype);
  Object.assign(err, e.fields);
  Object.defineProperty(err, 'name', { value: e.name, enumerable: false, configurable: true, writable: true });
  if (e.stack !== undefined) err.stack = e.stack;
  return err;
}

function workerEntry(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  const beside = join(here, 'replay-worker.js');
  if (existsSync(beside)) return beside;
  // Running from TypeScript sources (vitest, tsx): the worker runs the compiled entry.
  const compiled = join(here, '..', '..', 'dist', 'src', 'testing', 'replay-worker.js');
  if (existsSync(compiled)) return compiled;
  throw invalidArgument(`The replay worker entry replay-worker.js was found neither at ${beside} nor at ${compiled}. Build turnlog (npm run build).`);
}

/** The recorded call with this event id, as replay errors name it. */
function describeEvent(events: readonly HistoryEvent[], eventId: number): string {
  const e = events[eventId - 1];
  if (e?.type === 'StepCompleted') return `step "${e.name}" at position ${e.seq}`;
  if (e?.type === 'Checkpointed') return `checkpoint at position ${e.seq}`;
  if (e?.type === 'InputsTaken') return `takeInputs() at position ${e.seq}`;
  if (e?.type === 'PatchMarked') return `patched("${e.patchId}") at position ${e.seq}`;
  if (e?.type === 'TimerStarted') return `sleep(${e.durationMs}) at position ${e.seq}`;
  return `event ${eventId}`;
}

/** Loading the workflows module in a fresh thread gets at least this long (a cold start under load is not a hung turn). */
const LOAD_TIMEOUT_MS = 30_000;

/** Replays in a worker thread; terminates it when a turn takes longer than `timeoutMs` (0: never). */
export function replayInWorker(o: {
  taskId: string;
  events: readonly HistoryEvent[];
  module: string;
  timeoutMs: number;
  onTurn: ((r: TurnReplayResult) => void) | undefined;
}): Promise<ReplayReport> {
  const progress = new Int32Array(new SharedArrayBuffer(12));
  const data: ReplayWorkerData = { module: o.module, taskId: o.taskId, events: o.events, progress };
  const worker = new Worker(workerEntry(), { workerData: data });
  return new Promise<ReplayReport>((resolve, reject) => {
    let settled = false;
    let loaded = false;
    let timer: NodeJS.Timeout | undefined;
    const finish = (fn: () => void): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      void worker.terminate();
      fn();
    };
    const timedOut = (): void => {
      const turn = Atomics.load(progress, 0);
      const start = Atomics.load(progress, 1);
      const call = Atomics.load(progress, 2);
      const where = call > 0 ? describeEvent(o.events, call) : turn > 0 ? 'the start of its last attempt' : 'loading the workflows module';
      const err = new ReplayStalledError(
        'TURNLOG_REPLAY_TIMEOUT',
        o.taskId,
        turn,
        call || start,
        where,
        loaded
          ? `did not settle within ${o.timeoutMs} ms; the replay worker thread was terminated`
          : `did not load the workflows module within ${Math.max(o.timeoutMs, LOAD_TIMEOUT_MS)} ms; the replay worker thread was terminated`,
      );
      finish(() => reject(err));
    };
    // Per turn, like in-process replay: the clock restarts once the module is loaded and after each turn.
    const arm = (ms = o.timeoutMs): void => {
      clearTimeout(timer);
      if (o.timeoutMs > 0) timer = setTimeout(timedOut, ms);
    };
    worker.on('message', (m: ReplayWorkerMessage) => {
      if (m.type === 'ready') {
        loaded = true;
        arm();
      }
      else if (m.type === 'turn') {
        arm();
        o.onTurn?.(m.result);
      } else if (m.type === 'done') finish(() => resolve(m.report));
      else finish(() => reject(deserializeError(m.error)));
    });
    worker.on('error', (err) => finish(() => reject(err)));
    worker.on('exit', (code) => {
      const call = Atomics.load(progress, 2);
      const where = call > 0 ? describeEvent(o.events, call) : 'the start of its last attempt';
      const detail = `could not finish: the worker thread exited (code ${code}) before a verdict; does the workflows module call process.exit()?`;
      finish(() => reject(new ReplayStalledError('TURNLOG_REPLAY_STALLED', o.taskId, Atomics.load(progress, 0), call || Atomics.load(progress, 1), where, detail)));
    });
    arm(Math.max(o.timeoutMs, LOAD_TIMEOUT_MS));
  });
}
