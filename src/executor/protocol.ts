/**
 * The worker protocol (proto/turnlog/v1/worker.proto): plain TS messages ⇄ length-delimited
 * protobuf frames, and a {@link FrameReader} that splits a byte stream back into frames.
 * Both sides import this file; it must stay light (no engine, store, protobufjs or @temporalio/proto):
 * the codec is written by hand on wire.ts, byte for byte what protobufjs' reflected encoder writes
 * for the same messages (test/executor/protocol-codec.test.ts holds it to that), because loading
 * protobufjs and the descriptor was most of a cold worker's start-up.
 * Every frame from a worker is validated (protocol-worker-frames.ts); anything malformed is a
 * {@link WorkerProtocolError}. The parts: protocol-messages.ts (messages, constants, the error),
 * protocol-engine-frames.ts and protocol-worker-frames.ts (each direction's codec), frame-reader.ts
 * (the framing over the pipe); this module re-exports them and warms their codecs up.
 */
import type { FailureInfo } from '../history/events.js';
import type { TurnSpec } from '../attempt/host.js';
import { FrameReader } from './frame-reader.js';
import { PROTOCOL_VERSION, type EngineMessage, type WorkerMessage } from './protocol-messages.js';
import { decodeEngineMessage, encodeEngineMessage } from './protocol-engine-frames.js';
import { decodeWorkerMessage, encodeWorkerMessage } from './protocol-worker-frames.js';

export {
  HEARTBEAT_INTERVAL_MS,
  MAX_FRAME_BYTES,
  PARENT_DEATH_SIGNAL_FLAG,
  PREWARM_FLAG,
  PROTOCOL_FD,
  PROTOCOL_VERSION,
  WorkerProtocolError,
  type EngineMessage,
  type TerminalOutcome,
  type WorkerMessage,
} from './protocol-messages.js';
export { decodeEngineMessage, encodeEngineMessage } from './protocol-engine-frames.js';
export { WORKER_BODIES, decodeWorkerMessage, encodeWorkerMessage, isWorkerFrameStart, type Kind } from './protocol-worker-frames.js';
export { FrameReader } from './frame-reader.js';

/**
 * Round-trips one message of every kind, so V8 has compiled every encode and decode path before
 * the first real frame (a worker calls this before Ready; a pre-warmed worker's first turn skips it).
 */
export function warmUpCodecs(): void {
  const payload = { metadata: { encoding: new Uint8Array([1]) }, data: new Uint8Array([1]) };
  const failure: FailureInfo = { message: 'm', type: 't', stack: 's', code: 'c', cause: { message: 'c', type: 't' } };
  const spec: TurnSpec = {
    taskId: 't', workflow: 'w', kind: 'multi-turn', turn: 1, attempt: 1, entryMode: 'fresh', steered: false, inputId: 'i',
    input: payload, state: payload, checkpoint: payload, turnStartedAt: 1, deadline: 2, recoveryCount: 0, timeoutExceeded: false, cancelRequested: false,
    stepRetry: { maxAttempts: 1, initialIntervalMs: 1, backoffCoefficient: 1, maxIntervalMs: 1, nonRetryableTypes: ['x'] },
    calls: [
      { kind: 'step', seq: 1, name: 's', eventId: 1, attempt: 1, result: payload, failure, durationMs: 1 },
      { kind: 'checkpoint', seq: 2, eventId: 2, data: payload },
      { kind: 'take-inputs', seq: 3, eventId: 3, inputIds: ['i'] },
    ],
    taken: [{ inputId: 'i', input: payload, steering: true, eventId: 1, time: 1 }],
  };
  const engine: EngineMessage[] = [
    { type: 'run', spec, pendingInputs: 0 },
    { type: 'cancel', kind: 'timeout', reason: 'r' },
    { type: 'ack', seq: 1, error: failure },
    { type: 'ack', seq: 1, reply: { kind: 'take-inputs', value: [{ inputId: 'i', input: payload }] } },
    { type: 'ack', seq: 1, grant: { waitedMs: 1 } },
    { type: 'pending-inputs', count: 1 },
    { type: 'shutdown' },
  ];
  const worker: WorkerMessage[] = [
    { type: 'ready', protocolVersion: PROTOCOL_VERSION, pid: 1, workflows: ['w'], error: failure },
    { type: 'record', call: { kind: 'step', seq: 1, name: 's', result: payload, durationMs: 1 } },
    { type: 'record', call: { kind: 'checkpoint', seq: 1, data: payload } },
    { type: 'record', call: { kind: 'take-inputs', seq: 1 } },
    { type: 'acquire', seq: 1, limit: 'l' },
    { type: 'heartbeat' },
    { type: 'terminal', outcome: { kind: 'completed', output: payload, state: payload } },
    { type: 'terminal', outcome: { kind: 'suspended', reason: 'r', output: payload, state: payload } },
    { type: 'terminal', outcome: { kind: 'failed', failure } },
    { type: 'terminal', outcome: { kind: 'cancelled', reason: 'r' } },
    { type: 'terminal', outcome: { kind: 'timed-out' } },
    { type: 'terminal', outcome: { kind: 'exit-for-recovery', reason: 'r' } },
  ];
  const reader = new FrameReader();
  for (const m of engine) for (const f of reader.push(encodeEngineMessage(m))) decodeEngineMessage(f);
  for (const m of worker) for (const f of reader.push(encodeWorkerMessage(m))) decodeWorkerMessage(f);
}
