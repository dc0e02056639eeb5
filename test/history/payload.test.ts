// The default converter refuses values JSON would change or drop, naming the path (issue #10 item 6).
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { isTurnlogError, PayloadEncodingError } from '../../src/errors.js';
import { defaultPayloadConverter as conv, MAX_PAYLOAD_BYTES, payloadSize } from '../../src/history/payload.js';
import { MAX_FRAME_BYTES } from '../../src/executor/protocol.js';

function refusal(value: unknown): PayloadEncodingError {
  try {
    conv.toPayload(value);
  } catch (err) {
    expect(err).toBeInstanceOf(PayloadEncodingError);
    return err as PayloadEncodingError;
  }
  throw new Error('expected a refusal');
}

class Money {
  constructor(readonly cents: number) {}
}

describe('DefaultPayloadConverter refuses non-JSON values', () => {
  it.each([
    ['a Map', { prices: new Map() }, '$.prices', 'a Map', 'Object.fromEntries'],
    ['a Set', [1, new Set([1])], '$[1]', 'a Set', '[...set]'],
    ['a Date', { at: new Date(0) }, '$.at', 'a Date', 'toISOString'],
    ['a class instance', { prices: [{}, {}, { amount: new Money(5) }] }, '$.prices[2].amount', 'an instance of Money', 'plain objects'],
    ['a BigInt', { n: 10n }, '$.n', 'a BigInt', 'String(n)'],
    ['a function', { f: () => 1 }, '$.f', 'a function (f)', 'not code'],
    ['a symbol', { s: Symbol('x') }, '$.s', 'a symbol', 'string'],
    ['NaN', { x: NaN }, '$.x', 'NaN', 'null'],
    ['Infinity', [Infinity], '$[0]', 'Infinity', 'null'],
    ['undefined in an array', [1, undefined], '$[1]', 'undefined', 'null'],
    ['a typed array inside an object', { bytes: new Uint8Array(2) }, '$.bytes', 'binary data (Uint8Array) inside a value', 'base64'],
    ['an odd key', { 'a b': new Map() }, '$["a b"]', 'a Map', 'fromEntries'],
    ['a top-level Date', new Date(0), '$', 'a Date', 'getTime'],
  ])('refuses %s, naming the path', (_what, value, path, found, fix) => {
    const err = refusal(value);
    expect(err.code).toBe('TURNLOG_PAYLOAD_ENCODING');
    expect(err.nonRetryable).toBe(true);
    expect(err.path).toBe(path);
    expect(err.found).toBe(found);
    expect(err.message).toContain(`${path} is ${found}`);
    expect(err.message).toContain(fix);
  });

  it('refuses a cycle and names where it points back to', () => {
    const root: Record<string, unknown> = { a: { b: {} } };
    (root['a'] as { b: Record<string, unknown> }).b['back'] = root['a'];
    const err = refusal(root);
    expect(err.path).toBe('$.a.b.back');
    expect(err.found).toBe('a cycle back to $.a');
  });

  it('names the subject when re-thrown with about()', () => {
    const err = refusal({ x: new Map() }).about('Task t, turn 1, step "s" result');
    expect(err.message).toMatch(/^Task t, turn 1, step "s" result: \$\.x is a Map/);
  });

  it('accepts plain data, shared references, null prototypes, other realms, top-level bytes and undefined', () => {
    const shared = { id: 1 };
    const bare = Object.assign(Object.create(null) as Record<string, unknown>, { k: 1 });
    const foreign = runInNewContext('({ a: [1, { b: "c" }] })') as unknown;
    const value = { s: 'x', n: -0.5, b: false, z: null, arr: [shared, shared], bare, foreign, opt: undefined };
    expect(conv.fromPayload(conv.toPayload(value))).toEqual({ s: 'x', n: -0.5, b: false, z: null, arr: [shared, shared], bare: { k: 1 }, foreign: { a: [1, { b: 'c' }] } });
    expect(conv.fromPayload(conv.toPayload(new Uint8Array([1, 2])))).toEqual(new Uint8Array([1, 2]));
    expect(conv.fromPayload(conv.toPayload(undefined))).toBeUndefined();
  });

  it('turns a throwing getter into TURNLOG_PAYLOAD_ENCODING rather than a raw error', () => {
    const v = { get boom(): number { throw new Error('getter'); } };
    let caught: unknown;
    try {
      conv.toPayload(v);
    } catch (err) {
      caught = err;
    }
    expect(isTurnlogError(caught, 'TURNLOG_PAYLOAD_ENCODING')).toBe(true);
    expect((caught as Error).message).toContain('getter');
  });

  it('refuses an object or array with a toJSON method the walk would not see (JSON would store what it returns)', () => {
    const hidden = Object.defineProperty({ a: 1 }, 'toJSON', { value: () => 'replaced', enumerable: false });
    const arr = Object.assign([1, 2], { toJSON: () => 'replaced' });
    for (const [v, path] of [[hidden, '$.x'], [arr, '$.x']] as const) {
      let caught: unknown;
      try {
        conv.toPayload({ x: v });
      } catch (err) {
        caught = err;
      }
      // It was accepted, and read back as "replaced".
      expect(isTurnlogError(caught, 'TURNLOG_PAYLOAD_ENCODING'), String(caught)).toBe(true);
      expect((caught as Error).message).toContain(path);
      expect((caught as Error).message).toContain('toJSON');
    }
  });

  it('turns a Proxy whose getPrototypeOf trap throws, or a revoked Proxy, into TURNLOG_PAYLOAD_ENCODING', () => {
    // The top-level `instanceof Uint8Array` check ran outside the guarded walk and threw raw.
    const hostile = new Proxy({}, { getPrototypeOf: () => { throw new Error('trap'); } });
    const revocable = Proxy.revocable({}, {});
    revocable.revoke();
    for (const v of [hostile, revocable.proxy]) {
      let caught: unknown;
      try {
        conv.toPayload(v);
      } catch (err) {
        caught = err;
      }
      expect(isTurnlogError(caught, 'TURNLOG_PAYLOAD_ENCODING'), String(caught)).toBe(true);
    }
  });
});

describe('payload sizes', () => {
  it('measures data plus metadata', () => {
    const p = conv.toPayload('abc');
    expect(payloadSize(p)).toBe(5 + 'encoding'.length + 'json/plain'.length);
  });

  it('keeps two payloads at the hard cap well inside one worker frame', () => {
    expect(2 * MAX_PAYLOAD_BYTES + 1024 * 1024).toBeLessThan(MAX_FRAME_BYTES);
  });
});

describe('JSON bytes', () => {
  // Short ASCII strings are encoded by hand (no TextEncoder): the bytes must be TextEncoder's, and
  // anything else (non-ASCII, longer) takes TextEncoder's path.
  const enc = new TextEncoder();
  it.each([
    ['an empty string', ''],
    ['a token', 'token 1.2 '],
    ['63 ASCII characters of JSON', 'x'.repeat(61)],
    ['64', 'x'.repeat(62)],
    ['65', 'x'.repeat(63)],
    ['control characters (escaped by JSON)', '\u0000\t\n\u007f'],
    ['non-ASCII', 'héllo ✓'],
    ['non-ASCII at the end of 64', `${'x'.repeat(61)}é`],
    ['a lone surrogate (escaped by JSON)', '\ud800'],
    ['an emoji', '👋 hi'],
    ['an object', { token: 'a', n: 1, nested: [true, null] }],
  ])('encodes %s as TextEncoder does, and decodes it back', (_what, value) => {
    const p = conv.toPayload(value);
    expect([...p.data]).toEqual([...enc.encode(JSON.stringify(value))]);
    expect(conv.fromPayload(p)).toEqual(value);
    // Metadata bytes equal to "json/plain" but not the converter's own array decode the same.
    expect(conv.fromPayload({ metadata: { encoding: enc.encode('json/plain') }, data: p.data })).toEqual(value);
  });
});
