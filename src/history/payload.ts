/**
 * Payload conversion: JS values ⇄ `Payload`. JSON by default (`encoding: json/plain`),
 * raw bytes for `Uint8Array` (`binary/plain`), `binary/null` for undefined; the encodings
 * are Temporal's, so histories read the same in Temporal tooling.
 * A {@link PayloadCodec} (compress, encrypt) runs on every payload on the way in and out.
 */
import { TurnlogError } from '../errors.js';
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
  return e ? dec.decode(e) : '';
}

/** The default converter: JSON, binary and undefined, with an optional codec chain. */
export class DefaultPayloadConverter implements PayloadConverter {
  readonly #codecs: readonly PayloadCodec[];

  constructor(codecs: readonly PayloadCodec[] = []) {
    this.#codecs = codecs;
  }

  toPayload(value: unknown): Payload {
    let p: Payload;
    if (value === undefined) {
      p = { metadata: { [ENCODING]: BINARY_NULL }, data: new Uint8Array(0) };
    } else if (value instanceof Uint8Array) {
      p = { metadata: { [ENCODING]: BINARY_PLAIN }, data: value };
    } else {
      let json: string | undefined;
      try {
        json = JSON.stringify(value);
      } catch (err) {
        throw new TurnlogError(
          'TURNLOG_PAYLOAD_ENCODING',
          `Value cannot be converted to JSON (${(err as Error).message}). Return plain data (objects, arrays, strings, numbers, booleans, null) or a Uint8Array.`,
          { cause: err },
        );
      }
      if (json === undefined) {
        throw new TurnlogError(
          'TURNLOG_PAYLOAD_ENCODING',
          `Value of type ${typeof value} has no JSON form. Return plain data or a Uint8Array.`,
        );
      }
      p = { metadata: { [ENCODING]: JSON_PLAIN }, data: enc.encode(json) };
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

/** The payload's `encoding` metadata, for display. */
export function payloadEncoding(p: Payload): string {
  return encodingOf(p);
}
