/**
 * Payload conversion: JS values ⇄ `Payload`. JSON by default (`encoding: json/plain`),
 * raw bytes for `Uint8Array` (`binary/plain`), `binary/null` for undefined; the encodings
 * are Temporal's, so histories read the same in Temporal tooling.
 * A {@link PayloadCodec} (compress, encrypt) runs on every payload on the way in and out.
 */
import { PayloadEncodingError, TurnlogError } from '../errors.js';
import type { Payload } from './events.js';

const enc = new TextEncoder();
const dec = new TextDecoder();

const ENCODING = 'encoding';
const JSON_PLAIN = enc.encode('json/plain');
const BINARY_PLAIN = enc.encode('binary/plain');
const BINARY_NULL = enc.encode('binary/null');

/**
 * Transforms payloads after conversion (encode) and before it (decode): compression,
 * encryption. Synchronous because it runs on the append path; node:zlib and node:crypto
 * both have synchronous APIs. Mark transformed payloads in `metadata` so decode can tell.
 */
export interface PayloadCodec {
  encode(payload: Payload): Payload;
  decode(payload: Payload): Payload;
}

/** Converts values to payloads and back. */
export interface PayloadConverter {
  toPayload(value: unknown): Payload;
  fromPayload<T = unknown>(payload: Payload): T;
}

function encodingOf(p: Payload): string {
  const e = p.metadata[ENCODING];
  if (e === JSON_PLAIN) return 'json/plain'; // made here (a live chunk, a cached value): no decode
  return e ? dec.decode(e) : '';
}

/**
 * UTF-8 of `s`. A short ASCII string (a streamed token, a small result) is copied by hand into a
 * typed array small enough to live on V8's heap: TextEncoder's fixed cost, ~1 µs a call on Node 20,
 * was a third of `ctx.emit`'s time (profile in docs/performance.md).
 */
function utf8(s: string): Uint8Array {
  const n = s.length;
  if (n > 64) return enc.encode(s);
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    if (c > 0x7f) return enc.encode(s);
    out[i] = c;
  }
  return out;
}

/** The default converter: JSON, binary and undefined, with an optional codec chain. */
export class DefaultPayloadConverter implements PayloadConverter {
  readonly #codecs: readonly PayloadCodec[];

  constructor(codecs: readonly PayloadCodec[] = []) {
    this.#codecs = codecs;
  }

  /**
   * Refuses values JSON would silently change or drop (a Date becomes a string, a Map `{}`,
   * NaN `null`) with a {@link PayloadEncodingError} naming the path, before anything is recorded.
   */
  toPayload(value: unknown): Payload {
    let p: Payload;
    if (value === undefined) {
      p = { metadata: { [ENCODING]: BINARY_NULL }, data: new Uint8Array(0) };
    } else if (isBytes(value)) {
      p = { metadata: { [ENCODING]: BINARY_PLAIN }, data: value };
    } else {
      let json: string | undefined;
      try {
        if (typeof value !== 'string') assertJson(value, [], []);
        json = JSON.stringify(value);
      } catch (err) {
        if (err instanceof PayloadEncodingError) throw err;
        // A getter or Proxy trap that throws, or nesting deep enough to overflow the stack.
        throw new TurnlogError(
          'TURNLOG_PAYLOAD_ENCODING',
          `Value cannot be converted to JSON (${errorText(err)}). Return plain data (objects, arrays, strings, numbers, booleans, null) or a Uint8Array.`,
          { cause: err },
        );
      }
      p = { metadata: { [ENCODING]: JSON_PLAIN }, data: utf8(json) };
    }
    for (const c of this.#codecs) p = c.encode(p);
    return p;
  }

  fromPayload<T = unknown>(payload: Payload): T {
    let p = payload;
    for (let i = this.#codecs.length - 1; i >= 0; i--) p = this.#codecs[i]!.decode(p);
    const encoding = encodingOf(p);
    switch (encoding) {
      case 'json/plain':
        return JSON.parse(dec.decode(p.data)) as T;
      case 'binary/plain':
        return p.data as T;
      case 'binary/null':
        return undefined as T;
      default:
        throw new TurnlogError(
          'TURNLOG_PAYLOAD_ENCODING',
          `Payload has encoding "${encoding}", which no converter handles. If it was written with a PayloadCodec, open the engine with the same codec.`,
        );
    }
  }
}

export const defaultPayloadConverter: PayloadConverter = new DefaultPayloadConverter();

/**
 * The `payloadConverter` export of a workflows module, if it has a usable one: how process
 * workers, replay worker threads, `replayHistory` with a module and `turnlog replay` find it.
 */
export function moduleConverter(mod: Record<string, unknown>): PayloadConverter | undefined {
  const c = mod['payloadConverter'] as PayloadConverter | undefined;
  return c && typeof c.toPayload === 'function' && typeof c.fromPayload === 'function' ? c : undefined;
}


/**
 * Size limits of payloads, in bytes, measured with {@link payloadSize} on the converted payload
 * (before any PayloadCodec). See docs/workflows.md#payload-limits.
 */
export interface PayloadLimits {
  /** An input passed to `engine.start()` or `handle.send()`. Default 4 MiB. */
  inputBytes: number;
  /** One `ctx.step` result. Default 4 MiB. */
  stepResultBytes: number;
  /** One `ctx.checkpoint` value. Default 4 MiB. */
  checkpointBytes: number;
  /** `ctx.state` as committed at the end of a turn. Default 4 MiB. */
  stateBytes: number;
  /** A turn's output (returned or given to `ctx.suspend`). Default 4 MiB. */
  outputBytes: number;
}

/** The limits an engine uses for what `EngineOptions.limits` leaves out: 4 MiB each. */
export const DEFAULT_PAYLOAD_LIMITS: Readonly<PayloadLimits> = Object.freeze({
  inputBytes: 4 * 1024 * 1024,
  stepResultBytes: 4 * 1024 * 1024,
  checkpointBytes: 4 * 1024 * 1024,
  stateBytes: 4 * 1024 * 1024,
  outputBytes: 4 * 1024 * 1024,
});

/**
 * No limit may exceed this (16 MiB). A turn's terminal frame carries an output and a state, so
 * with each at most a quarter of the worker protocol's 64 MiB frame cap, every frame fits.
 */
export const MAX_PAYLOAD_BYTES = 16 * 1024 * 1024;

/** Bytes a payload takes: data plus metadata keys and values (the size limits measure this). */
export function payloadSize(p: Payload): number {
  let n = p.data.byteLength;
  // for-in, not Object.keys: no array per call (ctx.emit measures every chunk twice).
  for (const k in p.metadata) if (Object.hasOwn(p.metadata, k)) n += k.length + p.metadata[k]!.byteLength;
  return n;
}

/**
 * Throws a PayloadEncodingError at the first value JSON cannot carry faithfully. `trail` is the
 * path (built into a string only on error); `ancestors` finds cycles (shared references are fine).
 */
function assertJson(v: unknown, trail: (string | number)[], ancestors: object[]): void {
  switch (typeof v) {
    case 'string':
    case 'boolean':
      return;
    case 'number':
      if (!Number.isFinite(v)) refuse(trail, String(v), 'JSON writes it as null. Use null, or a string such as "Infinity".');
      return;
    case 'undefined':
      // Only array elements reach here (object properties that are undefined are skipped).
      refuse(trail, 'undefined', 'In an array JSON turns it into null. Use null.');
      return;
    case 'bigint':
      refuse(trail, 'a BigInt', 'Convert it with String(n) (or Number(n) when it fits).');
      return;
    case 'symbol':
      refuse(trail, 'a symbol', 'Use a string.');
      return;
    case 'function':
      refuse(trail, `a function (${(v as { name?: string }).name || 'anonymous'})`, 'Return data, not code or class instances with methods.');
      return;
  }
  if (v === null) return;
  const o = v as object;
  const seen = ancestors.indexOf(o);
  if (seen >= 0) refuse(trail, `a cycle back to ${pathOf(trail.slice(0, seen))}`, 'Return a tree: replace the back reference by an id.');
  ancestors.push(o);
  const isArray = Array.isArray(o);
  if (!isArray) {
    const proto = Object.getPrototypeOf(o) as object | null;
    // Plain objects only: Object.prototype of this or another realm (its prototype is null), or none.
    if (proto !== null && Object.getPrototypeOf(proto) !== null) refuse(trail, describeInstance(o), fixFor(o));
  }
  // JSON.stringify stores what toJSON returns, and the walk below would not see it (a
  // non-enumerable own toJSON, or one set on an array): the value would read back changed.
  if (typeof (o as { toJSON?: unknown }).toJSON === 'function') {
    refuse(trail, 'an object with a toJSON method', 'JSON would store what toJSON() returns instead; return that value yourself.');
  }
  if (isArray) {
    for (let i = 0; i < o.length; i++) {
      trail.push(i);
      assertJson(o[i], trail, ancestors);
      trail.pop();
    }
  } else {
    for (const k of Object.keys(o)) {
      const x = (o as Record<string, unknown>)[k];
      if (x === undefined) continue; // dropped by JSON, and reads back as a missing optional property
      trail.push(k);
      assertJson(x, trail, ancestors);
      trail.pop();
    }
  }
  ancestors.pop();
}

/** `instanceof` asks the prototype: a Proxy whose trap throws (or a revoked one) is no bytes, and the walk refuses it. */
function isBytes(v: unknown): v is Uint8Array {
  try {
    return v instanceof Uint8Array;
  } catch {
    return false;
  }
}

function refuse(trail: (string | number)[], found: string, fix: string): never {
  throw new PayloadEncodingError(pathOf(trail), found, fix);
}

function pathOf(trail: readonly (string | number)[]): string {
  let s = '$';
  for (const k of trail) s += typeof k === 'number' ? `[${k}]` : /^[A-Za-z_$][\w$]*$/.test(k) ? `.${k}` : `[${JSON.stringify(k)}]`;
  return s;
}

function describeInstance(o: object): string {
  if (o instanceof Date) return 'a Date';
  if (o instanceof Map) return 'a Map';
  if (o instanceof Set) return 'a Set';
  if (ArrayBuffer.isView(o) || o instanceof ArrayBuffer) return `binary data (${o.constructor.name}) inside a value`;
  const name = (o as { constructor?: { name?: unknown } }).constructor?.name;
  return typeof name === 'string' && name ? `an instance of ${name}` : 'an object with a custom prototype';
}

function fixFor(o: object): string {
  if (o instanceof Date) return 'Use date.toISOString() or date.getTime(), and parse it back when you read it.';
  if (o instanceof Map) return 'Use Object.fromEntries(map) or [...map] (and new Map(...) when you read it).';
  if (o instanceof Set) return 'Use [...set].';
  if (ArrayBuffer.isView(o) || o instanceof ArrayBuffer) return 'A Uint8Array is supported only as the whole value; inside objects use a base64 string.';
  return 'Return plain objects ({ ...obj }) and arrays, or configure a PayloadConverter that knows this type.';
}

function errorText(err: unknown): string {
  try {
    return err instanceof Error ? err.message : String(err);
  } catch {
    return 'the value could not be inspected';
  }
}

/** The payload's `encoding` metadata, for display. */
export function payloadEncoding(p: Payload): string {
  return encodingOf(p);
}
