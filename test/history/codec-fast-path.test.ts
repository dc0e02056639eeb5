/**
 * Review of the hand-written protobuf fast paths in src/history/codec.ts (encode of the hot
 * events through one shared protobufjs Writer; decode of StepCompleted). The bugs it found are
 * now "Regression (fixed)" tests; the rest guard what was checked and found sound.
 */
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { decodeEvent, encodeEvent, encodeEventDelimited, encodeEventDelimitedGeneric, encodeEventGeneric } from '../../src/history/codec.js';
import type { HistoryEvent, Payload } from '../../src/history/events.js';
import { isTurnlogError } from '../../src/errors.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { created, queued, started } from '../store/events.js';

const hex = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex');

/** Plain data with byte arrays as number lists; keeps own keys only, records the prototype. */
function norm(v: unknown): unknown {
  if (v instanceof Uint8Array) return { bytes: Array.from(v) };
  if (Array.isArray(v)) return v.map(norm);
  if (typeof v === 'object' && v !== null) {
    const out: Record<string, unknown> = { '#plainProto': Object.getPrototypeOf(v) === Object.prototype };
    for (const k of Object.keys(v)) {
      const x = (v as Record<string, unknown>)[k];
      if (x !== undefined) out[`k:${k}`] = norm(x);
    }
    return out;
  }
  return v;
}

function step(eventId: number, result: Payload | undefined, extra: Partial<HistoryEvent> = {}): HistoryEvent {
  const e = { type: 'StepCompleted', eventId, time: 1_700_000_000_000, generation: 3, turn: 1, attempt: 1, seq: eventId, name: 'llm', durationMs: 12.5, ...extra } as HistoryEvent & { result?: Payload };
  if (result !== undefined) e.result = result;
  return e;
}

/** A metadata map with an own, enumerable `__proto__` key (as JSON.parse or a codec can produce). */
function metadataWithProtoKey(): Record<string, Uint8Array> {
  const md: Record<string, Uint8Array> = {};
  Object.defineProperty(md, '__proto__', { value: new Uint8Array([7, 7]), enumerable: true, writable: true, configurable: true });
  md['encoding'] = new TextEncoder().encode('json/plain');
  return md;
}

describe('codec fast paths: proven bugs', () => {
  // BUG (codec.ts fastPayload, line ~721 `metadata[k] = v`): the StepCompleted decode fast path
  // assigns map entries with plain `[]=`, so a metadata key "__proto__" replaces the prototype of
  // the metadata object instead of becoming an own key. The generic protobufjs decoder (and the
  // worker protocol's readPayload) define it as an own property. Result: the entry is lost
  // (Object.keys no longer lists it, a re-encode drops it) and the metadata object inherits from
  // a Uint8Array. Decode is not "identical to the generic path" for such a payload.
  it('Regression (fixed): StepCompleted fast decode keeps a "__proto__" metadata key as an own key, like the generic decoder', () => {
    const payload: Payload = { metadata: metadataWithProtoKey(), data: new Uint8Array([1, 2, 3]) };
    // The generic path (InputQueued is not fast-decoded) keeps the key:
    const iq: HistoryEvent = { type: 'InputQueued', eventId: 2, time: 1, generation: 1, inputId: 'i', input: payload, steering: false };
    const generic = decodeEvent(encodeEvent(iq), 't') as Extract<HistoryEvent, { type: 'InputQueued' }>;
    expect(Object.keys(generic.input.metadata)).toEqual(['__proto__', 'encoding']);
    // The fast path loses it and re-prototypes the object:
    const e = step(3, payload);
    const back = decodeEvent(encodeEvent(e), 't') as Extract<HistoryEvent, { type: 'StepCompleted' }>;
    expect(Object.getPrototypeOf(back.result!.metadata)).toBe(Object.prototype);
    expect(Object.keys(back.result!.metadata)).toEqual(['__proto__', 'encoding']);
    // And a decode -> encode round trip keeps the stored bytes.
    expect(hex(encodeEvent(back))).toBe(hex(encodeEvent(e)));
  });

  // BUG (codec.ts sharedWriter, line ~343): encodeEvent is not reentrant. `sharedWriter()` resets
  // the one shared Writer (pos = 0, states cleared) on entry, so an encodeEvent call made while
  // another encode is writing (here from a metadata getter; a Proxy-backed payload or a codec's
  // lazy object would do the same) truncates the outer encode's bytes and fork stack. The outer
  // call then returns garbage that does not decode: a silently corrupt stored event.
  it('Regression (fixed): an encodeEvent nested inside another encode (payload getter) still gives the generic bytes', () => {
    const inner: HistoryEvent = { type: 'TaskCompleted', eventId: 9, time: 5, generation: 2, outcome: 'succeeded' };
    const md: Record<string, Uint8Array> = {};
    Object.defineProperty(md, 'lazy', {
      enumerable: true,
      get() {
        encodeEvent(inner);
        return new Uint8Array([1, 2]);
      },
    });
    const e = step(3, { metadata: md, data: new Uint8Array([9]) });
    const fast = encodeEvent(e);
    expect(hex(fast)).toBe(hex(encodeEventGeneric(e)));
    expect(() => decodeEvent(fast, 't')).not.toThrow();
  });

  // BUG (codec.ts payloadFromProto, line ~77 `data: m.data ?? EMPTY`): with protobufjs 8 a bytes
  // field that is absent on the wire (empty data) decodes to the message prototype's default,
  // which is a plain JS Array `[]`, not a Uint8Array; `?? EMPTY` does not catch it. Every event
  // decoded by the generic path (TurnCompleted/TurnSuspended output and state, InputQueued input,
  // Checkpointed data, failure details, StepCompleted when it falls back) then carries
  // `data: []`. The StepCompleted fast path returns a Uint8Array, so fast and generic decode differ.
  // Visible to users: a turn that returned `new Uint8Array(0)` (binary/plain) reads back as `[]`
  // from a reloaded store (turnResult after a restart, replay), and a recovered turn whose input
  // was an empty Uint8Array gets `[]`; a PayloadCodec.decode gets an Array instead of bytes.
  it('Regression (fixed): the generic decode path gives data: [] (Array) for an empty payload; the fast path gives a Uint8Array', () => {
    const empty: Payload = { metadata: { encoding: new TextEncoder().encode('binary/plain') }, data: new Uint8Array(0) };
    const fast = decodeEvent(encodeEvent(step(4, empty)), 't') as Extract<HistoryEvent, { type: 'StepCompleted' }>;
    expect(fast.result!.data).toBeInstanceOf(Uint8Array);
    const done: HistoryEvent = { type: 'TurnCompleted', eventId: 5, time: 1, generation: 1, turn: 1, output: empty };
    const back = decodeEvent(encodeEvent(done), 't') as Extract<HistoryEvent, { type: 'TurnCompleted' }>;
    expect(back.output!.data).toBeInstanceOf(Uint8Array);
  });
});

describe('codec fast paths: checked and sound', () => {
  it('returned bytes are owned copies: later encodes (small, >256 B, >64 KB) never change earlier results', () => {
    const sizes = [0, 1, 200, 300, 5_000, 70_000, 10, 140_000, 3];
    const events = sizes.map((n, i) => step(i + 1, { metadata: { encoding: new Uint8Array([i]) }, data: new Uint8Array(n).fill(i + 1) }));
    const kept = events.map((e) => encodeEvent(e));
    const keptDelimited = events.map((e) => encodeEventDelimited(e));
    // Many more encodes through the shared writer, of every fast type.
    for (let i = 0; i < 50; i++) encodeEvent(step(1000 + i, { metadata: {}, data: new Uint8Array(i * 37).fill(0xee) }));
    for (let i = 0; i < events.length; i++) {
      expect(hex(kept[i]!)).toBe(hex(encodeEventGeneric(events[i]!)));
      expect(hex(keptDelimited[i]!)).toBe(hex(encodeEventDelimitedGeneric(events[i]!)));
      expect(kept[i]!.buffer === keptDelimited[i]!.buffer && kept[i]!.byteOffset === keptDelimited[i]!.byteOffset).toBe(false);
    }
  });

  it('a throw in the middle of a fast encode leaves the shared writer usable (next bytes = generic)', () => {
    const bad = step(2, { metadata: { broken: undefined as unknown as Uint8Array }, data: new Uint8Array([1]) });
    expect(() => encodeEvent(bad)).toThrow();
    const badEnum = { type: 'TaskCompleted', eventId: 4, time: 1, generation: 1, outcome: 'nope' } as unknown as HistoryEvent;
    expect(() => encodeEvent(badEnum)).toThrow(/enum/);
    const good = step(3, { metadata: { a: new Uint8Array([1]) }, data: new Uint8Array(500).fill(4) });
    expect(hex(encodeEvent(good))).toBe(hex(encodeEventGeneric(good)));
    expect(hex(encodeEventDelimited(good))).toBe(hex(encodeEventDelimitedGeneric(good)));
  });

  it('unusual metadata keys, odd doubles, lone surrogates and undefined optionals encode as the generic encoder does', () => {
    const keys = fc.oneof(fc.constantFrom('', '0', '42', '-1', '1e3', 'constructor', 'toString', 'hasOwnProperty', '\ud800', '\udfff', 'a\u0000b', 'ü'), fc.string({ unit: 'binary', maxLength: 6 }));
    const dbl = fc.constantFrom(0, -0, Number.NaN, Infinity, -Infinity, 5e-324, Number.MAX_VALUE, 1.5);
    const str = fc.oneof(fc.constantFrom('', '\ud800', 'x\udc00y', '\ud83d\ude00'), fc.string({ unit: 'binary', maxLength: 45 }), fc.string({ unit: 'binary', minLength: 120, maxLength: 200 }));
    const payload = fc.record({ metadata: fc.dictionary(keys, fc.uint8Array({ maxLength: 4 }), { maxKeys: 6 }), data: fc.oneof(fc.uint8Array({ maxLength: 4 }), fc.constant(Buffer.from([1, 2, 3]))) });
    // `failure: undefined` on purpose (an optional field present with an undefined value).
    const ev = fc.oneof(
      fc.record({ type: fc.constant('StepCompleted' as const), eventId: fc.nat(), time: dbl, generation: fc.nat(), turn: fc.nat(), attempt: fc.nat(), seq: fc.nat(), name: str, durationMs: dbl, result: payload, failure: fc.constant(undefined) }),
      fc.record({ type: fc.constant('TurnCompleted' as const), eventId: fc.nat(), time: dbl, generation: fc.nat(), turn: fc.nat(), output: fc.option(payload, { nil: undefined }), state: fc.option(payload, { nil: undefined }) }),
      fc.record({ type: fc.constant('InputQueued' as const), eventId: fc.nat(), time: dbl, generation: fc.nat(), inputId: str, input: payload, steering: fc.boolean() }),
      fc.record({ type: fc.constant('LeaseClaimed' as const), eventId: fc.nat(), time: dbl, generation: fc.nat(), owner: str, instance: str, previousGeneration: fc.nat(), reason: str, expiresAt: dbl }),
      fc.record({ type: fc.constant('TimeoutCancelRequested' as const), eventId: fc.nat(), time: dbl, generation: fc.nat(), turn: fc.nat(), at: dbl, graceUntil: dbl }),
      fc.record({ type: fc.constant('TurnStarted' as const), eventId: fc.nat(), time: dbl, generation: fc.nat(), turn: fc.nat(), attempt: fc.nat(), inputIds: fc.array(str, { maxLength: 3 }), entryMode: fc.constantFrom('fresh' as const, 'resumed' as const, 'recovered' as const), steered: fc.boolean(), owner: str, instance: str, executor: fc.constantFrom('inline' as const, 'process' as const), pid: fc.nat(), turnStartedAt: dbl, deadline: dbl }),
    ) as unknown as fc.Arbitrary<HistoryEvent>;
    fc.assert(
      fc.property(ev, (e) => {
        // An id with a lone surrogate is refused by both (docs/history.md#strings-…).
        const bytes = (f: (e: HistoryEvent) => Uint8Array): string => {
          try {
            return hex(f(e));
          } catch (err) {
            if (isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT')) return 'refused';
            throw err;
          }
        };
        expect(bytes(encodeEvent)).toBe(bytes(encodeEventGeneric));
        expect(bytes(encodeEventDelimited)).toBe(bytes(encodeEventDelimitedGeneric));
      }),
      { seed: 20261129, numRuns: 400 },
    );
  });

  it('StepCompleted fast decode equals the generic decode of the same bytes, from Buffer and from Uint8Array', () => {
    const keys = fc.constantFrom('', '0', '7', 'encoding', 'ü', 'constructor');
    // Non-empty data: with empty data the generic path gives a plain Array (bug test above).
    const payload = fc.record({ metadata: fc.dictionary(keys, fc.uint8Array({ maxLength: 4 }), { maxKeys: 4 }), data: fc.uint8Array({ minLength: 1, maxLength: 300 }) });
    fc.assert(
      fc.property(payload, fc.string({ unit: 'binary', maxLength: 70 }), fc.constantFrom(0, -0, Number.NaN, 3.25), (p, name, d) => {
        const e = step(5, p, { name, durationMs: d } as Partial<HistoryEvent>);
        const bytes = encodeEvent(e);
        const asU8 = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
        // An extra unknown field (number 99, varint) at the end forces the generic decoder.
        const forced = new Uint8Array([...asU8, 0x98, 0x06, 0x01]);
        const fast = decodeEvent(asU8, 't');
        const generic = decodeEvent(forced, 't');
        expect(norm(fast)).toEqual(norm(generic));
        expect(norm(decodeEvent(Buffer.from(asU8), 't'))).toEqual(norm(generic));
      }),
      { seed: 7, numRuns: 200 },
    );
  });

  it('every non-step event decodes through its member decoder as through the whole generated decoder (forced by an unknown field)', () => {
    const json: Payload = { metadata: { encoding: new TextEncoder().encode('json/plain') }, data: new TextEncoder().encode('{"a":1}') };
    const events: HistoryEvent[] = [
      { ...created(1, { workflow: 'wf' }), generation: 2 } as HistoryEvent,
      { type: 'InputQueued', eventId: 2, time: 5, generation: 2, inputId: 'in-1', input: json, steering: true, deliverAt: 9 },
      { ...started(3, 1), inputIds: ['in-1'] } as HistoryEvent,
      { type: 'Checkpointed', eventId: 4, time: 6, generation: 2, turn: 1, seq: 1, data: json } as HistoryEvent,
      { type: 'TurnCompleted', eventId: 5, time: 7, generation: 2, turn: 1, output: json, state: json },
      { type: 'TaskCompleted', eventId: 6, time: 8, generation: 2, outcome: 'succeeded' },
    ];
    for (const e of events) {
      const bytes = encodeEvent(e);
      for (const frame of [bytes, new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength)]) {
        const forced = new Uint8Array([...frame, 0x98, 0x06, 0x01]);
        expect(norm(decodeEvent(frame, 't'))).toEqual(norm(decodeEvent(forced, 't')));
      }
      expect(norm(decodeEvent(bytes, 't'))).toEqual(norm(e));
    }
    // Two members, or none: the generic path decides (last member wins; no member is an unknown type).
    const two = new Uint8Array([...encodeEvent(events[5]!), ...encodeEvent(events[4]!).subarray(encodeEvent(events[4]!).indexOf(0xa2, 11))]);
    expect(decodeEvent(two, 't').type).toBe('TurnCompleted');
    expect(() => decodeEvent(new Uint8Array([0x08, 0x05]), 't')).toThrow(/unknown event type/);
    expect(() => decodeEvent(new Uint8Array([0x08, 0x00, 0xda, 0x01, 0x00]), 't', 'k')).toThrow(/event id 0/);
  });

  it('a payload decoded by hand shares the default encodings, of the frame\'s own type (Buffer or plain Uint8Array)', () => {
    const e = step(5, { metadata: { encoding: new TextEncoder().encode('json/plain') }, data: new Uint8Array([1]) });
    const bytes = encodeEvent(e);
    const u8 = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const md = (b: Uint8Array) => (decodeEvent(b, 't') as Extract<HistoryEvent, { type: 'StepCompleted' }>).result!.metadata['encoding']!;
    expect(Buffer.isBuffer(md(bytes))).toBe(true);
    expect(md(bytes)).toBe(md(Buffer.from(bytes)));
    expect(Object.getPrototypeOf(md(u8))).toBe(Uint8Array.prototype);
    expect(md(u8)).toBe(md(new Uint8Array(u8)));
    expect(new TextDecoder().decode(md(u8))).toBe('json/plain');
    // Any other view type gets a view of its own bytes, of its own type.
    class Sub extends Uint8Array {}
    const sub = new Sub(u8);
    expect(md(sub)).toBeInstanceOf(Sub);
    expect(md(sub)).not.toBe(md(new Sub(u8)));
  });

  describe('concurrent appends on a real LevelDB store keep every event intact', () => {
    let dir: Awaited<ReturnType<typeof makeTmpDir>>;
    let store: LevelHistoryStore;
    beforeEach(async () => {
      dir = await makeTmpDir('turnlog-review2-codec-');
      store = new LevelHistoryStore(dir.path, { sync: false });
      await store.open();
    });
    afterEach(async () => {
      await store.close();
      await dir.remove();
    });

    it('many tasks appending StepCompleted/TurnCompleted in the same group commit read back exactly', async () => {
      const tasks = Array.from({ length: 12 }, (_, i) => `task-"${i}"\\ü`);
      const expected = new Map<string, HistoryEvent[]>();
      for (const id of tasks) {
        const head = [created(1, { workflow: 'wf' }), queued(2, 'in'), started(3, 1)];
        head[2] = { ...head[2]!, inputIds: ['in'] } as HistoryEvent;
        await store.append(id, head, { expectedLastEventId: 0, generation: 1 });
        expected.set(id, [...head]);
      }
      // 10 rounds, every task appends in the same tick: one batch holds many tasks' encoded bytes.
      for (let round = 0; round < 10; round++) {
        await Promise.all(
          tasks.map((id, k) => {
            const eventId = 4 + round;
            const size = [3, 260, 70_000][(k + round) % 3]!;
            const e = { ...step(eventId, { metadata: { n: new Uint8Array([k, round]) }, data: new Uint8Array(size).fill((k * 16 + round) & 0xff) }), seq: round + 1, generation: 1 } as HistoryEvent;
            expected.get(id)!.push(e);
            return store.append(id, [e], { expectedLastEventId: eventId - 1, generation: 1 });
          }),
        );
      }
      for (const id of tasks) {
        const back = await store.readEvents(id);
        expect(back.map((e) => norm(e))).toEqual(expected.get(id)!.map((e) => norm(decodeEvent(encodeEventGeneric(e), id))));
      }
    });
  });
});
