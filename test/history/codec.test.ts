import fc from 'fast-check';
import { eventArbitraries } from '../helpers/event-arbitraries.js';
import { describe, expect, it } from 'vitest';
import { isTurnlogError } from '../../src/errors.js';
import { decodeEvent, encodeEvent, eventFromJSON, eventToJSON } from '../../src/history/codec.js';
import { ALL_EVENT_TYPES, type HistoryEvent, type Payload } from '../../src/history/events.js';
import { DefaultPayloadConverter, type PayloadCodec } from '../../src/history/payload.js';

// Arbitraries produce the canonical form of each event: the one the codec decodes back
// (proto3 drops defaults, so e.g. an absent optional and its empty default read the same).
const { arbitraries, anyEvent } = eventArbitraries();

/** Bytes fields decode as Uint8Array views; compare them by content. */
function plain(v: unknown): unknown {
  if (v instanceof Uint8Array) return [...v];
  if (Array.isArray(v)) return v.map(plain);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
  return v;
}

describe('codec', () => {
  it('has an arbitrary for every event type', () => {
    expect(Object.keys(arbitraries).sort()).toEqual([...ALL_EVENT_TYPES].sort());
  });

  for (const type of ALL_EVENT_TYPES) {
    it(`round-trips ${type} through protobuf`, () => {
      fc.assert(
        fc.property(arbitraries[type] as fc.Arbitrary<HistoryEvent>, (e) => {
          expect(plain(decodeEvent(encodeEvent(e), 'task'))).toEqual(plain(e));
        }),
        { seed: 1337, numRuns: 150 },
      );
    });
  }

  it('round-trips every event type through the proto3 JSON mapping (and JSON text)', () => {
    fc.assert(
      fc.property(anyEvent, (e) => {
        const json = JSON.parse(JSON.stringify(eventToJSON(e))) as Record<string, unknown>;
        expect(plain(eventFromJSON(json, 'task'))).toEqual(plain(e));
      }),
      { seed: 1337, numRuns: 500 },
    );
  });

  it('an event type this build does not know gives HistoryFormatError naming task and event id', () => {
    // event_id = 7 (field 1), then field 99 (length-delimited, empty): a oneof member from a newer build.
    const bytes = new Uint8Array([0x08, 0x07, 0x9a, 0x06, 0x00]);
    let err: unknown;
    try {
      decodeEvent(bytes, 'task-9', 'events/task-9/7');
    } catch (e) {
      err = e;
    }
    expect(isTurnlogError(err, 'TURNLOG_HISTORY_FORMAT')).toBe(true);
    expect(err).toMatchObject({ taskId: 'task-9', eventId: 7 });
    expect((err as Error).message).toContain('task-9');
    expect((err as Error).message).toContain('event 7');
  });

  it('garbage bytes give HistoryCorruptError naming the key', () => {
    for (const bytes of [new Uint8Array([0x0a, 0xff, 0xff, 0xff, 0x0f, 0x01]), new Uint8Array([0xff]), new Uint8Array()]) {
      let err: unknown;
      try {
        decodeEvent(bytes, 'task-1', 'events/task-1/3');
      } catch (e) {
        err = e;
      }
      expect(isTurnlogError(err, 'TURNLOG_HISTORY_CORRUPT')).toBe(true);
      expect(err).toMatchObject({ key: 'events/task-1/3' });
    }
  });
});

describe('payload converter', () => {
  const conv = new DefaultPayloadConverter();
  const encodingOf = (p: Payload) => new TextDecoder().decode(p.metadata['encoding']);

  it('converts JSON values both ways with encoding json/plain', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (v) => {
        const p = conv.toPayload(v);
        expect(encodingOf(p)).toBe('json/plain');
        // JSON itself turns -0 into 0.
        expect(conv.fromPayload(p)).toEqual(JSON.parse(JSON.stringify(v)));
      }),
      { seed: 1337, numRuns: 200 },
    );
  });

  it('passes a Uint8Array through as binary/plain', () => {
    const p = conv.toPayload(new Uint8Array([1, 2, 250]));
    expect(encodingOf(p)).toBe('binary/plain');
    expect([...conv.fromPayload<Uint8Array>(p)]).toEqual([1, 2, 250]);
  });

  it('stores undefined as binary/null', () => {
    const p = conv.toPayload(undefined);
    expect(encodingOf(p)).toBe('binary/null');
    expect(p.data.length).toBe(0);
    expect(conv.fromPayload(p)).toBeUndefined();
  });

  it('applies a codec to every payload on the way in and reverses it on the way out', () => {
    const xor: PayloadCodec = {
      encode: (p) => ({
        metadata: { ...p.metadata, encoding: new TextEncoder().encode('binary/xor'), inner: p.metadata['encoding']! },
        data: p.data.map((b) => b ^ 0x5a),
      }),
      decode: (p) => {
        const { inner, ...rest } = p.metadata;
        return { metadata: { ...rest, encoding: inner! }, data: p.data.map((b) => b ^ 0x5a) };
      },
    };
    const withCodec = new DefaultPayloadConverter([xor]);
    const p = withCodec.toPayload({ secret: 'agent' });
    expect(encodingOf(p)).toBe('binary/xor');
    expect(new TextDecoder().decode(p.data)).not.toContain('agent');
    expect(withCodec.fromPayload(p)).toEqual({ secret: 'agent' });
    // Without the codec the payload cannot be read, and the error says why.
    expect(() => conv.fromPayload(p)).toThrow(expect.objectContaining({ code: 'TURNLOG_PAYLOAD_ENCODING' }));
  });

  it('rejects values with no JSON form with TURNLOG_PAYLOAD_ENCODING', () => {
    const circular: Record<string, unknown> = {};
    circular['self'] = circular;
    for (const v of [circular, 10n, () => 1, Symbol('s')]) {
      let err: unknown;
      try {
        conv.toPayload(v);
      } catch (e) {
        err = e;
      }
      expect(isTurnlogError(err, 'TURNLOG_PAYLOAD_ENCODING'), String(typeof v)).toBe(true);
    }
  });
});
