/**
 * Worker processes and the pool that hands them out: a warm pool of pre-spawned workers
 * (already past `import(workflowsModule)`), one parked worker per multi-turn task when reuse
 * is on, and a cap on live workers with FIFO queueing. Turn logic lives in process-executor.ts.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import type { Socket } from 'node:net';
import { createInterface } from 'node:readline';
import type { Logger } from '../logger.js';
import {
  FrameReader,
  PARENT_DEATH_SIGNAL_FLAG,
  PREWARM_FLAG,
  PROTOCOL_VERSION,
  WorkerProtocolError,
  decodeWorkerMessage,
  encodeEngineMessage,
  isWorkerFrameStart,
  type EngineMessage,
  type WorkerMessage,
} from './protocol.js';
import type { FailureInfo } from '../history/events.js';
import { PROCESS_GROUPS, ensureGroupReaper, killGroup, registerGroup } from './group-reaper.js';

/** Lines of stderr kept per worker for crash messages. */
const STDERR_TAIL = 20;
/** After an EOF, how long a worker may take to exit before it is SIGKILLed. */
const CLOSE_KILL_MS = 2000;
/** A refill spawns no sooner than this after a warm worker was taken or the pool's last turn ended. */
const REFILL_DELAY_MS = 50;
/** A refill waits for the pool's turns to end at most this long (docs/decisions.md, "When the warm pool refills"). */
const REFILL_MAX_DEFER_MS = 1000;
/**
 * After the exit event, how long to wait for the pipes to reach EOF: fd 3 (a terminal may be in
 * it), stdout and stderr (a last burst of logs). Only a descendant that left the worker's process
 * group can hold them open longer.
 */
const DRAIN_MS = 1000;

/** Who receives a bound worker's frames and its death. */
export interface WorkerListener {
  onMessage(m: WorkerMessage): void;
  /** A malformed or unexpected frame: the worker has been killed already. */
  onProtocolError(err: WorkerProtocolError): void;
  /** Ready came with an error: the workflows module did not load. */
  onStartFailed(failure: FailureInfo): void;
  onExit(exitCode: number | null, signal: NodeJS.Signals | null): void;
}

export interface SpawnOptions {
  childEntry: string;
  workflowsModule: string;
  execArgv: readonly string[];
  env: NodeJS.ProcessEnv | undefined;
  logger: Logger | undefined;
}

let setprivPath: string | null | undefined;

/**
 * Linux: util-linux `setpriv` with `--pdeathsig` (2.33+), found once per process. A worker
 * started through it is SIGKILLed by the kernel when the engine's thread dies, so it needs no
 * watchdog thread of its own. `TURNLOG_ORPHAN_WATCH=thread` forces the thread (tests).
 */
export function parentDeathSignalLauncher(): string | null {
  if (setprivPath !== undefined) return setprivPath;
  setprivPath = null;
  if (process.platform !== 'linux' || process.env['TURNLOG_ORPHAN_WATCH'] === 'thread') return setprivPath;
  for (const dir of (process.env['PATH'] ?? '/usr/bin:/bin').split(delimiter)) {
    const p = join(dir, 'setpriv');
    if (!dir || !existsSync(p)) continue;
    const probe = spawnSync(p, ['--pdeathsig', 'SIGKILL', '--', p, '--version'], { stdio: 'ignore', timeout: 5000 });
    if (probe.status === 0) setprivPath = p;
    break;
  }
  return setprivPath;
}

/** One child process and its protocol pipe. */
export class WorkerProcess {
  readonly pid: number;
  readonly child: ChildProcess;
  /** Task whose turn runs (or ran last) here; tags forwarded log lines. */
  taskId: string | undefined;
  listener: WorkerListener | undefined;
  readonly stderrTail: string[] = [];
  /** Settles once Ready arrived (true) or the worker can never become ready (false). */
  readonly ready: Promise<boolean>;
  /** Settles when the process exited and its pipe drained. */
  readonly exited: Promise<{ exitCode: number | null; signal: NodeJS.Signals | null }>;
  startFailure: FailureInfo | undefined;
  alive = true;
  readonly spawnedAt = performance.now();
  #pipe: Socket;
  #reader = new FrameReader();
  #gotReady = false;
  /** A protocol error happened: the worker is being killed, its frames are ignored. */
  #broken = false;
  #setReady!: (v: boolean) => void;
  #closeTimer: NodeJS.Timeout | undefined;

  /** `prewarm`: a warm-pool worker, which warms up fully before Ready (child-main.ts). */
  constructor(options: SpawnOptions, prewarm = false) {
    this.ready = new Promise((r) => (this.#setReady = r));
    const args = [...options.execArgv, options.childEntry, options.workflowsModule];
    if (prewarm) args.push(PREWARM_FLAG);
    const setpriv = parentDeathSignalLauncher();
    if (setpriv) args.push(PARENT_DEATH_SIGNAL_FLAG);
    ensureGroupReaper();
    // setpriv sets the signal, then execs node in place: same pid, same pipes.
    // detached: the worker leads a new process group that its handler's children join.
    this.child = spawn(setpriv ?? process.execPath, setpriv ? ['--pdeathsig', 'SIGKILL', '--', process.execPath, ...args] : args, {
      stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
      env: options.env ?? process.env,
      detached: PROCESS_GROUPS,
    });
    this.pid = this.child.pid ?? 0;
    registerGroup(this.pid);
    this.#pipe = this.child.stdio[3] as Socket;
    // A warm-pool worker reads one frame through its socket before Ready (child-main.ts readPing).
    if (prewarm) this.#pipe.write(encodeEngineMessage({ type: 'pending-inputs', count: 0 }));
    this.#pipe.on('data', (chunk: Buffer) => this.#onData(chunk));
    this.#pipe.on('error', () => undefined);
    this.#forward(this.child.stdout!, 'stdout', options.logger);
    this.#forward(this.child.stderr!, 'stderr', options.logger);
    // fd 3, stdout, stderr: the worker is done once it exited and all three reached EOF.
    let openPipes = 3;
    let drainExpired = false;
    let exitInfo: { exitCode: number | null; signal: NodeJS.Signals | null } | undefined;
    let settle!: (v: { exitCode: number | null; signal: NodeJS.Signals | null }) => void;
    this.exited = new Promise((r) => (settle = r));
    const finish = () => {
      if (!exitInfo) return;
      if (openPipes > 0 && !drainExpired) return;
      if (!this.alive) return;
      this.alive = false;
      clearTimeout(this.#closeTimer);
      this.#setReady(false);
      settle(exitInfo);
      this.listener?.onExit(exitInfo.exitCode, exitInfo.signal);
    };
    for (const stream of [this.#pipe, this.child.stdout!, this.child.stderr!]) {
      stream.once('close', () => {
        openPipes--;
        finish();
      });
    }
    this.child.on('error', (err) => {
      // spawn failed (ENOENT, EMFILE): no exit event follows.
      this.stderrTail.push(String(err.message));
      exitInfo = { exitCode: null, signal: null };
      drainExpired = true;
      finish();
    });
    this.child.on('exit', (exitCode, signal) => {
      // Whatever the handler started dies with the worker, however the worker ended.
      killGroup(this.pid, true);
      exitInfo = { exitCode, signal };
      if (openPipes === 0) return finish();
      setTimeout(() => {
        drainExpired = true;
        finish();
      }, DRAIN_MS).unref();
    });
  }

  get isReady(): boolean {
    return this.#gotReady;
  }

  send(m: EngineMessage): void {
    this.sendFrame(encodeEngineMessage(m));
  }

  /** Sends an already encoded frame (the caller checked it against the frame cap). */
  sendFrame(frame: Uint8Array): void {
    if (this.alive && this.#pipe.writable) this.#pipe.write(frame);
  }

  /** SIGKILL to the worker's whole process group. The exit event follows. */
  kill(): void {
    if (!this.alive) return;
    killGroup(this.pid);
    this.child.kill('SIGKILL');
  }

  /**
   * EOF on the pipe: the worker exits by itself; SIGKILL if it has not after a while.
   * `wait` keeps this process alive until it has (executor close awaits the exit).
   */
  close(wait = false): void {
    if (!this.alive) return;
    this.#pipe.end();
    this.#closeTimer ??= setTimeout(() => this.kill(), CLOSE_KILL_MS);
    if (wait) {
      this.ref();
    } else {
      this.#closeTimer.unref();
      this.unref();
    }
  }

  /** Busy workers keep the engine process alive; idle ones do not. */
  ref(): void {
    this.child.ref();
    for (const s of [this.#pipe, this.child.stdout, this.child.stderr] as (Socket | null)[]) s?.ref?.();
  }
  unref(): void {
    this.child.unref();
    for (const s of [this.#pipe, this.child.stdout, this.child.stderr] as (Socket | null)[]) s?.unref?.();
  }

  #onData(chunk: Buffer): void {
    if (!this.alive || this.#broken) return;
    let frames: Uint8Array[];
    let m: WorkerMessage;
    try {
      frames = this.#reader.push(chunk);
      for (const f of frames) {
        if (f.length > 0 && !isWorkerFrameStart(f[0]!)) throw notAFrame(f.length, f);
        m = decodeWorkerMessage(f);
        if (!this.#gotReady) {
          if (m.type !== 'ready') throw new WorkerProtocolError(`first frame is ${m.type}, expected ready`);
          if (m.protocolVersion !== PROTOCOL_VERSION) {
            throw new WorkerProtocolError(`worker speaks protocol ${m.protocolVersion}, the engine ${PROTOCOL_VERSION} (mixed installs?)`);
          }
          this.#gotReady = true;
          if (m.error) {
            this.startFailure = m.error;
            this.#setReady(false);
            this.listener?.onStartFailed(m.error);
          } else {
            this.#setReady(true);
          }
          continue;
        }
        if (m.type === 'ready') throw new WorkerProtocolError('a second ready frame');
        if (!this.listener) {
          // Between turns only heartbeats may trail in.
          if (m.type === 'heartbeat') continue;
          throw new WorkerProtocolError(`${m.type} frame while no turn runs`);
        }
        this.listener.onMessage(m);
        if (!this.alive || this.#broken) return;
      }
      // A frame's first body byte is its tag: text on fd 3 fails here, not at a timeout.
      const p = this.#reader.partial();
      if (p && p.head.length > 0 && !isWorkerFrameStart(p.head[0]!)) throw notAFrame(p.length, p.head);
    } catch (err) {
      const e = err instanceof WorkerProtocolError ? err : new WorkerProtocolError(String((err as Error).message ?? err));
      // Kill first: nothing more from this worker is read. The exit is still observed (pool bookkeeping).
      this.#broken = true;
      this.kill();
      this.#setReady(false);
      this.listener?.onProtocolError(e);
    }
  }

  #forward(stream: NodeJS.ReadableStream, name: 'stdout' | 'stderr', logger: Logger | undefined): void {
    // A closing worker still flushing its output is not stuck: its SIGKILL waits.
    stream.on('data', () => this.#closeTimer?.refresh());
    const rl = createInterface({ input: stream, crlfDelay: Infinity });
    rl.on('line', (line) => {
      if (name === 'stderr') {
        this.stderrTail.push(line);
        if (this.stderrTail.length > STDERR_TAIL) this.stderrTail.shift();
      }
      const fields = { taskId: this.taskId ?? '(idle)', pid: this.pid, stream: name, line };
      if (logger) {
        if (name === 'stderr') logger.warn('worker output', fields);
        else logger.info('worker output', fields);
      } else {
        (name === 'stderr' ? process.stderr : process.stdout).write(`[turnlog worker ${this.pid} ${fields.taskId}] ${line}\n`);
      }
    });
  }
}

/** Names what arrived, as text: the usual cause is handler code writing to fd 3. */
function notAFrame(length: number, head: Uint8Array): WorkerProtocolError {
  const lead = length < 0x80 ? String.fromCharCode(length) : '';
  const text = JSON.stringify(lead + Buffer.from(head.subarray(0, 32)).toString('latin1'));
  return new WorkerProtocolError(`fd 3 carried bytes that are not a frame (as text: ${text}…)`);
}

export interface PoolOptions {
  spawn: SpawnOptions;
  maxWorkers: number;
  warmPool: number;
  idleTtlMs: number;
  logger: Logger | undefined;
  /** How long a refill may wait for the pool's turns to end. Default {@link REFILL_MAX_DEFER_MS}. */
  refillMaxDeferMs?: number;
}

interface Waiter {
  taskId: string;
  reuse: boolean;
  resolve(w: WorkerProcess): void;
  reject(e: unknown): void;
}

/** What {@link WorkerPool.acquire} gives: a worker now, or a place in the FIFO queue. */
export type Acquired = { worker: WorkerProcess } | { queued: Promise<WorkerProcess>; cancel: () => void };

export class WorkerPool {
  readonly #o: PoolOptions;
  /** Every live worker: busy, parked, warm or starting. */
  readonly #all = new Set<WorkerProcess>();
  /** Every process not yet exited, closing ones included (close() waits for them). */
  readonly #every = new Set<WorkerProcess>();
  /** Fresh pre-spawned workers, oldest first. */
  readonly #warm: WorkerProcess[] = [];
  /** One idle worker per multi-turn task (reuse), in parking order (oldest first). */
  readonly #parked = new Map<string, { worker: WorkerProcess; timer: NodeJS.Timeout }>();
  readonly #waiters: Waiter[] = [];
  /** Workers handed out and not yet released or discarded: turns in flight, or about to start. */
  readonly #busy = new Set<WorkerProcess>();
  /** When the warm pool fell short (performance.now; -Infinity once a turn found it empty), else undefined. */
  #refillDueSince: number | undefined;
  #refillTimer: NodeJS.Timeout | undefined;
  #closed = false;
  // A warm worker that failed to load the module stops refills until a cold start succeeds.
  #warmBroken = false;

  constructor(options: PoolOptions) {
    this.#o = options;
  }

  get size(): number {
    return this.#all.size;
  }
  /** Pids of idle workers parked for reuse, by task id. */
  get parked(): ReadonlyMap<string, number> {
    return new Map([...this.#parked].map(([k, v]) => [k, v.worker.pid]));
  }
  get pids(): number[] {
    return [...this.#every].map((w) => w.pid);
  }
  get warmCount(): number {
    return this.#warm.length;
  }
  get readyWarmCount(): number {
    return this.#warm.filter((w) => w.isReady).length;
  }
  get queued(): number {
    return this.#waiters.length;
  }

  /** Fills the warm pool (in the background; never throws). */
  fill(): void {
    while (!this.#closed && !this.#warmBroken && this.#warm.length < this.#o.warmPool && this.#all.size < this.#o.maxWorkers) {
      const w = this.#spawn(true);
      this.#warm.push(w);
      void w.ready.then((ok) => {
        if (ok || this.#closed) return;
        if (w.startFailure) {
          this.#warmBroken = true;
          this.#o.logger?.error('warm worker failed to load the workflows module; warm pool paused', { pid: w.pid, error: w.startFailure.message });
        }
      });
    }
  }

  acquire(taskId: string, reuse: boolean): Acquired {
    if (this.#closed) throw new Error('worker pool closed');
    const now = this.#takeNow(taskId, reuse);
    if (now) return { worker: now };
    let waiter!: Waiter;
    const queued = new Promise<WorkerProcess>((resolve, reject) => {
      waiter = { taskId, reuse, resolve, reject };
      this.#waiters.push(waiter);
    });
    return {
      queued,
      cancel: () => {
        const i = this.#waiters.indexOf(waiter);
        if (i >= 0) this.#waiters.splice(i, 1);
      },
    };
  }

  /** A turn ended on `w`. Park it for `taskId` (reuse) or let it go. */
  release(w: WorkerProcess, parkFor: string | undefined): void {
    w.listener = undefined;
    this.#idle(w);
    if (parkFor !== undefined && w.alive && !this.#closed) {
      this.#parked.get(parkFor)?.worker.close();
      w.unref();
      const timer = setTimeout(() => {
        if (this.#parked.get(parkFor)?.worker === w) {
          this.#parked.delete(parkFor);
          w.close();
        }
      }, this.#o.idleTtlMs);
      timer.unref();
      this.#parked.set(parkFor, { worker: w, timer });
    } else {
      // A closing worker no longer counts against the cap: it exits on the EOF.
      this.#all.delete(w);
      w.close();
    }
    this.#pump();
  }

  /** A killed, crashed or broken worker: never reused; it no longer counts against the cap. */
  discard(w: WorkerProcess): void {
    w.listener = undefined;
    this.#idle(w);
    this.#all.delete(w);
    w.kill();
    this.#pump();
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Starts a closed pool again (an engine re-activated after a snapshot reuses its executor). */
  reopen(): void {
    if (!this.#closed) return;
    this.#closed = false;
    this.#warmBroken = false;
    this.fill();
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#refillTimer);
    this.#refillTimer = undefined;
    this.#refillDueSince = undefined;
    for (const wt of this.#waiters.splice(0)) wt.reject(new Error('executor closed'));
    for (const { timer } of this.#parked.values()) clearTimeout(timer);
    this.#parked.clear();
    this.#warm.length = 0;
    const all = [...this.#every];
    for (const w of all) {
      if (w.listener) {
        w.ref();
        w.kill();
      } else {
        w.close(true);
      }
    }
    await Promise.all(all.map((w) => w.exited));
  }

  #spawn(prewarm = false): WorkerProcess {
    const w = new WorkerProcess(this.#o.spawn, prewarm);
    this.#all.add(w);
    this.#every.add(w);
    w.unref();
    void w.ready.then((ok) => {
      if (ok && this.#warmBroken) {
        this.#warmBroken = false;
        this.#refillSoon();
      }
    });
    void w.exited.then(() => {
      this.#all.delete(w);
      this.#every.delete(w);
      this.#busy.delete(w);
      const i = this.#warm.indexOf(w);
      if (i >= 0) this.#warm.splice(i, 1);
      for (const [k, v] of this.#parked) {
        if (v.worker === w) {
          clearTimeout(v.timer);
          this.#parked.delete(k);
        }
      }
      this.#pump();
      this.#refillSoon();
    });
    return w;
  }

  #takeNow(taskId: string, reuse: boolean): WorkerProcess | undefined {
    if (reuse) {
      const p = this.#parked.get(taskId);
      if (p) {
        this.#parked.delete(taskId);
        clearTimeout(p.timer);
        if (p.worker.alive) return this.#claim(p.worker, taskId);
      }
    }
    const warm = this.#warm.shift();
    if (warm) {
      this.#refillSoon();
      return this.#claim(warm, taskId);
    }
    // The warm pool ran dry: this turn pays a cold start, so the refill waits for nothing.
    if (this.#o.warmPool > 0) this.#refillSoon(true);
    if (this.#all.size >= this.#o.maxWorkers) {
      // At the cap: an idle worker (parked for another task, oldest first) makes room.
      const oldest = this.#parked.entries().next();
      if (oldest.done) return undefined;
      const [k, v] = oldest.value;
      clearTimeout(v.timer);
      this.#parked.delete(k);
      this.#all.delete(v.worker); // counted free now; its exit follows the EOF
      v.worker.close();
    }
    return this.#claim(this.#spawn(), taskId);
  }

  #claim(w: WorkerProcess, taskId: string): WorkerProcess {
    w.taskId = taskId;
    w.ref();
    this.#busy.add(w);
    return w;
  }

  /** A turn let go of `w`: once none is in flight, a waiting refill may run. */
  #idle(w: WorkerProcess): void {
    const due = this.#refillDueSince;
    if (!this.#busy.delete(w) || this.#busy.size > 0 || due === undefined) return;
    const left = (this.#o.refillMaxDeferMs ?? REFILL_MAX_DEFER_MS) - (performance.now() - due);
    this.#armRefill(Math.max(0, Math.min(REFILL_DELAY_MS, left)));
  }

  /**
   * The warm pool fell short. A spawn blocks this thread for ms and the new process boots on a
   * core the turns need, so the refill waits until no turn is in flight: at most
   * REFILL_MAX_DEFER_MS, and not at all once a turn found the pool empty (`dry`).
   */
  #refillSoon(dry = false): void {
    if (this.#closed || this.#warm.length >= this.#o.warmPool) return;
    const now = performance.now();
    if (dry) this.#refillDueSince = -Infinity;
    this.#refillDueSince ??= now;
    if (dry) return this.#armRefill(0);
    if (!this.#refillTimer) this.#armRefill(REFILL_DELAY_MS);
  }

  #armRefill(ms: number): void {
    clearTimeout(this.#refillTimer);
    this.#refillTimer = setTimeout(() => this.#refill(), ms);
    this.#refillTimer.unref();
  }

  #refill(): void {
    this.#refillTimer = undefined;
    const due = this.#refillDueSince;
    if (due === undefined || this.#closed) return;
    const maxDefer = this.#o.refillMaxDeferMs ?? REFILL_MAX_DEFER_MS;
    const waited = performance.now() - due;
    // Turns in flight: #idle re-arms when the last one ends; this timer is the deadline.
    if (this.#busy.size > 0 && waited < maxDefer) return this.#armRefill(maxDefer - waited);
    this.#refillDueSince = undefined;
    this.fill();
  }

  #pump(): void {
    while (this.#waiters.length && !this.#closed) {
      const wt = this.#waiters[0]!;
      const w = this.#takeNow(wt.taskId, wt.reuse);
      if (!w) return;
      this.#waiters.shift();
      wt.resolve(w);
    }
  }
}
