// Framing and validation of the worker protocol, without processes.
import { describe, expect, it } from 'vitest';
import {
  FrameReader,
  MAX_FRAME_BYTES,
  decodeEngineMessage,
  decodeWorkerMessage,
  encodeEngineMessage,
  encodeWorkerMessage,
  isWorkerFrameStart,
  type EngineMessage,
  type WorkerMessage,
} from '../../src/executor/protocol.js';
import { isTurnlogError } from '../../src/errors.js';
import { defaultPayloadConverter } from '../../src/history/payload.js';
import type { TurnSpec } from '../../src/attempt/host.js';

const p = (v: unknown) => defaultPayloadConverter.toPayload(v);

const spec: TurnSpec = {
  taskId: 't-1',
  workflow: 'wf',
  kind: 'multi-turn',
  turn: 3,
  attempt: 2,
  entryMode: 'recovered',
  steered: true,
  inputId: 'in-1',
  input: p({ q: 'hello' }),
  state: p({ n: 1 }),
  calls: [
    { kind: 'step', seq: 1, name: 'a', eventId: 7, attempt: 1, result: p(42), durationMs: 3 },
    { kind: 'step', seq: 2, name: 'b', eventId: 8, attempt: 1, failure: { message: 'boom', type: 'Error', code: 'X' }, durationMs: 1 },
    { kind: 'checkpoint', seq: 3, eventId: 9, data: p('cp') },
    { kind: 'take-inputs', seq: 4, eventId: 10, inputIds: ['in-2'] },
  ],
  taken: [{ inputId: 'in-2', input: p('more'), steering: true, eventId: 6, time: 1000.5 }],
  checkpoint: p('cp'),
  turnStartedAt: 1_700_000_000_000.25,
  deadline: 1_700_000_300_000.25,
  recoveryCount: 1,
  stepRetry: { maxAttempts: 3, initialIntervalMs: 100, backoffCoefficient: 2, maxIntervalMs: 10_000, nonRetryableTypes: ['Fatal'] },
  timeoutExceeded: false,
  cancelRequested: true,
};

/** Strips Buffer vs Uint8Array differences for deep equality. */
const plain = (v: unknown): unknown => JSON.parse(JSON.stringify(v, (_k, x) => (x instanceof Uint8Array ? [...x] : x && x.type === 'Buffer' ? x.data : x)));

function one(bytes: Uint8Array): Uint8Array {
  const frames = new FrameReader().push(bytes);
  expect(frames).toHaveLength(1);
  return frames[0]!;
}

describe('worker protocol', () => {
  it('round-trips every engine message, a full TurnSpec included', () => {
    const msgs: EngineMessage[] = [
      { type: 'run', spec, pendingInputs: 2 },
      { type: 'cancel', kind: 'timeout', reason: 'deadline' },
      { type: 'ack', seq: 5 },
      { type: 'ack', seq: 6, error: { message: 'fenced', type: 'FencedError', code: 'TURNLOG_FENCED' } },
      { type: 'ack', seq: 7, reply: { kind: 'take-inputs', value: [{ inputId: 'x', input: p(1) }] } },
      { type: 'pending-inputs', count: 4 },
      { type: 'shutdown' },
    ];
    for (const m of msgs) expect(plain(decodeEngineMessage(one(encodeEngineMessage(m))))).toEqual(plain(m));
  });

  it('round-trips every worker message', () => {
    const msgs: WorkerMessage[] = [
      { type: 'ready', protocolVersion: 1, pid: 123, workflows: ['a', 'b'] },
      { type: 'record', call: { kind: 'step', seq: 1, name: 's', result: p({ ok: true }), durationMs: 2.5 } },
      { type: 'record', call: { kind: 'step', seq: 2, name: 's', failure: { message: 'no', type: 'TypeError', stack: 'at x' }, durationMs: 0 } },
      { type: 'record', call: { kind: 'checkpoint', seq: 3, data: p([1, 2]) } },
      { type: 'record', call: { kind: 'take-inputs', seq: 4 } },
      { type: 'heartbeat' },
      { type: 'terminal', outcome: { kind: 'completed', output: p('done'), state: p({ n: 2 }) } },
      { type: 'terminal', outcome: { kind: 'suspended', reason: 'waiting', output: p('q?') } },
      { type: 'terminal', outcome: { kind: 'failed', failure: { message: 'bad', type: 'Error', code: 'E1', nonRetryable: true } } },
      { type: 'terminal', outcome: { kind: 'cancelled', reason: 'user' } },
      { type: 'terminal', outcome: { kind: 'timed-out' } },
      { type: 'terminal', outcome: { kind: 'exit-for-recovery', reason: 'shutdown' } },
    ];
    for (const m of msgs) expect(plain(decodeWorkerMessage(one(encodeWorkerMessage(m))))).toEqual(plain(m));
  });

  it('reassembles frames split at every byte and several frames in one chunk', () => {
    const a = encodeWorkerMessage({ type: 'record', call: { kind: 'checkpoint', seq: 1, data: p('x'.repeat(300)) } });
    const b = encodeWorkerMessage({ type: 'heartbeat' });
    const all = new Uint8Array([...a, ...b, ...a]);
    const reader = new FrameReader();
    const got: Uint8Array[] = [];
    for (const byte of all) got.push(...reader.push(Uint8Array.of(byte)));
    expect(got.map((f) => decodeWorkerMessage(f).type)).toEqual(['record', 'heartbeat', 'record']);
    expect(new FrameReader().push(all)).toHaveLength(3);
    expect(reader.buffered).toBe(0);
  });

  it('refuses an oversized length prefix before reading the body', () => {
    const prefix = Uint8Array.of(0x81, 0x80, 0x80, 0x20); // 64 MiB + 1
    expect(MAX_FRAME_BYTES + 1).toBe(0x81 & 0x7f | (0x20 << 21));
    expect(() => new FrameReader().push(prefix)).toThrow(/exceeds the 67108864-byte limit/);
    expect(() => new FrameReader(10).push(Uint8Array.of(11))).toThrow(expect.objectContaining({ code: 'TURNLOG_WORKER_PROTOCOL' }));
  });

  it('rejects malformed and invalid worker frames with TURNLOG_WORKER_PROTOCOL', () => {
    const bad: [Uint8Array, RegExp][] = [
      [Uint8Array.of(0xff, 0xff, 0xff), /undecodable frame/],
      [new Uint8Array(0), /empty or unknown frame/],
      [one(encodeWorkerMessage({ type: 'record', call: { kind: 'step', seq: 0, name: 's', result: p(1), durationMs: 0 } })), /seq 0/],
      [one(encodeWorkerMessage({ type: 'record', call: { kind: 'step', seq: 1, name: '', result: p(1), durationMs: 0 } })), /no name/],
      [one(encodeWorkerMessage({ type: 'record', call: { kind: 'step', seq: 1, name: 's', durationMs: 0 } })), /exactly one of result and failure/],
      [one(encodeWorkerMessage({ type: 'record', call: { kind: 'step', seq: 1, name: 's', result: p(1), durationMs: -1 } })), /duration -1/],
    ];
    for (const [bytes, msg] of bad) {
      let err: unknown;
      try {
        decodeWorkerMessage(bytes);
      } catch (e) {
        err = e;
      }
      expect(isTurnlogError(err, 'TURNLOG_WORKER_PROTOCOL')).toBe(true);
      expect((err as Error).message).toMatch(msg);
    }
  });
});

describe('telling frames from text early (issue 10.9)', () => {
  it('every worker frame starts with a byte isWorkerFrameStart accepts; text mostly does not', () => {
    const all: WorkerMessage[] = [
      { type: 'ready', protocolVersion: 1, pid: 1, workflows: [] },
      { type: 'heartbeat' },
      { type: 'record', call: { kind: 'take-inputs', seq: 1 } },
      { type: 'terminal', outcome: { kind: 'timed-out' } },
      { type: 'terminal', outcome: { kind: 'cancelled', reason: 'r' } },
    ];
    for (const m of all) {
      const [body] = new FrameReader().push(encodeWorkerMessage(m));
      expect(isWorkerFrameStart(body![0]!)).toBe(true);
    }
    // 'hello\n': 'h' is the length, 'e' (field 12, wire type 5) cannot open a body.
    expect(isWorkerFrameStart('e'.charCodeAt(0))).toBe(false);
    expect(isWorkerFrameStart(0x1a)).toBe(false); // field 3 with the right wire type: retired in protocol 2, no such member
  });

  it('shows the frame being read: its length and its first body bytes', () => {
    const r = new FrameReader();
    expect(r.push(Buffer.from('hello\n'))).toEqual([]);
    expect(r.partial()).toEqual({ length: 104, head: Uint8Array.from(Buffer.from('ello\n')) });
    expect(new FrameReader().partial()).toBeUndefined();
  });
});
