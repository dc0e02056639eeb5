/**
 * Review of the hand-written worker protocol codec (src/executor/wire.ts, protocol.ts): framing
 * across arbitrary chunking, size limits, truncated prefixes, forward compatibility (unknown
 * fields), lone surrogates and empty payloads. Checked and found sound; kept as regression guards.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  FrameReader,
  WorkerProtocolError,
  decodeEngineMessage,
  decodeWorkerMessage,
  encodeEngineMessage,
  encodeWorkerMessage,
  type EngineMessage,
  type WorkerMessage,
} from '../../src/executor/protocol.js';
import type { Payload } from '../../src/history/events.js';

const enc = new TextEncoder();
const json = (v: unknown): Payload => ({ metadata: { encoding: enc.encode('json/plain') }, data: enc.encode(JSON.stringify(v)) });

/** Strips the varint length prefix of an encoded frame. */
function body(frame: Uint8Array): Uint8Array {
  let i = 0;
  while (frame[i]! & 0x80) i++;
  return frame.subarray(i + 1);
}
function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
/** String.prototype.toWellFormed (ES2024, not in the lib here): lone surrogates become U+FFFD. */
const wellFormed = (s: string): string => s.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd');
const hex = (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex');

const messages: WorkerMessage[] = [
  { type: 'ready', protocolVersion: 1, pid: 42, workflows: ['a', 'b'] },
  { type: 'record', call: { kind: 'step', seq: 1, name: 'llm', result: json({ x: 'y'.repeat(300) }), durationMs: 3.5 } },
  { type: 'heartbeat' },
  { type: 'record', call: { kind: 'checkpoint', seq: 2, data: { metadata: {}, data: new Uint8Array(0) } } },
  { type: 'record', call: { kind: 'take-inputs', seq: 3 } },
  { type: 'record', call: { kind: 'step', seq: 4, name: 'big', result: { metadata: {}, data: new Uint8Array(20_000).fill(9) }, durationMs: 0 } },
  { type: 'terminal', outcome: { kind: 'completed', output: json('done') } },
];

describe('worker protocol framing (FrameReader)', () => {
  it('gives the same frames whatever the chunking: every split point of the stream, one byte at a time, all at once', () => {
    const frames = messages.map(encodeWorkerMessage);
    const stream = concat(frames);
    const want = frames.map((f) => hex(body(f)));
    // All in one chunk.
    expect(new FrameReader().push(stream).map(hex)).toEqual(want);
    // Every single split point (two chunks).
    for (let cut = 0; cut <= stream.length; cut += cut < 400 ? 1 : 97) {
      const r = new FrameReader();
      const got = [...r.push(stream.slice(0, cut)), ...r.push(stream.slice(cut))];
      expect(got.map(hex)).toEqual(want);
      expect(r.buffered).toBe(0);
    }
    // One byte at a time over the small frames.
    const small = concat(frames.slice(0, 5));
    const r = new FrameReader();
    const got: Uint8Array[] = [];
    for (let i = 0; i < small.length; i++) got.push(...r.push(small.slice(i, i + 1)));
    expect(got.map(hex)).toEqual(frames.slice(0, 5).map((f) => hex(body(f))));
  });

  it('random chunkings of random frame sequences decode to the original messages', () => {
    const msg = fc.oneof(
      fc.record({ type: fc.constant('record' as const), call: fc.record({ kind: fc.constant('take-inputs' as const), seq: fc.integer({ min: 1, max: 2 ** 31 }) }) }),
      fc.constant({ type: 'heartbeat' as const }),
      fc.record({
        type: fc.constant('record' as const),
        call: fc.record({ kind: fc.constant('checkpoint' as const), seq: fc.integer({ min: 1, max: 1000 }), data: fc.record({ metadata: fc.constant({}), data: fc.uint8Array({ maxLength: 300 }) }) }),
      }),
    );
    fc.assert(
      fc.property(fc.array(msg, { minLength: 1, maxLength: 8 }), fc.array(fc.nat({ max: 200 }), { maxLength: 10 }), (ms, cuts) => {
        const stream = concat(ms.map(encodeWorkerMessage));
        const points = [...new Set(cuts.map((c) => c % (stream.length + 1)))].sort((a, b) => a - b);
        const r = new FrameReader();
        const out: WorkerMessage[] = [];
        let from = 0;
        for (const p of [...points, stream.length]) {
          for (const f of r.push(stream.slice(from, p))) out.push(decodeWorkerMessage(f));
          from = p;
        }
        expect(out.map((m) => JSON.stringify(m, (_k, v) => (v instanceof Uint8Array ? Array.from(v) : v)))).toEqual(
          ms.map((m) => JSON.stringify(m, (_k, v) => (v instanceof Uint8Array ? Array.from(v) : v))),
        );
      }),
      { seed: 99, numRuns: 200 },
    );
  });

  it('accepts a frame of exactly the limit, refuses one byte more, and refuses a prefix over five bytes', () => {
    const exact = new FrameReader(300);
    const atLimit = concat([Uint8Array.of(0xac, 0x02), new Uint8Array(300)]);
    expect(exact.push(atLimit).map((f) => f.length)).toEqual([300]);
    expect(() => new FrameReader(300).push(Uint8Array.of(0xad, 0x02))).toThrow(WorkerProtocolError);
    expect(() => new FrameReader().push(Uint8Array.of(0x80, 0x80, 0x80, 0x80, 0x80))).toThrow(/longer than 5 bytes/);
    // The limit is checked as soon as the prefix is complete, before the body arrives.
    expect(() => new FrameReader(1024).push(Uint8Array.of(0x80, 0x80, 0x01))).toThrow(/exceeds/);
  });

  it('waits on a truncated prefix and a truncated body, then completes', () => {
    const f = encodeWorkerMessage(messages[5]!);
    const r = new FrameReader();
    expect(r.push(f.slice(0, 1))).toEqual([]); // first prefix byte has its continuation bit
    expect(r.push(f.slice(1, 3))).toEqual([]);
    expect(r.push(f.slice(3, 100))).toEqual([]);
    const got = r.push(f.slice(100));
    expect(got.map(hex)).toEqual([hex(body(f))]);
  });

  it('an empty frame body is refused as a protocol error, not a crash', () => {
    const r = new FrameReader();
    const frames = r.push(Uint8Array.of(0x00));
    expect(frames.map((f) => f.length)).toEqual([0]);
    expect(() => decodeWorkerMessage(frames[0]!)).toThrow(WorkerProtocolError);
    expect(() => decodeEngineMessage(frames[0]!)).toThrow(WorkerProtocolError);
  });
});

describe('worker protocol messages', () => {
  it('skips unknown fields of every wire type at the frame level and inside bodies (forward compatibility)', () => {
    // Unknown top-level field 30 (varint), 31 (fixed64), 29 (len), 28 (fixed32), before the body.
    const unknown = Uint8Array.of(0xf0, 0x01, 0x05, 0xf9, 0x01, 1, 2, 3, 4, 5, 6, 7, 8, 0xea, 0x01, 0x02, 0x41, 0x42, 0xe5, 0x01, 9, 9, 9, 9);
    for (const m of messages) {
      const b = new Uint8Array(body(encodeWorkerMessage(m))); // a plain Uint8Array like concat's (bytes fields are views)
      expect(decodeWorkerMessage(concat([unknown, b]))).toEqual(decodeWorkerMessage(b));
    }
    // Inside a take-inputs record: field 9 varint before seq, then the (empty) take_inputs member.
    const inner = Uint8Array.of(0x62, 0x06, 0x48, 0x7f, 0x08, 0x05, 0x22, 0x00);
    expect(decodeWorkerMessage(inner)).toEqual({ type: 'record', call: { kind: 'take-inputs', seq: 5 } });
    // A truncated varint inside a body is a protocol error.
    expect(() => decodeWorkerMessage(Uint8Array.of(0x62, 0x02, 0x08, 0x80))).toThrow(WorkerProtocolError);
    const run: EngineMessage = { type: 'pending-inputs', count: 3 };
    const eb = body(encodeEngineMessage(run));
    expect(decodeEngineMessage(concat([unknown, eb]))).toEqual(run);
  });

  it('a lone surrogate is sent as U+FFFD in short and long strings; other strings round-trip exactly', () => {
    const names = ['\ud800', 'a\udc00', 'x'.repeat(41) + '\ud800', 'y'.repeat(200) + '\udfff' + 'z', '\ud83d\ude00', 'ü'.repeat(43)];
    for (const name of names) {
      const m: WorkerMessage = { type: 'record', call: { kind: 'step', seq: 1, name, result: json(name), durationMs: 1 } };
      const back = decodeWorkerMessage(body(encodeWorkerMessage(m)));
      expect(back.type === 'record' && back.call.kind === 'step' && back.call.name).toBe(wellFormed(name));
    }
  });

  it('empty payloads and metadata with unusual keys round-trip (own "__proto__" key included)', () => {
    const md: Record<string, Uint8Array> = { '': new Uint8Array(0), '0': Uint8Array.of(1), constructor: Uint8Array.of(2) };
    Object.defineProperty(md, '__proto__', { value: Uint8Array.of(3), enumerable: true, writable: true, configurable: true });
    const m: WorkerMessage = { type: 'terminal', outcome: { kind: 'completed', output: { metadata: md, data: new Uint8Array(0) }, state: { metadata: {}, data: new Uint8Array(0) } } };
    const back = decodeWorkerMessage(body(encodeWorkerMessage(m)));
    if (back.type !== 'terminal' || back.outcome.kind !== 'completed') throw new Error('wrong message');
    expect(Object.getPrototypeOf(back.outcome.output.metadata)).toBe(Object.prototype);
    expect(Object.keys(back.outcome.output.metadata).sort()).toEqual(['', '0', '__proto__', 'constructor'].sort());
    expect(back.outcome.output.data).toBeInstanceOf(Uint8Array);
    expect(back.outcome.output.data.length).toBe(0);
    expect(back.outcome.state).toEqual({ metadata: {}, data: new Uint8Array(0) });
  });

  it('every encoded frame is its own buffer: encoding more frames does not change earlier ones', () => {
    const first = encodeWorkerMessage(messages[1]!);
    const copy = hex(first);
    for (const m of messages) encodeWorkerMessage(m);
    for (let i = 0; i < 20; i++) encodeEngineMessage({ type: 'ack', seq: i });
    expect(hex(first)).toBe(copy);
  });
});
