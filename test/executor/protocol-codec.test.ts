// The hand-written worker protocol codec (src/executor/protocol.ts on wire.ts) against the
// protobufjs reflected codec it replaced (reflected-protocol.ts): identical bytes for every
// frame type, identical decoded messages and validation errors, property-based.
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { failureArbitrary } from '../helpers/arbitraries.js';
import { describe, expect, it } from 'vitest';
import {
  FrameReader,
  WorkerProtocolError,
  decodeEngineMessage,
  decodeWorkerMessage,
  encodeEngineMessage,
  encodeWorkerMessage,
  type EngineMessage,
  type TerminalOutcome,
  type WorkerMessage,
} from '../../src/executor/protocol.js';
import type { FailureInfo, Payload, RetryPolicy } from '../../src/history/events.js';
import type { QueuedInput, RecordedCall } from '../../src/history/state.js';
import type { TurnSpec } from '../../src/attempt/host.js';
import type { CallRecords } from '../../src/attempt/calls.js';
import {
  reflectedDecodeEngineMessage,
  reflectedDecodeWorkerMessage,
  reflectedEncodeEngineMessage,
  reflectedEncodeWorkerMessage,
} from './reflected-protocol.js';

// Well-formed strings of every kind: ASCII, any code point (4-byte UTF-8), graphemes; long
// ones cross the writer's one-byte-length and the reader's short-string paths.
const str = fc.oneof(
  fc.string({ maxLength: 8 }),
  fc.string({ unit: 'binary', maxLength: 60 }),
  fc.string({ unit: 'grapheme', maxLength: 30 }),
  fc.string({ minLength: 100, maxLength: 300 }),
);
const u32 = fc.oneof(fc.constant(0), fc.nat({ max: 200 }), fc.nat({ max: 0xffffffff }));
const dbl = fc.oneof(fc.constant(0), fc.constant(-0), fc.double(), fc.integer({ min: 0, max: 2 ** 48 }));
const bool = fc.boolean();
const bytes = fc.oneof(fc.uint8Array({ maxLength: 8 }), fc.uint8Array({ minLength: 120, maxLength: 400 }));
const metadataKey = fc.string({ maxLength: 12 }).filter((k) => k !== '__proto__');
const payload: fc.Arbitrary<Payload> = fc.record({
  metadata: fc.dictionary(metadataKey, bytes, { maxKeys: 3 }),
  data: bytes,
});
const failure = failureArbitrary({ message: str, type: str, stack: str, nonRetryable: bool, code: str, details: payload });
/** A record whose `optional` keys are sometimes absent. */
function rec<T>(model: { [K in keyof T]-?: fc.Arbitrary<Exclude<T[K], undefined>> }, optional: (keyof T)[]): fc.Arbitrary<T> {
  const requiredKeys = (Object.keys(model) as (keyof T)[]).filter((k) => !optional.includes(k));
  return fc.record(model as never, { requiredKeys } as never) as unknown as fc.Arbitrary<T>;
}

const call: fc.Arbitrary<RecordedCall> = fc.oneof(
  rec<Extract<RecordedCall, { kind: 'step' }>>({ kind: fc.constant('step' as const), seq: u32, name: str, eventId: u32, attempt: u32, result: payload, failure, durationMs: dbl }, ['result', 'failure']),
  fc.record({ kind: fc.constant('checkpoint' as const), seq: u32, eventId: u32, data: payload }),
  fc.record({ kind: fc.constant('take-inputs' as const), seq: u32, eventId: u32, inputIds: fc.array(str, { maxLength: 3 }) }),
  fc.record({ kind: fc.constant('patch' as const), seq: u32, eventId: u32, patchId: str, deprecated: bool }),
  rec<Extract<RecordedCall, { kind: 'wait' }>>(
    {
      kind: fc.constant('wait' as const),
      seq: u32,
      eventId: u32,
      name: str,
      timeoutMs: dbl,
      deadline: dbl,
      ended: rec({ signalId: str, value: payload, timedOut: bool, eventId: fc.constant(0) }, ['value']),
    },
    ['timeoutMs', 'deadline', 'ended'],
  ),
);
const taken: fc.Arbitrary<QueuedInput> = fc.record({ inputId: str, input: payload, steering: bool, eventId: u32, time: dbl });
const retry: fc.Arbitrary<RetryPolicy> = rec<RetryPolicy>(
  {
    maxAttempts: u32,
    initialIntervalMs: dbl,
    backoffCoefficient: dbl,
    maxIntervalMs: dbl,
    nonRetryableTypes: fc.array(str, { maxLength: 3 }),
    jitter: dbl,
  },
  ['jitter'],
);
const spec: fc.Arbitrary<TurnSpec> = rec<TurnSpec>(
  {
    taskId: str,
    workflow: str,
    kind: fc.constantFrom('one-shot' as const, 'multi-turn' as const),
    turn: u32,
    attempt: u32,
    entryMode: fc.constantFrom('fresh' as const, 'resumed' as const, 'recovered' as const),
    steered: bool,
    inputId: str,
    input: payload,
    state: payload,
    calls: fc.array(call, { maxLength: 4 }),
    taken: fc.array(taken, { maxLength: 3 }),
    checkpoint: payload,
    turnStartedAt: dbl,
    deadline: dbl,
    recoveryCount: u32,
    stepRetry: retry,
    timeoutExceeded: bool,
    cancelRequested: bool,
  },
  ['state', 'checkpoint'],
);

const engineMessage: fc.Arbitrary<EngineMessage> = fc.oneof(
  fc.record({ type: fc.constant('run' as const), spec, pendingInputs: u32 }),
  fc.record({ type: fc.constant('cancel' as const), kind: fc.constantFrom('timeout' as const, 'cancel' as const, 'shutdown' as const), reason: str }),
  rec<Extract<EngineMessage, { type: 'ack' }>>(
    {
      type: fc.constant('ack' as const),
      seq: u32,
      error: failure,
      reply: fc.record({ kind: fc.constant('take-inputs' as const), value: fc.array(fc.record({ inputId: str, input: payload }), { maxLength: 3 }) }),
      grant: fc.record({ waitedMs: dbl }),
    },
    ['error', 'reply', 'grant'],
  ).filter((m) => !(m.reply && m.grant)), // one member of the reply oneof
  fc.record({ type: fc.constant('pending-inputs' as const), count: u32 }),
  fc.record({ type: fc.constant('ack' as const), seq: u32, reply: fc.record({ kind: fc.constant('wait' as const), value: rec<{ deadline?: number }>({ deadline: dbl }, ['deadline']) }) }),
  fc.record({
    type: fc.constant('signals' as const),
    ended: fc.array(fc.record({ seq: u32, outcome: rec({ signalId: str, value: payload, timedOut: bool, eventId: fc.constant(0) }, ['value']) }), { maxLength: 3 }),
  }),
  fc.constant({ type: 'shutdown' as const }),
);

const outcome: fc.Arbitrary<TerminalOutcome> = fc.oneof(
  rec<Extract<TerminalOutcome, { kind: 'completed' }>>({ kind: fc.constant('completed' as const), output: payload, state: payload }, ['state']),
  rec<Extract<TerminalOutcome, { kind: 'suspended' }>>({ kind: fc.constant('suspended' as const), reason: str, output: payload, state: payload }, ['output', 'state']),
  fc.record({ kind: fc.constant('failed' as const), failure }),
  fc.record({ kind: fc.constant('cancelled' as const), reason: str }),
  fc.constant({ kind: 'timed-out' as const }),
  fc.record({ kind: fc.constant('exit-for-recovery' as const), reason: str }),
);
// Invalid ones included (seq 0, no name, both or neither of result and failure, negative or
// NaN durations): both codecs must refuse them with the same message.
const stepRecord: fc.Arbitrary<CallRecords['step']> = fc
  .tuple(
    rec<Omit<CallRecords['step'], 'limit' | 'waitedMs'>>({ kind: fc.constant('step' as const), seq: u32, name: str, result: payload, failure, durationMs: dbl }, ['result', 'failure']),
    fc.option(fc.record({ limit: str.filter((s) => s !== ''), waitedMs: dbl }), { nil: undefined }),
  )
  .map(([s, limited]) => ({ ...s, ...limited }));
const workerMessage: fc.Arbitrary<WorkerMessage> = fc.oneof(
  rec<Extract<WorkerMessage, { type: 'ready' }>>({ type: fc.constant('ready' as const), protocolVersion: u32, pid: u32, workflows: fc.array(str, { maxLength: 4 }), error: failure }, ['error']),
  fc.record({ type: fc.constant('record' as const), call: stepRecord }),
  fc.record({ type: fc.constant('acquire' as const), seq: u32, limit: str }),
  fc.record({ type: fc.constant('record' as const), call: fc.record({ kind: fc.constant('checkpoint' as const), seq: u32, data: payload }) }),
  fc.record({ type: fc.constant('record' as const), call: fc.record({ kind: fc.constant('take-inputs' as const), seq: u32 }) }),
  fc.record({ type: fc.constant('record' as const), call: fc.record({ kind: fc.constant('patch' as const), seq: u32, patchId: str, deprecated: bool }) }),
  fc.record({ type: fc.constant('record' as const), call: rec<CallRecords['wait']>({ kind: fc.constant('wait' as const), seq: u32, name: str, timeoutMs: dbl }, ['timeoutMs']) }),
  fc.constant({ type: 'heartbeat' as const }),
  fc.record({ type: fc.constant('terminal' as const), outcome }),
  fc.record({
    type: fc.constant('emit' as const),
    item: fc.oneof(fc.record({ kind: fc.constant('chunk' as const), data: payload }), fc.record({ kind: fc.constant('step-started' as const), seq: u32, name: str })),
    dropped: u32,
  }),
);

/** Buffer vs Uint8Array, -0 vs 0 and NaN compared by value. */
const plain = (v: unknown): unknown =>
  JSON.parse(
    JSON.stringify(v, (_k, x) => {
      // (The reflected decoder reads absent bytes as protobufjs' empty default, a plain [].)
      if (x instanceof Uint8Array) return [...x];
      if (x && typeof x === 'object' && x.type === 'Buffer' && Array.isArray(x.data)) return x.data;
      if (typeof x === 'number' && !Number.isFinite(x)) return String(x);
      if (Object.is(x, -0)) return '-0';
      return x;
    }),
  );

/** The decoded message, or the error's class and message. */
function outcomeOf(decode: () => unknown): unknown {
  try {
    return { ok: plain(decode()) };
  } catch (err) {
    return { error: (err as Error).name, message: (err as Error).message };
  }
}

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const body = (frame: Uint8Array): Uint8Array => {
  const frames = new FrameReader().push(frame);
  expect(frames).toHaveLength(1);
  return frames[0]!;
};
const RUNS = { numRuns: 400 };

describe('hand-written worker protocol codec = protobufjs reflection', () => {
  it('engine frames: same bytes, same decoded message', () => {
    fc.assert(
      fc.property(engineMessage, (m) => {
        const hand = encodeEngineMessage(m);
        const reflected = reflectedEncodeEngineMessage(m);
        expect(hex(hand)).toBe(hex(reflected));
        const b = body(hand);
        expect(outcomeOf(() => decodeEngineMessage(b))).toEqual(outcomeOf(() => reflectedDecodeEngineMessage(b)));
      }),
      RUNS,
    );
  });

  it('worker frames: same bytes, same decoded message or the same validation error', () => {
    fc.assert(
      fc.property(workerMessage, (m) => {
        const hand = encodeWorkerMessage(m);
        const reflected = reflectedEncodeWorkerMessage(m);
        expect(hex(hand)).toBe(hex(reflected));
        const b = body(hand);
        expect(outcomeOf(() => decodeWorkerMessage(b))).toEqual(outcomeOf(() => reflectedDecodeWorkerMessage(b)));
      }),
      RUNS,
    );
  });

  it('covers every frame type', () => {
    // One of each, through both codecs (the properties above draw from the same set).
    const p: Payload = { metadata: { encoding: Uint8Array.of(1) }, data: new Uint8Array(200).fill(7) };
    const f: FailureInfo = { message: 'm', type: 'T', stack: 's', code: 'C', nonRetryable: true, details: p, cause: { message: 'c', type: 'U' } };
    const s: TurnSpec = {
      taskId: 't', workflow: 'w', kind: 'multi-turn', turn: 2, attempt: 1, entryMode: 'resumed', steered: true, inputId: 'i', input: p, state: p, checkpoint: p,
      turnStartedAt: 1.5, deadline: 2.5, recoveryCount: 1, timeoutExceeded: true, cancelRequested: true,
      stepRetry: { maxAttempts: 3, initialIntervalMs: 1, backoffCoefficient: 2, maxIntervalMs: 9, nonRetryableTypes: ['x', ''] },
      calls: [
        { kind: 'step', seq: 1, name: 's', eventId: 1, attempt: 1, result: p, failure: f, durationMs: 1 },
        { kind: 'checkpoint', seq: 2, eventId: 2, data: p },
        { kind: 'take-inputs', seq: 3, eventId: 3, inputIds: ['a', ''] },
      ],
      taken: [{ inputId: 'a', input: p, steering: true, eventId: 4, time: 5 }],
    };
    const engine: EngineMessage[] = [
      { type: 'run', spec: s, pendingInputs: 3 },
      { type: 'cancel', kind: 'shutdown', reason: 'r' },
      { type: 'ack', seq: 1, error: f },
      { type: 'ack', seq: 2, reply: { kind: 'take-inputs', value: [{ inputId: 'a', input: p }] }, error: f },
      { type: 'pending-inputs', count: 7 },
      { type: 'shutdown' },
    ];
    const worker: WorkerMessage[] = [
      { type: 'ready', protocolVersion: 1, pid: 99, workflows: ['a', 'b'], error: f },
      { type: 'record', call: { kind: 'step', seq: 1, name: 's', failure: f, durationMs: 0.5 } },
      { type: 'record', call: { kind: 'checkpoint', seq: 2, data: p } },
      { type: 'record', call: { kind: 'take-inputs', seq: 3 } },
      { type: 'heartbeat' },
      { type: 'terminal', outcome: { kind: 'completed', output: p, state: p } },
      { type: 'terminal', outcome: { kind: 'suspended', reason: 'r', output: p, state: p } },
      { type: 'terminal', outcome: { kind: 'exit-for-recovery', reason: 'r' } },
      { type: 'terminal', outcome: { kind: 'failed', failure: f } },
      { type: 'terminal', outcome: { kind: 'cancelled', reason: 'r' } },
      { type: 'terminal', outcome: { kind: 'timed-out' } },
      { type: 'emit', item: { kind: 'chunk', data: p }, dropped: 0 },
      { type: 'emit', item: { kind: 'step-started', seq: 4, name: 'refund' }, dropped: 3 },
    ];
    for (const m of engine) {
      expect(hex(encodeEngineMessage(m))).toBe(hex(reflectedEncodeEngineMessage(m)));
      expect(plain(decodeEngineMessage(body(encodeEngineMessage(m))))).toEqual(plain(reflectedDecodeEngineMessage(body(encodeEngineMessage(m)))));
    }
    for (const m of worker) {
      expect(hex(encodeWorkerMessage(m))).toBe(hex(reflectedEncodeWorkerMessage(m)));
      expect(plain(decodeWorkerMessage(body(encodeWorkerMessage(m))))).toEqual(plain(reflectedDecodeWorkerMessage(body(encodeWorkerMessage(m)))));
    }
  });

  it('decodes what the reflected codec encodes, split across chunks', () => {
    fc.assert(
      fc.property(fc.array(workerMessage, { minLength: 1, maxLength: 4 }), fc.nat({ max: 50 }), (ms, cut) => {
        const all = Buffer.concat(ms.map((m) => reflectedEncodeWorkerMessage(m)));
        const at = Math.min(cut, all.length);
        const reader = new FrameReader();
        const frames = [...reader.push(all.subarray(0, at)), ...reader.push(all.subarray(at))];
        expect(frames).toHaveLength(ms.length);
        frames.forEach((f) => expect(outcomeOf(() => decodeWorkerMessage(f))).toEqual(outcomeOf(() => reflectedDecodeWorkerMessage(f))));
      }),
      { numRuns: 100 },
    );
  });

  it('arbitrary bytes from a worker: a decoded message or a WorkerProtocolError, never another error', () => {
    fc.assert(
      fc.property(fc.oneof(fc.uint8Array({ maxLength: 64 }), workerMessage.chain((m) => {
        const b = body(encodeWorkerMessage(m));
        return fc.tuple(fc.nat({ max: Math.max(0, b.length - 1) }), fc.integer({ min: 0, max: 255 })).map(([i, v]) => {
          const c = Uint8Array.from(b);
          if (c.length) c[i] = v;
          return c;
        });
      })), (bytes) => {
        try {
          decodeWorkerMessage(bytes);
        } catch (err) {
          expect(err).toBeInstanceOf(WorkerProtocolError);
        }
      }),
      { numRuns: 1000 },
    );
  });

  it('a lone surrogate is sent as U+FFFD instead of breaking the frame', () => {
    const m: WorkerMessage = { type: 'terminal', outcome: { kind: 'failed', failure: { message: 'bad \ud800 half', type: 'Error' } } };
    const back = decodeWorkerMessage(body(encodeWorkerMessage(m)));
    expect(back).toMatchObject({ outcome: { failure: { message: 'bad \ufffd half' } } });
  });
});

describe('worker start-up imports', () => {
  // What a worker evaluates before Ready is its cold-start cost: keep protobufjs, the
  // descriptor, the history codec, the engine and the store out of child-main's import graph.
  it('child-main reaches no protobufjs, descriptor, codec, engine or store module', () => {
    const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', 'src');
    const seen = new Set<string>();
    const bare = new Set<string>();
    const visit = (file: string) => {
      if (seen.has(file)) return;
      seen.add(file);
      const src = readFileSync(file, 'utf8');
      // Value imports only: `import type` and `export type` are erased.
      for (const m of src.matchAll(/^(?:import|export)\s+(?!type\b)[^'"]*?from\s+'([^']+)'/gm)) {
        const spec = m[1]!;
        if (spec.startsWith('.')) visit(join(dirname(file), spec.replace(/\.js$/, '.ts')));
        else bare.add(spec);
      }
    };
    visit(join(root, 'executor', 'child-main.ts'));
    const rel = [...seen].map((f) => f.slice(root.length + 1)).sort();
    expect(rel.filter((f) => /internal\/proto|history\/codec|runtime\/|store\//.test(f))).toEqual([]);
    expect([...bare].filter((b) => !b.startsWith('node:'))).toEqual([]);
  });
});
