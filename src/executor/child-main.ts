/**
 * Entry point of an isolated worker process: `node [execArgv] child-main.js <workflows module> [--prewarm]`.
 * Loads the workflows module, says Ready on fd 3, then runs one turn per Run frame with the
 * same TurnContextImpl the engine uses inline; its TurnHost turns every record into a frame
 * and waits for the engine's acknowledgement. It never opens the store (invariant 2).
 * Keep imports light: no engine, store, `level`, protobufjs or `@temporalio/proto` (cold start;
 * test/executor/protocol-codec.test.ts checks the import graph).
 *
 * `--prewarm` (warm-pool workers, spawned ahead of need): before Ready, run a synthetic turn
 * through the real frame, context and handler paths so V8 has compiled them, and wait until
 * the orphan watchdog thread is up, so the first real turn meets a quiet, warmed-up process.
 * A cold worker (a turn is already waiting for it) says Ready as soon as the module loaded.
 */
import { Socket } from 'node:net';
import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { FencedError, TurnlogError } from '../errors.js';
import { errorToFailure, failureToError } from '../history/failure.js';
import { DefaultPayloadConverter, moduleConverter, type PayloadConverter } from '../history/payload.js';
import { TurnContextImpl, runHandler } from '../attempt/context.js';
import type { CallRecord, CallReplies } from '../attempt/calls.js';
import type { TurnHost, TurnSpec } from '../attempt/host.js';
import type { Workflow } from '../workflow/define-workflow.js';
import type { WaitOutcome } from '../history/state.js';
import { workflowList } from '../workflow/workflow-source.js';
import { markIsolatedWorker } from './isolation.js';
import {
  FrameReader,
  HEARTBEAT_INTERVAL_MS,
  PARENT_DEATH_SIGNAL_FLAG,
  PREWARM_FLAG,
  PROTOCOL_FD,
  PROTOCOL_VERSION,
  decodeEngineMessage,
  encodeEngineMessage,
  encodeWorkerMessage,
  warmUpCodecs,
  type EngineMessage,
  type TerminalOutcome,
  type WorkerMessage,
} from './protocol.js';

const ORPHAN_POLL_MS = 250;
/** Longest wait for stdout/stderr to flush before exiting anyway. */
const FLUSH_LIMIT_MS = 5000;
/** How long a warm-pool worker waits for the engine's first frame before Ready. */
const PING_WAIT_MS = 1000;
/** Name of the synthetic workflow of the warm-up turn (never listed in Ready). */
const WARM_UP_WORKFLOW = '\0turnlog-warm-up';

interface Pending {
  resolve(v: unknown): void;
  reject(e: unknown): void;
}

interface Turn {
  ctx: TurnContextImpl<unknown, unknown> | undefined;
  pending: Map<number, Pending>;
  /** Waits the engine ended (Signals frames), by seq, until ctx.waitFor takes them. */
  ended: Map<number, WaitOutcome>;
  /** ctx.waitFor calls waiting for their Signals frame, by seq. */
  waiting: Map<number, (o: WaitOutcome) => void>;
  heartbeat: NodeJS.Timeout;
  taskId: string;
  turn: number;
  attempt: number;
}

// Before any user code loads: engine and client entry points now throw IsolationBoundaryError.
markIsolatedWorker();

/** The workflows module's `payloadConverter` export, if any (it must match the engine's). */
let converter: PayloadConverter = new DefaultPayloadConverter();
const pipe = new Socket({ fd: PROTOCOL_FD, readable: true, writable: true });
const reader = new FrameReader();
const workflows = new Map<string, Workflow<any, any, any, any>>();
let turn: Turn | undefined;
let pendingInputs = 0;
let shutdownAsked = false;
/** A fatal error happened: no frame is handled any more while the output flushes. */
let dying = false;
/** Where frames go: the pipe, or the warm-up's loopback. */
let send: (m: WorkerMessage) => void = (m) => {
  pipe.write(encodeWorkerMessage(m));
};

// EOF or a broken pipe: the engine is gone or done with us. Exit as soon as stdout/stderr are
// flushed: nothing this process does from now on could be recorded. (A busy handler never gets
// here: see watchOrphan.)
pipe.on('end', () => exitFlushed(0));
pipe.on('error', () => exitFlushed(0));

/**
 * Exits once stdout and stderr have handed everything queued to the engine: they are async
 * pipes, and process.exit() drops what is still queued (an 8 MB burst lost its tail, issue 10.10).
 * A dead engine makes the writes fail (EPIPE), which ends the wait too; FLUSH_LIMIT_MS caps it.
 */
function exitFlushed(code: number): void {
  let waiting = 1;
  const done = (): void => {
    if (--waiting === 0) process.exit(code);
  };
  for (const s of [process.stdout, process.stderr]) {
    if (s.writableLength > 0 && !s.destroyed) {
      waiting++;
      s.write('', done);
    }
  }
  if (waiting > 1) setTimeout(() => process.exit(code), FLUSH_LIMIT_MS);
  done();
}
// Attached once the module has loaded (main): until then the socket stays paused, and a Run
// sent early waits in it rather than meeting an empty workflow table.
const onData = (chunk: Buffer): void => {
  if (dying) return;
  let frames: Uint8Array[];
  try {
    frames = reader.push(chunk);
  } catch (err) {
    return fatal(err);
  }
  onFrames(frames);
};

function onFrames(frames: Uint8Array[]): void {
  for (const f of frames) {
    if (dying) return;
    let m: EngineMessage;
    try {
      m = decodeEngineMessage(f);
    } catch (err) {
      return fatal(err);
    }
    onMessage(m);
  }
}

/** Stops reading frames and exits (70) once the output is flushed; callers return right after. */
function fatal(err: unknown): void {
  dying = true;
  pipe.pause();
  process.stderr.write(`[turnlog worker ${process.pid}] ${(err as Error).stack ?? String(err)}\n`);
  exitFlushed(70);
}

function onMessage(m: EngineMessage): void {
  switch (m.type) {
    case 'run':
      if (turn) return fatal(new Error(`Run for task ${m.spec.taskId} while turn ${turn.ctx?.turn} still runs`));
      pendingInputs = m.pendingInputs;
      void runTurn(m.spec);
      return;
    case 'cancel':
      turn?.ctx?.cancel(m.kind, m.reason);
      return;
    case 'ack': {
      const p = turn?.pending.get(m.seq);
      // An ack for a record the handler stopped waiting for (the turn already ended): nothing to do.
      if (!p) return;
      turn!.pending.delete(m.seq);
      if (m.error) p.reject(failureToError(m.error));
      else p.resolve(m.grant ? m.grant.waitedMs : m.reply?.value);
      return;
    }
    case 'pending-inputs':
      pendingInputs = m.count;
      return;
    case 'signals':
      for (const { seq, outcome } of m.ended) {
        const w = turn?.waiting.get(seq);
        if (w) {
          turn!.waiting.delete(seq);
          w(outcome);
        } else turn?.ended.set(seq, outcome);
      }
      return;
    case 'shutdown':
      shutdownAsked = true;
      if (!turn) exitFlushed(0);
      return;
  }
}

/** Sends a record of turn `t` and waits for the engine's answer; a turn that ended is fenced. */
function request<T>(t: Turn, seq: number, m: WorkerMessage): Promise<T> {
  // A step left running by an ended turn must not land in the next one (reused workers).
  if (turn !== t) return Promise.reject(new FencedError(t.taskId, t.turn, t.attempt, 'its turn already ended in this worker'));
  return new Promise<T>((resolve, reject) => {
    t.pending.set(seq, { resolve: resolve as (v: unknown) => void, reject });
    send(m);
  });
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** Bytes queued on the pipe above which emits are dropped (and counted): a turn never waits for a reader. */
const EMIT_QUEUE_BYTES = 1024 * 1024;
let droppedEmits = 0;

/** The host of one turn: its records go out only while that turn is the worker's current one. */
function hostFor(t: Turn): TurnHost {
  return {
    record: <C extends CallRecord>(call: C) => request<CallReplies[C['kind']]>(t, call.seq, { type: 'record', call }),
    // Answered once the engine's limiter grants it; a cancel stops the wait here (the engine's
    // side gives up when the step's record arrives, which the context sends next).
    acquire: (limit, seq, signal) => {
      const granted = request<number>(t, seq, { type: 'acquire', seq, limit });
      if (signal.aborted) return Promise.reject(signal.reason);
      return new Promise<number>((resolve, reject) => {
        const onAbort = () => {
          t.pending.delete(seq);
          reject(signal.reason);
        };
        signal.addEventListener('abort', onAbort, { once: true });
        granted.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
      });
    },
    pendingInputCount: () => pendingInputs,
    now: () => Date.now(),
    sleep,
    // The engine ends every wait (a signal, or the deadline on its clock) and pushes the outcome.
    wait: (seq) => {
      const known = t.ended.get(seq);
      if (known) {
        t.ended.delete(seq);
        return Promise.resolve(known);
      }
      return new Promise((resolve) => t.waiting.set(seq, resolve));
    },
    emit: (item) => {
      if (turn !== t) return;
      if (pipe.writableLength > EMIT_QUEUE_BYTES) {
        droppedEmits++;
        return;
      }
      send({ type: 'emit', item, dropped: droppedEmits });
      droppedEmits = 0;
    },
  };
}

async function runTurn(spec: TurnSpec): Promise<void> {
  const heartbeat = setInterval(() => send({ type: 'heartbeat' }), HEARTBEAT_INTERVAL_MS);
  heartbeat.unref();
  const t: Turn = { ctx: undefined, pending: new Map(),
    ended: new Map(),
    waiting: new Map(), heartbeat, taskId: spec.taskId, turn: spec.turn, attempt: spec.attempt };
  turn = t;
  let outcome: TerminalOutcome;
  const wf = workflows.get(spec.workflow);
  if (!wf) {
    const err = new TurnlogError(
      'TURNLOG_WORKFLOW_NOT_FOUND',
      `Task ${spec.taskId}: workflow ${spec.workflow} is not exported by the worker's workflows module (it exports ${[...workflows.keys()].join(', ') || 'none'}). Export it from the module given as ProcessExecutor({ workflowsModule }).`,
    );
    outcome = { kind: 'failed', failure: errorToFailure(err) };
  } else {
    try {
      t.ctx = new TurnContextImpl(spec, hostFor(t), converter, wf.initialState);
      outcome = (await runHandler(wf.turn, t.ctx, converter)) as TerminalOutcome;
    } catch (err) {
      outcome = { kind: 'failed', failure: errorToFailure(err) };
    }
  }
  clearInterval(heartbeat);
  t.ctx?.fence('its turn already ended in this worker');
  turn = undefined;
  send({ type: 'terminal', outcome });
  if (shutdownAsked) pipe.end(() => exitFlushed(0));
}

/**
 * A synthetic turn through the real paths (Run frame → onData → runTurn → context, step,
 * checkpoint, takeInputs, suspend → frames → acks), answered by a loopback instead of the
 * engine, once per kind. The first real turn then runs compiled code. Leaves no state behind.
 */
async function warmUp(): Promise<void> {
  warmUpCodecs();
  const wf = {
    name: WARM_UP_WORKFLOW,
    policy: {},
    turn: async (ctx: TurnContextImpl<unknown, unknown>, input: unknown) => {
      const v = await ctx.step('warm-up', () => ({ input, n: 1 }));
      await ctx.checkpoint(v);
      await ctx.takeInputs();
      void ctx.pendingInputCount, ctx.signal.aborted, ctx.checkpointData;
      return ctx.turn === 1 ? v : ctx.suspend('next', v);
    },
  } as unknown as Workflow<any, any, any, any>;
  workflows.set(WARM_UP_WORKFLOW, wf);
  const real = send;
  const loop = new FrameReader();
  try {
    for (const kind of ['one-shot', 'multi-turn'] as const) {
      await new Promise<void>((resolve, reject) => {
        send = (m) => {
          // Encode and decode as if it crossed the pipe, then answer as the engine would.
          const back = loop.push(encodeWorkerMessage(m));
          if (back.length !== 1) return reject(new Error('warm-up: bad loopback frame'));
          const reply = (e: EngineMessage) => setImmediate(() => onData(Buffer.from(encodeEngineMessage(e))));
          if (m.type === 'record') reply(m.call.kind === 'take-inputs' ? { type: 'ack', seq: m.call.seq, reply: { kind: 'take-inputs', value: [] } } : { type: 'ack', seq: m.call.seq });
          else if (m.type === 'terminal') {
            if (m.outcome.kind === 'failed') reject(failureToError(m.outcome.failure));
            else resolve();
          }
        };
        const payload = converter.toPayload({ warm: true });
        const spec: TurnSpec = {
          taskId: 'warm-up', workflow: WARM_UP_WORKFLOW, kind, turn: kind === 'one-shot' ? 1 : 2, attempt: 1, entryMode: 'fresh', steered: false,
          inputId: 'warm-up', input: payload, state: payload, calls: [], taken: [], turnStartedAt: Date.now(), deadline: Date.now() + 60_000,
          recoveryCount: 0, stepRetry: { maxAttempts: 1, initialIntervalMs: 0, backoffCoefficient: 1, maxIntervalMs: 0, nonRetryableTypes: [] },
          timeoutExceeded: false, cancelRequested: false,
        };
        onData(Buffer.from(encodeEngineMessage({ type: 'run', spec, pendingInputs: 0 })));
      });
    }
  } finally {
    send = real;
    workflows.delete(WARM_UP_WORKFLOW);
    pendingInputs = 0;
  }
}

/** Named exports, arrays and a default export: the same reading as the engine's (workflow-source.ts); and a `payloadConverter`. */
function collect(mod: Record<string, unknown>): void {
  // Workers see plain payloads (codecs run in the engine): their pipeline is the converter alone.
  const c = moduleConverter(mod);
  if (c) converter = c;
  for (const w of workflowList(mod)) workflows.set(w.name, w);
}

/**
 * A busy handler never sees the pipe's EOF, so a tiny thread polls the parent: once it is
 * gone, the thread SIGKILLs this process and its group. No orphan keeps running handler code.
 * (Not started when the engine spawned this worker with a parent-death signal.)
 */
async function watchOrphan(): Promise<{ online: Promise<void> }> {
  // Loaded only here: a worker with a parent-death signal never needs it.
  const { Worker } = await import('node:worker_threads');
  const code = `const { workerData: d } = require('node:worker_threads');
setInterval(() => { try { process.kill(d.ppid, 0); } catch (e) { if (e.code === 'ESRCH') { try { process.kill(-d.pid, 'SIGKILL'); } catch {} process.kill(d.pid, 'SIGKILL'); } } }, d.ms);`;
  // The engine spawns workers as group leaders (POSIX): -pid kills the handler's children too.
  const w = new Worker(code, { eval: true, workerData: { ppid: process.ppid, pid: process.pid, ms: ORPHAN_POLL_MS }, stdout: false, stderr: false });
  w.unref();
  // Booting the thread takes tens of ms of CPU: a warm worker waits for it before Ready.
  const online = new Promise<void>((resolve) => {
    w.once('online', () => resolve());
    w.once('error', () => resolve());
  });
  return { online };
}

async function main(): Promise<void> {
  const spec = process.argv[2];
  if (!spec) return fatal(new Error('usage: child-main.js <workflows module path or file URL> [--prewarm]'));
  const flags = process.argv.slice(3);
  const prewarm = flags.includes(PREWARM_FLAG);
  // Started through `setpriv --pdeathsig SIGKILL`, the kernel kills this process with the engine:
  // no watchdog thread (its start costs ~5 ms here and ~40 ms of CPU on another core).
  // Otherwise start it first thing: the thread boots on another core while this one loads the module.
  const watchdog = flags.includes(PARENT_DEATH_SIGNAL_FLAG) ? undefined : watchOrphan();
  try {
    const url = spec.startsWith('file:') ? spec : pathToFileURL(isAbsolute(spec) ? spec : resolve(spec)).href;
    collect((await import(url)) as Record<string, unknown>);
  } catch (err) {
    const e = new TurnlogError('TURNLOG_WORKER_START', `Worker ${process.pid} could not load workflows module ${spec}: ${(err as Error).message}`, { cause: err });
    send({ type: 'ready', protocolVersion: PROTOCOL_VERSION, pid: process.pid, workflows: [], error: errorToFailure(e) });
    pipe.end(() => exitFlushed(1));
    return;
  }
  if (prewarm) {
    try {
      await warmUp();
    } catch (err) {
      // Only ever a turnlog bug; the worker still works, just colder.
      process.stderr.write(`[turnlog worker ${process.pid}] warm-up failed: ${(err as Error).stack ?? String(err)}\n`);
    }
  }
  // The thread exists before Ready (so before any handler runs); a warm worker also waits until it is up.
  const thread = await watchdog;
  if (prewarm) await thread?.online;
  const early = prewarm ? await readPing() : [];
  send({ type: 'ready', protocolVersion: PROTOCOL_VERSION, pid: process.pid, workflows: [...workflows.keys()] });
  pipe.on('data', onData);
  pipe.resume();
  onFrames(early);
}

/**
 * A warm-pool worker's engine writes a PendingInputs frame right after the spawn. Reading it
 * through the socket before Ready runs Node's stream read path once, so the first Run does not
 * meet it cold (~0.5 ms). Only that frame is handled; frames behind it (a Run already) are
 * returned for after Ready, and the socket is paused again.
 */
function readPing(): Promise<Uint8Array[]> {
  return new Promise((done) => {
    const finish = (rest: Uint8Array[]) => {
      clearTimeout(timer);
      pipe.removeListener('data', onChunk);
      pipe.pause();
      done(rest);
    };
    // Never longer than this (the frame is always sent; this only guards a mismatch).
    const timer = setTimeout(() => finish([]), PING_WAIT_MS);
    const onChunk = (chunk: Buffer) => {
      let frames: Uint8Array[];
      try {
        frames = reader.push(chunk);
      } catch (err) {
        return fatal(err);
      }
      if (frames.length === 0) return;
      let m: EngineMessage;
      try {
        m = decodeEngineMessage(frames[0]!);
      } catch (err) {
        return fatal(err);
      }
      if (m.type !== 'pending-inputs') return finish(frames);
      onMessage(m);
      finish(frames.slice(1));
    };
    pipe.on('data', onChunk);
  });
}

void main();
