/**
 * Runs turns in child processes that the engine can SIGKILL (tier 3 of docs/isolation.md).
 * The engine stays the only writer: a worker's step records, checkpoints and terminal
 * arrive as frames, are validated here, and go through the same TurnHost as inline turns.
 */
import { availableParallelism } from 'node:os';
import { existsSync, realpathSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { FencedError, PayloadTooLargeError, TurnlogError, invalidArgument } from '../errors.js';
import type { FailureInfo, WorkflowKind } from '../history/events.js';
import { errorToFailure } from '../history/failure.js';
import type { Logger } from '../logger.js';
import { HOST_AS_IS, type AttemptOutcome, type CancelKind, type TurnHost, type TurnSpec } from '../attempt/host.js';
import { CALLS, type CallRecord, type CallReply } from '../attempt/calls.js';
import type { Workflow } from '../workflow/define-workflow.js';
import { workflowMap } from '../workflow/workflow-source.js';
import type { AttemptHandle, Executor, Reservation } from './executor.js';
import { HEARTBEAT_INTERVAL_MS, MAX_FRAME_BYTES, WorkerProtocolError, encodeEngineMessage, type WorkerMessage } from './protocol.js';
import { defaultChildEntry } from './worker-entry.js';
import { WorkerPool, type Acquired, type WorkerListener, type WorkerProcess } from './worker-pool.js';

export interface ProcessExecutorOptions {
  /**
   * Path or file URL of the ES module that exports the workflows (named exports, or a default
   * array). Workers import it and resolve handlers by name: export every workflow that runs here.
   * A relative path is resolved against `process.cwd()` when the executor is constructed;
   * `new URL('./workflows.js', import.meta.url)` does not depend on the working directory.
   * Engine activation checks it: the file exists, is not the program's entry script, imports,
   * and exports every workflow that runs on this executor (`TURNLOG_WORKFLOWS_MODULE`).
   */
  workflowsModule: string | URL;
  /** Node flags for workers (TypeScript loaders such as `--import tsx`). Default `process.execArgv`. */
  execArgv?: readonly string[];
  /** Worker environment. Default `process.env`. */
  env?: NodeJS.ProcessEnv;
  /** Live worker processes at most; further turns wait in FIFO order. Default max(4, CPUs). */
  maxWorkers?: number;
  /** Workers spawned ahead of need, refilled in the background. Default 0. */
  warmPool?: number;
  /** Keep one worker per multi-turn task between turns. Default false. */
  reuseWorkers?: boolean;
  /** An idle reused worker exits after this long. Default 300 s. */
  idleTtlMs?: number;
  /**
   * A turn's worker that sends no complete frame for this long (it heartbeats every second) is
   * killed and the attempt fails with `TURNLOG_WORKER_PROTOCOL`: its event loop is blocked or
   * its fd 3 carries garbage. The silence must show on the engine's clock and in real time.
   * Default 5000 ms; 0 turns it off; at least 2000 ms (two heartbeats).
   */
  heartbeatTimeoutMs?: number;
  /** Receives worker stdout (info) and stderr (warn) lines tagged with the task id. Default: prefixed to this process's stdout/stderr. */
  logger?: Logger;
  /** @internal The worker entry script. Default: worker-runtime.js (else child-main.js) beside this file, or in dist/ when running from sources. */
  childEntry?: string;
  /** @internal How long a warm-pool refill may wait for the pool's turns to end (tests). Default 1000 ms. */
  refillMaxDeferMs?: number;
}

const DEFAULT_HEARTBEAT_TIMEOUT_MS = 5000;
/** Two heartbeat periods: one late heartbeat alone never kills a worker. */
const MIN_HEARTBEAT_TIMEOUT_MS = 2 * HEARTBEAT_INTERVAL_MS;

interface ResolvedModule {
  /** As the caller wrote it (for messages). */
  given: string;
  href: string;
  /** The file, for file: URLs and paths. */
  path: string | undefined;
  relative: boolean;
  cwd: string;
}

/** Absolute file URL of the workflows module: a relative path is resolved against the cwd now, once. */
function resolveModule(m: string | URL): ResolvedModule {
  const cwd = process.cwd();
  const given = String(m);
  if (m instanceof URL || m.startsWith('file:')) {
    const url = new URL(m);
    return { given, href: url.href, path: url.protocol === 'file:' ? fileURLToPath(url) : undefined, relative: false, cwd };
  }
  const path = resolve(cwd, m);
  return { given, href: pathToFileURL(path).href, path, relative: !isAbsolute(m), cwd };
}

/** True when `path` is the script node started (`node app.js`): a single-file app. */
function isEntryScript(path: string): boolean {
  const main = process.argv[1];
  if (!main) return false;
  try {
    return realpathSync(main) === realpathSync(path);
  } catch {
    return false;
  }
}

/**
 * @example
 * const exec = new ProcessExecutor({ workflowsModule: new URL('./workflows.js', import.meta.url), warmPool: 2 });
 * const engine = await Engine.open({ workflows, executors: { process: exec }, defaultExecutor: 'process' });
 */
export class ProcessExecutor implements Executor {
  /** Calls the host's methods on it: given the engine's host object as is (attempt/host.ts, hostFor). */
  static readonly [HOST_AS_IS] = true;
  readonly kind = 'process' as const;
  readonly #pool: WorkerPool;
  readonly #reuse: boolean;
  readonly #logger: Logger | undefined;
  readonly #heartbeatTimeoutMs: number;
  readonly #module: ResolvedModule;

  constructor(options: ProcessExecutorOptions) {
    if (!options || (typeof options.workflowsModule !== 'string' && !(options.workflowsModule instanceof URL))) {
      throw invalidArgument('ProcessExecutor needs { workflowsModule }: the path or file URL of the module exporting your workflows.');
    }
    const maxWorkers = options.maxWorkers ?? Math.max(4, availableParallelism());
    const warmPool = options.warmPool ?? 0;
    const idleTtlMs = options.idleTtlMs ?? 300_000;
    if (!Number.isInteger(maxWorkers) || maxWorkers < 1) throw invalidArgument(`maxWorkers must be an integer ≥ 1, got ${maxWorkers}.`);
    if (!Number.isInteger(warmPool) || warmPool < 0) throw invalidArgument(`warmPool must be an integer ≥ 0, got ${warmPool}.`);
    if (!(idleTtlMs >= 0)) throw invalidArgument(`idleTtlMs must be ≥ 0, got ${idleTtlMs}.`);
    const heartbeatTimeoutMs = options.heartbeatTimeoutMs ?? DEFAULT_HEARTBEAT_TIMEOUT_MS;
    if (!(heartbeatTimeoutMs === 0 || heartbeatTimeoutMs >= MIN_HEARTBEAT_TIMEOUT_MS)) {
      throw invalidArgument(`heartbeatTimeoutMs must be 0 (off) or ≥ ${MIN_HEARTBEAT_TIMEOUT_MS} (workers heartbeat every ${HEARTBEAT_INTERVAL_MS} ms), got ${heartbeatTimeoutMs}.`);
    }
    this.#heartbeatTimeoutMs = heartbeatTimeoutMs;
    const mod = resolveModule(options.workflowsModule);
    this.#module = mod;
    this.#reuse = options.reuseWorkers ?? false;
    this.#logger = options.logger;
    this.#pool = new WorkerPool({
      spawn: {
        childEntry: options.childEntry ?? defaultChildEntry(),
        workflowsModule: mod.href,
        execArgv: options.execArgv ?? process.execArgv,
        env: options.env,
        logger: options.logger,
      },
      maxWorkers,
      warmPool: Math.min(warmPool, maxWorkers),
      idleTtlMs,
      logger: options.logger,
      ...(options.refillMaxDeferMs !== undefined ? { refillMaxDeferMs: options.refillMaxDeferMs } : {}),
    });
    this.#pool.fill();
  }

  /** Idle workers parked for reuse: task id → pid. */
  get parkedWorkers(): ReadonlyMap<string, number> {
    return this.#pool.parked;
  }
  /** Live worker processes (busy, parked, warm and starting). */
  get workerCount(): number {
    return this.#pool.size;
  }
  /** Pids of every live worker (tests, diagnostics). */
  get workerPids(): number[] {
    return this.#pool.pids;
  }
  /** Pre-spawned workers waiting for a turn (starting or ready). */
  get warmCount(): number {
    return this.#pool.warmCount;
  }
  /** Pre-spawned workers that have loaded the workflows module. */
  get readyWarmCount(): number {
    return this.#pool.readyWarmCount;
  }

  /**
   * Engine activation calls this before opening the store: the module must exist, must not be
   * the program's entry script, must import, and must export each of `workflows` by name.
   * Throws TURNLOG_WORKFLOWS_MODULE naming the workflows, the module and the fix.
   */
  async check(workflows: readonly Workflow<any, any, any>[]): Promise<void> {
    const m = this.#module;
    const names = workflows.map((w) => w.name).join(', ');
    const fail = (detail: string, fix: string, cause?: unknown) =>
      new TurnlogError('TURNLOG_WORKFLOWS_MODULE', `Workflows ${names} run on the process executor, whose workflowsModule ${m.given} ${detail}. ${fix}`, cause === undefined ? undefined : { cause });
    const byUrl = 'Pass new URL(\'./workflows.js\', import.meta.url) or an absolute path.';
    if (m.path !== undefined) {
      if (!existsSync(m.path)) {
        throw fail(m.relative ? `resolves to ${m.path}, which does not exist (a relative path is resolved against the working directory, ${m.cwd})` : `does not exist (${m.path})`, byUrl);
      }
      if (isEntryScript(m.path)) {
        throw fail(
          'is the program\'s entry script: each worker would import it and run the whole program',
          'Move the workflows into a module of their own (workflows.js), import them from there, and pass that module.',
        );
      }
    }
    let ns: Record<string, unknown>;
    try {
      ns = (await import(m.href)) as Record<string, unknown>;
    } catch (err) {
      throw fail(`cannot be imported: ${(err as Error).message}`, 'Fix the module (run it with node to see the error); for TypeScript, pass the loader in execArgv and run the engine with it too.', err);
    }
    const exported = workflowMap(ns);
    const missing = workflows.filter((w) => !exported.has(w.name)).map((w) => w.name);
    if (missing.length > 0) {
      throw fail(
        `does not export ${missing.join(', ')} (it exports ${[...exported.keys()].join(', ') || 'no workflows'})`,
        'Export each of them from that module by name (export const agent = defineWorkflow(…)) or in a default array, or run them inline.',
      );
    }
  }

  /** Takes a worker (parked, warm or newly spawned) or a place in the queue, before the turn start is written. */
  reserve(taskId: string, kind: WorkflowKind): Reservation {
    this.#pool.reopen(); // no-op unless close() ran: executors outlive engine deactivation
    const reuse = this.#reuse && kind === 'multi-turn';
    return new WorkerReservation(this, this.#pool, taskId, reuse, this.#pool.acquire(taskId, reuse));
  }

  async start(spec: TurnSpec, host: TurnHost, reservation?: Reservation): Promise<AttemptHandle> {
    const reuse = this.#reuse && spec.kind === 'multi-turn';
    const mine = reservation instanceof WorkerReservation ? reservation.take(this, spec.taskId) : undefined;
    if (!mine) this.#pool.reopen();
    const attempt = new ProcessAttempt(spec, host, this.#pool, reuse, this.#logger, this.#heartbeatTimeoutMs);
    const got = mine ?? this.#pool.acquire(spec.taskId, reuse);
    if ('worker' in got) attempt.bind(got.worker);
    else attempt.queue(got.queued, got.cancel);
    return attempt;
  }

  async close(): Promise<void> {
    await this.#pool.close();
  }
}

/** A worker (or a queue place) taken by {@link ProcessExecutor.reserve}; used once or released. */
class WorkerReservation implements Reservation {
  readonly pid: number;
  readonly #owner: ProcessExecutor;
  readonly #pool: WorkerPool;
  readonly #taskId: string;
  readonly #reuse: boolean;
  #got: Acquired | undefined;

  constructor(owner: ProcessExecutor, pool: WorkerPool, taskId: string, reuse: boolean, got: Acquired) {
    this.#owner = owner;
    this.#pool = pool;
    this.#taskId = taskId;
    this.#reuse = reuse;
    this.#got = got;
    this.pid = 'worker' in got ? got.worker.pid : 0;
  }

  /** The acquired worker or queue place, once, if this reservation is `owner`'s for `taskId`. */
  take(owner: ProcessExecutor, taskId: string): Acquired | undefined {
    if (owner !== this.#owner || taskId !== this.#taskId) return undefined;
    const got = this.#got;
    this.#got = undefined;
    return got;
  }

  release(): void {
    const got = this.take(this.#owner, this.#taskId);
    if (!got) return;
    if ('worker' in got) {
      // Back where it came from: parked again for a multi-turn task with reuse, else closed.
      this.#pool.release(got.worker, this.#reuse ? this.#taskId : undefined);
      return;
    }
    got.cancel();
    // Handed out before the cancel: give it back.
    void got.queued.then((w) => this.#pool.release(w, undefined), () => undefined);
  }
}

/** One attempt on one worker: validates its frames, answers them, and settles one outcome. */
class ProcessAttempt implements AttemptHandle, WorkerListener {
  readonly outcome: Promise<AttemptOutcome>;
  #settle!: (o: AttemptOutcome) => void;
  #done = false;
  #spec: TurnSpec;
  #host: TurnHost;
  #pool: WorkerPool;
  #reuse: boolean;
  #logger: Logger | undefined;
  #worker: WorkerProcess | undefined;
  #cancelQueued: (() => void) | undefined;
  #killedBecause: string | undefined;
  #fenced: string | undefined;
  #cancelled: CancelKind | undefined;
  /** The record the worker waits on (the context sends one at a time). */
  #inFlight: number | undefined;
  readonly #recorded = new Set<number>();
  /** Steps waiting for a flow-limit slot, by seq: their record, a cancel or the end stops the wait. */
  readonly #acquiring = new Map<number, AbortController>();
  #pendingSent = -1;
  #lastHeartbeat = 0;
  readonly #heartbeatTimeoutMs: number;
  /** Engine-clock and real (performance.now) time of the last complete frame (liveness). */
  #lastFrameAt = 0;
  #lastFrameReal = 0;
  /** The liveness check's next run (cancelled when the attempt ends). */
  #livenessTimer: { cancel(): void } | undefined;

  constructor(spec: TurnSpec, host: TurnHost, pool: WorkerPool, reuse: boolean, logger: Logger | undefined, heartbeatTimeoutMs: number) {
    this.#spec = spec;
    this.#host = host;
    this.#pool = pool;
    this.#reuse = reuse;
    this.#logger = logger;
    this.#heartbeatTimeoutMs = heartbeatTimeoutMs;
    this.outcome = new Promise((r) => (this.#settle = r));
  }

  get pid(): number {
    return this.#worker?.pid ?? 0;
  }
  /** performance.now() of the last heartbeat (0 before any). */
  get lastHeartbeat(): number {
    return this.#lastHeartbeat;
  }

  readonly kill = (reason: string): void => {
    if (this.#done) return;
    if (!this.#worker) {
      this.#cancelQueued?.();
      this.#finish({ kind: 'killed', pid: 0, signal: 'SIGKILL' });
      return;
    }
    this.#killedBecause = reason;
    this.#worker.kill();
  };

  cancel(kind: CancelKind, reason: string): void {
    if (this.#done) return;
    this.#cancelled ??= kind;
    if (!this.#worker) {
      // Still queued for a worker: it never started, so it ends as the cancel says, at once.
      this.#cancelQueued?.();
      this.#finish(
        kind === 'timeout' ? { kind: 'timed-out' } : kind === 'cancel' ? { kind: 'cancelled', reason } : { kind: 'exit-for-recovery', reason: 'engine shutdown before a worker was free' },
      );
      return;
    }
    for (const c of this.#acquiring.values()) c.abort(new Error(`cancelled (${reason})`));
    this.#worker.send({ type: 'cancel', kind, reason });
  }

  fence(detail: string): void {
    this.#fenced ??= detail;
  }

  bind(w: WorkerProcess): void {
    this.#worker = w;
    w.listener = this;
    if (w.startFailure) return this.onStartFailed(w.startFailure);
    if (!w.alive) return this.onExit(null, null);
    const pending = this.#host.pendingInputCount();
    this.#pendingSent = pending;
    const run = encodeEngineMessage({ type: 'run', spec: this.#spec, pendingInputs: pending });
    if (run.length > MAX_FRAME_BYTES) {
      this.#pool.release(w, undefined);
      return this.#tooLargeForWorker(run.length, "The turn's input, state, checkpoint and recorded step results");
    }
    // Sent at once, even before Ready: the pipe buffers it until the worker has loaded the module.
    w.sendFrame(run);
    // Waits an earlier attempt recorded and that have not ended: the worker waits for their end again.
    for (const c of this.#spec.calls) if (c.kind === 'wait' && !c.ended) this.#forwardWait(c.seq);
    if (this.#cancelled) w.send({ type: 'cancel', kind: this.#cancelled, reason: 'requested before the worker started' });
    // Heartbeats start with the turn, after Ready: a slow module load is not silence.
    if (this.#heartbeatTimeoutMs > 0) {
      void w.ready.then((ok) => {
        if (ok && !this.#done) this.#watchLiveness();
      });
    }
  }

  /**
   * Kills the worker once no complete frame arrived for the heartbeat timeout, on the engine's
   * clock and in real time both: heartbeats are real-time, so advancing a ManualClock alone
   * never kills a healthy worker. A cancelled timer, not a sleep with an AbortSignal: the
   * signal's creation and its abort (a DOMException) cost a turn 0.1–0.7 ms of engine CPU
   * after a quiet spell (docs/performance.md, "The pre-warmed worker turn's engine side").
   */
  #watchLiveness(): void {
    this.#lastFrameAt = this.#host.now();
    this.#lastFrameReal = performance.now();
    this.#armLiveness(this.#heartbeatTimeoutMs);
  }

  #armLiveness(ms: number): void {
    const check = (): void => {
      this.#livenessTimer = undefined;
      // Timers run before I/O: let frames already in the pipe in before judging (engine stalls).
      setImmediate(() => this.#checkLiveness());
    };
    if (this.#host.setTimer) {
      this.#livenessTimer = this.#host.setTimer(check, ms);
    } else {
      const t = setTimeout(check, ms);
      this.#livenessTimer = { cancel: () => clearTimeout(t) };
    }
  }

  #checkLiveness(): void {
    if (this.#done) return;
    const limit = this.#heartbeatTimeoutMs;
    const silent = Math.min(this.#host.now() - this.#lastFrameAt, Math.round(performance.now() - this.#lastFrameReal));
    if (silent >= limit) {
      return this.#protocolViolation(
        `no complete frame for ${silent} ms during turn ${this.#spec.turn} (heartbeats come every ${HEARTBEAT_INTERVAL_MS} ms): ` +
          `its event loop is blocked or its fd 3 carries bytes that are not frames. A handler that blocks its event loop that long needs a larger ProcessExecutor({ heartbeatTimeoutMs }) (0 turns the check off)`,
      );
    }
    this.#armLiveness(limit - silent);
  }

  queue(p: Promise<WorkerProcess>, cancel: () => void): void {
    this.#cancelQueued = cancel;
    p.then(
      (w) => {
        if (this.#done) this.#pool.release(w, undefined);
        else this.bind(w);
      },
      (err) => this.#finish({ kind: 'failed', failure: { ...errorToFailure(err), code: 'TURNLOG_WORKER_START' } }),
    );
  }

  // --- WorkerListener ------------------------------------------------------------------------

  onMessage(m: WorkerMessage): void {
    if (this.#done) return;
    this.#lastFrameAt = this.#host.now();
    this.#lastFrameReal = performance.now();
    switch (m.type) {
      case 'heartbeat':
        this.#lastHeartbeat = performance.now();
        // Also between records: takeInputs({ wait: true }) polls this count, and an input sent
        // while it waits brings no ack (test executor/process-take-inputs).
        this.#syncPending();
        return;
      case 'record':
        this.#acquiring.get(m.call.seq)?.abort(new Error('the step was recorded'));
        return this.#record(m.call);
      case 'acquire':
        return this.#acquire(m.seq, m.limit);
      case 'terminal': {
        const o = m.outcome;
        if (o.kind === 'suspended' && this.#spec.kind !== 'multi-turn') {
          return this.#protocolViolation(`suspend terminal from one-shot workflow ${this.#spec.workflow}`);
        }
        const w = this.#worker!;
        this.#finish(o);
        this.#pool.release(w, this.#reuse ? this.#spec.taskId : undefined);
        return;
      }
      case 'ready':
        return this.#protocolViolation('unexpected ready frame');
      case 'emit':
        return this.#host.emit?.(m.item, m.dropped);
    }
  }

  onProtocolError(err: WorkerProtocolError): void {
    if (this.#done) return;
    this.#pool.discard(this.#worker!);
    this.#finish({
      kind: 'failed',
      failure: { message: `Task ${this.#spec.taskId}, turn ${this.#spec.turn}, worker ${this.pid}: ${err.message}`, type: err.name, code: err.code, nonRetryable: true },
    });
  }

  onStartFailed(failure: FailureInfo): void {
    if (this.#done) return;
    this.#pool.discard(this.#worker!);
    this.#finish({ kind: 'failed', failure: { ...failure, code: 'TURNLOG_WORKER_START', nonRetryable: true } });
  }

  onExit(exitCode: number | null, signal: NodeJS.Signals | null): void {
    if (this.#done) return;
    const w = this.#worker!;
    this.#pool.discard(w);
    if (this.#killedBecause !== undefined) {
      this.#finish({ kind: 'killed', pid: w.pid, signal: signal ?? 'SIGKILL' });
      return;
    }
    const tail = w.stderrTail.slice(-5).join('\n');
    // The tail apart: the engine stores it only when failure text is not codec-encoded.
    this.#finish({
      kind: 'crashed',
      pid: w.pid,
      exitCode,
      signal,
      message: `Worker ${w.pid} of task ${this.#spec.taskId} exited (${signal ? `signal ${signal}` : `code ${exitCode}`}) without ending turn ${this.#spec.turn}`,
      ...(tail ? { stderrTail: tail } : {}),
    });
  }

  // --- internals -----------------------------------------------------------------------------

  #record(call: CallRecord): void {
    const seq = call.seq;
    if (this.#inFlight !== undefined) return this.#protocolViolation(`record ${seq} sent while record ${this.#inFlight} awaits its acknowledgement`);
    if (seq <= this.#spec.calls.length || this.#recorded.has(seq)) return this.#protocolViolation(`record seq ${seq} was already recorded`);
    this.#inFlight = seq;
    this.#recorded.add(seq);
    const w = this.#worker!;
    const run = this.#fenced !== undefined ? Promise.reject(new FencedError(this.#spec.taskId, this.#spec.turn, this.#spec.attempt, this.#fenced)) : this.#host.record(call);
    // The ack goes out only after the append resolved: the step is durable before the handler continues (invariant 4).
    run.then(
      (value) => {
        this.#inFlight = undefined;
        if (this.#done) return;
        this.#syncPending();
        const reply = CALLS[call.kind].reply;
        if (call.kind === 'wait') this.#forwardWait(seq);
        if (!reply) return w.send({ type: 'ack', seq });
        const frame = encodeEngineMessage({ type: 'ack', seq, reply: { kind: call.kind, value } as CallReply });
        if (frame.length <= MAX_FRAME_BYTES) return w.sendFrame(frame);
        this.#pool.discard(w); // it waits for a reply it will never get
        return this.#tooLargeForWorker(frame.length, reply.what);
      },
      (err) => {
        this.#inFlight = undefined;
        if (this.#done) return;
        w.send({ type: 'ack', seq, error: errorToFailure(err) });
      },
    );
  }

  /** A step asks for a flow-limit slot; the ack carries the grant (the host holds the slot until the step's record). */
  #acquire(seq: number, limit: string): void {
    if (seq <= this.#spec.calls.length || this.#recorded.has(seq) || this.#acquiring.has(seq)) return this.#protocolViolation(`acquire for seq ${seq}, which is recorded or already acquiring`);
    const c = new AbortController();
    this.#acquiring.set(seq, c);
    const w = this.#worker!;
    const run = this.#fenced !== undefined ? Promise.reject(new FencedError(this.#spec.taskId, this.#spec.turn, this.#spec.attempt, this.#fenced)) : (this.#host.acquire?.(limit, seq, c.signal) ?? Promise.resolve(0));
    run.then(
      (waitedMs) => {
        this.#acquiring.delete(seq);
        if (!this.#done) w.send({ type: 'ack', seq, grant: { waitedMs } });
      },
      (err) => {
        this.#acquiring.delete(seq);
        // Stopped by the step's record, a cancel or the end: the worker no longer waits for this
        // ack (an error now could answer the record's seq instead).
        if (!this.#done && !c.signal.aborted) w.send({ type: 'ack', seq, error: errorToFailure(err) });
      },
    );
  }

  /** Pushes the end of the wait at `seq` to the worker (a Signals frame) once the engine ended it. */
  #forwardWait(seq: number): void {
    this.#host.wait(seq).then(
      (outcome) => {
        if (!this.#done) this.#worker?.send({ type: 'signals', ended: [{ seq, outcome }] });
      },
      () => undefined, // the attempt ended while it waited: its outcome says how
    );
  }

  /** A frame the worker could not take (its reader refuses it and the worker dies): the turn fails instead, never retried. */
  #tooLargeForWorker(bytes: number, what: string): void {
    const s = this.#spec;
    const err = new PayloadTooLargeError('workerRun', bytes, MAX_FRAME_BYTES, `Task ${s.taskId}, turn ${s.turn}`,
      `${what} together exceed the worker protocol's frame cap. Record or take less per turn, lower EngineOptions.limits, or run this workflow inline.`);
    this.#finish({ kind: 'failed', failure: errorToFailure(err) });
  }

  /** Pushes the live steering-queue length when it changed (ctx.pendingInputCount in the worker). */
  #syncPending(): void {
    const n = this.#host.pendingInputCount();
    if (n !== this.#pendingSent) {
      this.#pendingSent = n;
      this.#worker?.send({ type: 'pending-inputs', count: n });
    }
  }

  #protocolViolation(detail: string): void {
    const w = this.#worker!;
    this.#logger?.error('worker protocol violation', { taskId: this.#spec.taskId, pid: w.pid, detail });
    this.onProtocolError(new WorkerProtocolError(detail));
  }

  #finish(o: AttemptOutcome): void {
    if (this.#done) return;
    this.#done = true;
    for (const c of this.#acquiring.values()) c.abort(new Error('the attempt ended'));
    this.#livenessTimer?.cancel();
    this.#livenessTimer = undefined;
    this.#settle(o);
  }
}
