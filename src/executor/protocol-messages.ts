/**
 * The worker protocol's messages (proto/turnlog/v1/worker.proto) as plain TS, its constants and
 * {@link WorkerProtocolError}, plus the two helpers both directions' codecs share (a oneof member's
 * write, the error reporter the call table's readers take). Part of protocol.ts, which re-exports it;
 * loaded by the worker too, so it stays as light as protocol.ts (no engine, store or protobufjs).
 */
import { TurnlogError } from '../errors.js';
import type { FailureInfo } from '../history/events.js';
import type { WaitOutcome } from '../history/state.js';
import type { AttemptOutcome, CancelKind, EmitItem, TurnSpec } from '../attempt/host.js';
import type { CallRecord, CallReply, MemberCodec } from '../attempt/calls.js';
import type { Writer } from '../internal/wire/wire.js';

/** Bumped for any change a peer of the other version would misread. */
export const PROTOCOL_VERSION = 3;
/** Frames above this size are refused (the worker is killed). */
export const MAX_FRAME_BYTES = 64 * 1024 * 1024;
/** The child's file descriptor for the protocol pipe (0–2 stay stdin/stdout/stderr). */
export const PROTOCOL_FD = 3;
/** A worker sends a Heartbeat this often while a turn runs (the engine's liveness check). */
export const HEARTBEAT_INTERVAL_MS = 1000;
/** Worker argument after the module path: a warm-pool worker, which warms up fully before Ready. */
export const PREWARM_FLAG = '--prewarm';
/** Worker argument: the kernel SIGKILLs this worker when the engine dies (setpriv --pdeathsig), no watchdog thread needed. */
export const PARENT_DEATH_SIGNAL_FLAG = '--parent-death-signal';

/** A worker broke the protocol; the engine kills it and fails the attempt with this error. */
export class WorkerProtocolError extends TurnlogError {
  override readonly name = 'WorkerProtocolError';
  constructor(detail: string) {
    super('TURNLOG_WORKER_PROTOCOL', `Worker protocol violation: ${detail}. The worker was killed; this is a turnlog bug or handler code writing to fd 3.`);
  }
}

// ---------------------------------------------------------------------------------------------
// Messages

export type EngineMessage =
  | { type: 'run'; spec: TurnSpec; pendingInputs: number }
  | { type: 'cancel'; kind: CancelKind; reason: string }
  /** The answer to a worker's record with this seq: durable (with its reply, for kinds that have one) or refused. */
  | { type: 'ack'; seq: number; error?: FailureInfo; reply?: CallReply; grant?: { waitedMs: number } }
  | { type: 'pending-inputs'; count: number }
  /** Waits of the running turn that ended (WaitEnded durable), by seq: ctx.waitFor returns them. */
  | { type: 'signals'; ended: { seq: number; outcome: WaitOutcome }[] }
  | { type: 'shutdown' };

/** The terminal outcomes a worker can report (crashed and killed are the engine's to observe). */
export type TerminalOutcome = Exclude<AttemptOutcome, { kind: 'crashed' } | { kind: 'killed' }>;

export type WorkerMessage =
  | { type: 'ready'; protocolVersion: number; pid: number; workflows: string[]; error?: FailureInfo }
  /** A call the handler records (attempt/calls.ts); the worker waits for its ack. */
  | { type: 'record'; call: CallRecord }
  /** Step `seq` asks for a slot and token of flow limit `limit`; answered by an ack with `grant`. */
  | { type: 'acquire'; seq: number; limit: string }
  | { type: 'heartbeat' }
  | { type: 'terminal'; outcome: TerminalOutcome }
  | { type: 'emit'; item: EmitItem; dropped: number };

/** One member of a oneof: its tag, then its message. */
export function writeMember<T>(w: Writer, codec: MemberCodec<T, never>, v: T): void {
  w.uint32(codec.tag);
  const at = w.fork();
  codec.write(w, v);
  w.ldelim(at);
}

export function protocolError(detail: string): never {
  throw new WorkerProtocolError(detail);
}
