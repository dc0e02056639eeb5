/**
 * The Temporal messages turnlog embeds, on the shared wire layer: `Payload` and `Failure` (with
 * the failure mapping: type in ApplicationFailureInfo, error code in `source`). The one hand
 * encoding of both, used by the worker protocol and the history fast paths; the reflected
 * mapping in history/codec.ts (`failureToProto`) is the reference they are tested against.
 * No imports beyond types, wire.ts and fields.ts: a worker process loads this at start-up.
 */
import type { FailureInfo, Payload } from '../../history/events.js';
import { ApplicationFailureInfo as AFI, Failure as F, MapEntry, Payload as P, Payloads } from './fields.js';
import { type Reader, type Writer } from './wire.js';

export const EMPTY_BYTES: Uint8Array = new Uint8Array(0);
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
        else if (u === MapEntry.value) value = r.bytes();
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
