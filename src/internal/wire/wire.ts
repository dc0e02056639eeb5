/**
 * The one protobuf wire layer of the hand-written codecs (the worker protocol, the history
 * fast paths): varints, doubles, strings, bytes and nested messages. Callers write fields in
 * field-number order with the generated tags (src/internal/wire/fields.ts) and omit proto3
 * defaults, so the bytes equal protobufjs' reflected encoder's (test/executor/protocol-codec.test.ts,
 * test/history/codec-encode.test.ts).
 *
 * No protobufjs here on purpose: a worker process loads this file at start-up, and evaluating
 * even `protobufjs/minimal` (a dozen CommonJS files through the ESM loader) costs it 20–40 ms,
 * `protobufjs/light` plus the reflected root 60–90 ms (docs/isolation.md, "Measured").
 */

import type { FailureInfo, Payload } from '../../history/events.js';
import { ApplicationFailureInfo as AFI, Failure as F, MapEntry, Payload as P, Payloads } from './fields.js';

export const VARINT = 0;
export const FIXED64 = 1;
export const LEN = 2;
export const FIXED32 = 5;

const f64 = new Float64Array(1);
const f64Bytes = new Uint8Array(f64.buffer);
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
/** protobufjs' reading of stored strings: invalid bytes become U+FFFD (Buffer's utf8Slice). */
const looseUtf8 = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });
/** Below this many bytes a plain loop beats TextDecoder for ASCII strings. */
const SHORT_STRING = 64;
/** ASCII strings up to this many bytes are interned by {@link Reader.string}. */
const INTERN_MAX = 32;
/** Slots of the intern table (a power of two); a collision replaces the slot's string. */
const INTERN_SLOTS = 1024;
const interned: string[] = new Array<string>(INTERN_SLOTS).fill('');
/** Room kept in front of a frame for its varint length prefix (a frame is < 2^35 bytes). */
const PREFIX_ROOM = 5;

export function varintSize(v: number): number {
  return v < 0x80 ? 1 : v < 0x4000 ? 2 : v < 0x200000 ? 3 : v < 0x10000000 ? 4 : 5;
}

/**
 * A growable buffer that writes one delimited frame: the body goes after {@link PREFIX_ROOM}
 * spare bytes and {@link finishDelimited} puts the length just in front of it (no copy).
 * A nested message reserves one length byte and moves its body only if it reaches 128 bytes.
 */
export class Writer {
  buf: Buffer;
  pos = PREFIX_ROOM;

  constructor(size = 256) {
    this.buf = Buffer.allocUnsafe(size);
  }

  #ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + n));
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }

  /** Unsigned varint of a uint32 (the value is taken modulo 2^32, as protobufjs does). */
  uint32(v: number): void {
    v >>>= 0;
    this.#ensure(5);
    const b = this.buf;
    let p = this.pos;
    while (v > 0x7f) {
      b[p++] = (v & 0x7f) | 0x80;
      v >>>= 7;
    }
    b[p++] = v;
    this.pos = p;
  }

  /** int32 (enums): a negative value is sign-extended to 64 bits, ten bytes. */
  int32(v: number): void {
    if (v >= 0) return this.uint32(v);
    this.#ensure(10);
    let lo = v >>> 0;
    for (let i = 0; i < 4; i++) {
      this.buf[this.pos++] = (lo & 0x7f) | 0x80;
      lo >>>= 7;
    }
    // Bits 28–31 of the low word, then the high word's ones.
    this.buf[this.pos++] = (lo & 0x0f) | 0x70 | 0x80;
    for (let i = 0; i < 4; i++) this.buf[this.pos++] = 0xff;
    this.buf[this.pos++] = 0x01;
  }

  tag(field: number, wireType: number): void {
    this.uint32((field << 3) | wireType);
  }

  double(v: number): void {
    this.#ensure(8);
    f64[0] = v;
    const b = this.buf;
    const p = this.pos;
    if (LITTLE_ENDIAN) for (let i = 0; i < 8; i++) b[p + i] = f64Bytes[i]!;
    else for (let i = 0; i < 8; i++) b[p + i] = f64Bytes[7 - i]!;
    this.pos = p + 8;
  }

  bool(v: unknown): void {
    this.#ensure(1);
    this.buf[this.pos++] = v ? 1 : 0;
  }

  bytes(v: Uint8Array): void {
    this.uint32(v.length);
    this.#ensure(v.length);
    this.buf.set(v, this.pos);
    this.pos += v.length;
  }

  /** UTF-8; a lone surrogate becomes U+FFFD (Buffer's rule). */
  string(s: string): void {
    const n = s.length;
    if (n * 3 < 0x80) {
      // Fits a one-byte length whatever it contains: write the body after it, ASCII by hand.
      this.#ensure(1 + n * 3);
      const b = this.buf;
      const at = this.pos;
      let p = at + 1;
      let i = 0;
      for (; i < n; i++) {
        const c = s.charCodeAt(i);
        if (c >= 0x80) break;
        b[p++] = c;
      }
      if (i < n) p += b.write(i === 0 ? s : s.slice(i), p, 'utf8');
      b[at] = p - at - 1;
      this.pos = p;
      return;
    }
    const len = Buffer.byteLength(s, 'utf8');
    this.uint32(len);
    this.#ensure(len);
    this.pos += this.buf.write(s, this.pos, 'utf8');
  }

  /** Starts a nested message; returns the mark {@link ldelim} needs. */
  fork(): number {
    this.#ensure(1);
    return this.pos++;
  }

  /** Ends the nested message started at `mark`: writes its length, moving the body if need be. */
  ldelim(mark: number): void {
    const len = this.pos - mark - 1;
    const k = varintSize(len);
    if (k > 1) {
      this.#ensure(k - 1);
      this.buf.copyWithin(mark + k, mark + 1, this.pos);
      this.pos += k - 1;
    }
    let v = len;
    let p = mark;
    while (v > 0x7f) {
      this.buf[p++] = (v & 0x7f) | 0x80;
      v >>>= 7;
    }
    this.buf[p] = v;
  }

  /** Empties the writer for reuse (a shared writer; a throw mid-encode leaves no state behind). */
  reset(): void {
    this.pos = PREFIX_ROOM;
  }

  /** The bytes written, copied into a Buffer of their size; with `delimited`, length-prefixed first. */
  finish(delimited = false): Buffer {
    let start = PREFIX_ROOM;
    if (delimited) {
      const len = this.pos - PREFIX_ROOM;
      start = PREFIX_ROOM - varintSize(len);
      let p = start;
      let v = len;
      while (v > 0x7f) {
        this.buf[p++] = (v & 0x7f) | 0x80;
        v >>>= 7;
      }
      this.buf[p] = v;
    }
    const n = this.pos - start;
    const out = Buffer.allocUnsafe(n);
    const b = this.buf;
    // A loop copies small events faster than `set`, and no subarray (a costly FastBuffer) is made.
    if (n <= 256) for (let i = 0; i < n; i++) out[i] = b[start + i]!;
    else b.copy(out, 0, start, this.pos);
    return out;
  }

  /** The frame: varint length prefix, then the body. */
  finishDelimited(): Buffer {
    const len = this.pos - PREFIX_ROOM;
    let p = PREFIX_ROOM - varintSize(len);
    const start = p;
    let v = len;
    while (v > 0x7f) {
      this.buf[p++] = (v & 0x7f) | 0x80;
      v >>>= 7;
    }
    this.buf[p] = v;
    return this.buf.subarray(start, this.pos);
  }

  // proto3 fields by tag ((field << 3) | wire type, from fields.ts): a default value (0, '',
  // false, empty bytes) is not written; null/undefined neither.
  uint32Field(tag: number, v: number | null | undefined): void {
    if (v != null && v !== 0) {
      this.uint32(tag);
      this.uint32(v);
    }
  }
  int32Field(tag: number, v: number | null | undefined): void {
    if (v != null && v !== 0) {
      this.uint32(tag);
      this.int32(v);
    }
  }
  doubleField(tag: number, v: number | null | undefined): void {
    if (v != null && !Object.is(v, 0)) {
      this.uint32(tag);
      this.double(v);
    }
  }
  boolField(tag: number, v: boolean | null | undefined): void {
    if (v != null && v !== false) {
      this.uint32(tag);
      this.bool(v);
    }
  }
  stringField(tag: number, v: string | null | undefined): void {
    if (v != null && v !== '') {
      this.uint32(tag);
      this.string(v);
    }
  }
  /** `repeated string`: every element, empty ones included. */
  stringsField(tag: number, vs: readonly string[] | null | undefined): void {
    if (vs) {
      for (let i = 0; i < vs.length; i++) {
        this.uint32(tag);
        this.string(vs[i]!);
      }
    }
  }
  /** An empty message (`{}`): tag and a zero length. */
  emptyField(tag: number): void {
    this.uint32(tag);
    this.#ensure(1);
    this.buf[this.pos++] = 0;
  }
}

/** Reads one message's fields. Throws a plain Error on malformed input. */
export class Reader {
  buf: Uint8Array;
  pos = 0;
  /** End of the message being read: no field may reach past it. */
  limit: number;

  readonly #utf8: typeof strictUtf8;
  /**
   * The shared metadata values of the frame's own type ({@link ENCODINGS} for a Buffer,
   * {@link ENCODINGS_U8} for a plain Uint8Array), or none for any other view; found on first use.
   */
  #encodings: readonly Uint8Array[] | undefined;

  /** `strict`: invalid UTF-8 throws (worker frames); otherwise it becomes U+FFFD (stored history, as protobufjs). */
  constructor(buf: Uint8Array, strict = true) {
    this.buf = buf;
    this.limit = buf.length;
    this.#utf8 = strict ? strictUtf8 : looseUtf8;
  }

  /** Starts reading another frame with this reader (the history decode reuses one: no reader per event). */
  reset(buf: Uint8Array): void {
    this.buf = buf;
    this.pos = 0;
    this.limit = buf.length;
    this.#encodings = undefined;
  }

  /** Reads the nested message that starts here (its length first) with `read`, within its bounds. */
  nested<T>(read: (r: Reader) => T): T {
    const end = this.end();
    const outer = this.limit;
    this.limit = end;
    const v = read(this);
    if (this.pos !== end) throw new RangeError('index out of range');
    this.limit = outer;
    return v;
  }

  /** More fields follow in the current message. */
  more(): boolean {
    return this.pos < this.limit;
  }

  /** A varint as uint32 (higher bits dropped, as protobufjs does); at most ten bytes. */
  uint32(): number {
    const b = this.buf;
    let p = this.pos;
    let v = 0;
    for (let shift = 0; shift < 35; shift += 7) {
      if (p >= this.limit) throw new RangeError('index out of range');
      const c = b[p++]!;
      v |= (c & 0x7f) << shift;
      if (c < 0x80) {
        this.pos = p;
        return v >>> 0;
      }
    }
    // Bytes 6–10 of a 64-bit varint: only their continuation bits matter here.
    for (let i = 5; i < 10; i++) {
      if (p >= this.limit) throw new RangeError('index out of range');
      if (b[p++]! < 0x80) {
        this.pos = p;
        return v >>> 0;
      }
    }
    throw new Error('invalid varint encoding');
  }

  int32(): number {
    return this.uint32() | 0;
  }

  bool(): boolean {
    return this.uint32() !== 0;
  }

  double(): number {
    const p = this.pos;
    if (p + 8 > this.limit) throw new RangeError('index out of range');
    if (LITTLE_ENDIAN) for (let i = 0; i < 8; i++) f64Bytes[i] = this.buf[p + i]!;
    else for (let i = 0; i < 8; i++) f64Bytes[7 - i] = this.buf[p + i]!;
    this.pos = p + 8;
    return f64[0]!;
  }

  /** End of the length-delimited field that starts here (after its length). */
  end(): number {
    const len = this.uint32();
    const end = this.pos + len;
    if (end > this.limit) throw new RangeError('index out of range');
    return end;
  }

  /** A view on the frame's bytes, not a copy (as protobufjs' BufferReader). */
  bytes(): Uint8Array {
    const end = this.end();
    const v = this.buf.subarray(this.pos, end);
    this.pos = end;
    return v;
  }

  /**
   * A Payload metadata value: one of the shared {@link ENCODINGS} (of the frame's type, Buffer or
   * plain Uint8Array) when its bytes equal it (every payload's `encoding` entry), else a view.
   */
  metadataValue(): Uint8Array {
    const end = this.end();
    const b = this.buf;
    const p = this.pos;
    const n = end - p;
    const shared = (this.#encodings ??= encodingsFor(b));
    for (let k = 0; k < shared.length; k++) {
      const e = shared[k]!;
      if (e.length !== n) continue;
      let i = 0;
      while (i < n && e[i] === b[p + i]) i++;
      if (i === n) {
        this.pos = end;
        return e;
      }
    }
    const v = b.subarray(p, end);
    this.pos = end;
    return v;
  }

  /** UTF-8 (strict or not, see the constructor); a leading BOM stays. */
  string(): string {
    const end = this.end();
    const b = this.buf;
    let p = this.pos;
    this.pos = end;
    const n = end - p;
    if (n <= INTERN_MAX) {
      // Step names, metadata keys, owners: the same few strings in every event. One retained
      // string each instead of a new one per event (less to copy for the GC of decoded histories).
      let h = n;
      for (let i = p; i < end; i++) {
        const c = b[i]!;
        if (c >= 0x80) return this.#utf8.decode(b.subarray(p, end));
        h = (Math.imul(h, 31) + c) | 0;
      }
      const slot = h & (INTERN_SLOTS - 1);
      const known = interned[slot]!;
      if (known.length === n) {
        let i = 0;
        while (i < n && known.charCodeAt(i) === b[p + i]) i++;
        if (i === n) return known;
      }
      let s = '';
      for (; p < end; p++) s += String.fromCharCode(b[p]!);
      interned[slot] = s;
      return s;
    }
    if (n < SHORT_STRING) {
      let s = '';
      for (; p < end; p++) {
        const c = b[p]!;
        if (c >= 0x80) return s + this.#utf8.decode(b.subarray(p, end));
        s += String.fromCharCode(c);
      }
      return s;
    }
    return this.#utf8.decode(b.subarray(p, end));
  }

  /** Skips a field of an unknown number (or of a known one with an unexpected wire type). */
  skip(wireType: number): void {
    switch (wireType) {
      case VARINT:
        this.uint32();
        return;
      case FIXED64:
        this.#advance(8);
        return;
      case LEN:
        this.pos = this.end();
        return;
      case FIXED32:
        this.#advance(4);
        return;
      default:
        throw new Error(`invalid wire type ${wireType} at offset ${this.pos}`);
    }
  }

  #advance(n: number): void {
    if (this.pos + n > this.limit) throw new RangeError('index out of range');
    this.pos += n;
  }
}

// ---------------------------------------------------------------------------------------------
// The Temporal messages turnlog embeds: `Payload` and `Failure` (with the failure mapping: type in
// ApplicationFailureInfo, error code in `source`). The one hand encoding of both, used by the
// worker protocol and the history fast paths; the reflected mapping in history/codec.ts
// (`failureToProto`) is the reference they are tested against. In this file, not a module of its
// own: every module a worker loads at start-up costs it about 1 ms.

export const EMPTY_BYTES: Uint8Array = new Uint8Array(0);
/**
 * The `encoding` metadata values of the default converter, shared by every payload decoded here
 * from a Buffer (a view of a Buffer is a Buffer, so the type is what it was). Never written to:
 * a codec makes new metadata.
 */
const ENCODINGS: readonly Uint8Array[] = ['json/plain', 'binary/plain', 'binary/null'].map((s) => Buffer.from(s, 'latin1'));
/** The same values as plain Uint8Arrays, for frames that are plain Uint8Arrays (the stores' reads). */
const ENCODINGS_U8: readonly Uint8Array[] = ENCODINGS.map((b) => new Uint8Array(b));
const NO_ENCODINGS: readonly Uint8Array[] = [];

/** The shared metadata values whose type is the frame's own (a view of a frame has its type). */
function encodingsFor(buf: Uint8Array): readonly Uint8Array[] {
  if (Buffer.isBuffer(buf)) return ENCODINGS;
  return Object.getPrototypeOf(buf) === Uint8Array.prototype ? ENCODINGS_U8 : NO_ENCODINGS;
}
/** Failure.source carries the error code: Temporal uses it for the producing SDK, which we are. */
export const CODE_PREFIX = 'turnlog:';
const MAX_DEPTH = 100;

/** `o[k] = v`, except that a `__proto__` key becomes an own property, as protobufjs decodes it. */
export function setOwn<T>(o: Record<string, T>, k: string, v: T): void {
  if (k === '__proto__') Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
  else o[k] = v;
}

/** Writes `p` as the message field `tag` (always, even empty: a present message). */
export function writePayload(w: Writer, tag: number, p: Payload): void {
  w.uint32(tag);
  const at = w.fork();
  const md = p.metadata;
  if (md != null) {
    const keys = Object.keys(md);
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i]!;
      // A map entry is a message {key = 1; value = 2}; both always written.
      w.uint32(P.metadata);
      const e = w.fork();
      w.uint32(MapEntry.key);
      w.string(k);
      w.uint32(MapEntry.value);
      w.bytes(md[k]!);
      w.ldelim(e);
    }
  }
  const data = p.data;
  if (data != null && data.length) {
    w.uint32(P.data);
    w.bytes(data);
  }
  w.ldelim(at);
}

/** Reads a Payload's fields up to the reader's limit (call through `r.nested`). */
export function readPayload(r: Reader): Payload {
  const metadata: Record<string, Uint8Array> = {};
  let data = EMPTY_BYTES;
  while (r.more()) {
    const t = r.uint32();
    if (t === P.metadata) {
      // The entry inline (no closure per entry: this is the hot decode path).
      let key = '';
      let value = EMPTY_BYTES;
      const end = r.end();
      const outer = r.limit;
      r.limit = end;
      while (r.more()) {
        const u = r.uint32();
        if (u === MapEntry.key) key = r.string();
        else if (u === MapEntry.value) value = r.metadataValue();
        else r.skip(u & 7);
      }
      if (r.pos !== end) throw new RangeError('index out of range');
      r.limit = outer;
      setOwn(metadata, key, value);
    } else if (t === P.data) {
      data = r.bytes();
    } else {
      r.skip(t & 7);
    }
  }
  return { metadata, data };
}

/** Writes `f` as the message field `tag`, fields in number order (encoded_attributes = 20 last). */
export function writeFailure(w: Writer, tag: number, f: FailureInfo, depth = 0): void {
  if (depth > MAX_DEPTH) throw new Error('max depth exceeded');
  w.uint32(tag);
  const at = w.fork();
  w.stringField(F.message, f.message);
  w.stringField(F.source, f.code === undefined ? 'turnlog' : CODE_PREFIX + f.code);
  w.stringField(F.stackTrace, f.stack ?? '');
  if (f.cause) writeFailure(w, F.cause, f.cause, depth + 1);
  w.uint32(F.applicationFailureInfo);
  const info = w.fork();
  w.stringField(AFI.type, f.type);
  w.boolField(AFI.nonRetryable, f.nonRetryable ?? false);
  if (f.details) {
    w.uint32(AFI.details);
    const d = w.fork();
    writePayload(w, Payloads.payloads, f.details);
    w.ldelim(d);
  }
  w.ldelim(info);
  if (f.encodedAttributes) writePayload(w, F.encodedAttributes, f.encodedAttributes);
  w.ldelim(at);
}

/** Reads a Failure's fields up to the reader's limit (call through `r.nested`). */
export function readFailure(r: Reader, depth = 0): FailureInfo {
  if (depth > MAX_DEPTH) throw new Error('max depth exceeded');
  let message = '';
  let source = '';
  let stack = '';
  let cause: FailureInfo | undefined;
  let type = '';
  let nonRetryable = false;
  let details: Payload | undefined;
  let encoded: Payload | undefined;
  while (r.more()) {
    const t = r.uint32();
    switch (t) {
      case F.message:
        message = r.string();
        continue;
      case F.source:
        source = r.string();
        continue;
      case F.stackTrace:
        stack = r.string();
        continue;
      case F.cause:
        cause = r.nested((r) => readFailure(r, depth + 1));
        continue;
      case F.encodedAttributes:
        encoded = r.nested(readPayload);
        continue;
      case F.applicationFailureInfo:
        r.nested((r) => {
          while (r.more()) {
            const u = r.uint32();
            if (u === AFI.type) type = r.string();
            else if (u === AFI.nonRetryable) nonRetryable = r.bool();
            else if (u === AFI.details) {
              // Payloads { repeated Payload payloads = 1 }: the first one is the details.
              let first: Payload | undefined;
              r.nested((r) => {
                while (r.more()) {
                  const v = r.uint32();
                  if (v === Payloads.payloads) {
                    const p = r.nested(readPayload);
                    first ??= p;
                  } else r.skip(v & 7);
                }
              });
              details = first;
            } else r.skip(u & 7);
          }
        });
        continue;
    }
    r.skip(t & 7);
  }
  const f: FailureInfo = { message, type: type || 'Error' };
  if (stack) f.stack = stack;
  if (nonRetryable) f.nonRetryable = true;
  if (source.startsWith(CODE_PREFIX)) f.code = source.slice(CODE_PREFIX.length);
  if (details) f.details = details;
  if (encoded) f.encodedAttributes = encoded;
  if (cause) f.cause = cause;
  return f;
}
