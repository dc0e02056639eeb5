/**
 * The worker protocol's framing over the pipe: {@link FrameReader} splits a byte stream back into
 * length-delimited frame bodies (the codecs' `finishDelimited` writes the prefix). Part of
 * protocol.ts, which re-exports it; runs on both sides, once per chunk read from fd 3.
 */
import { MAX_FRAME_BYTES, WorkerProtocolError } from './protocol-messages.js';

/**
 * Splits a byte stream into frame bodies (varint length prefix, as protobufjs `encodeDelimited`).
 * Keeps chunks as they came and joins only a frame's own bytes, so a large frame costs one copy.
 */
export class FrameReader {
  readonly #max: number;
  #chunks: Uint8Array[] = [];
  #length = 0;
  /** Body length of the frame being read, once its prefix is in; -1 before. */
  #need = -1;

  constructor(maxFrameBytes = MAX_FRAME_BYTES) {
    this.#max = maxFrameBytes;
  }

  /** Bytes received but not yet returned as a frame. */
  get buffered(): number {
    return this.#length;
  }

  /** The frame being read, once its length is in: that length and up to `max` body bytes so far. */
  partial(max = 32): { length: number; head: Uint8Array } | undefined {
    if (this.#need < 0) return undefined;
    const head: number[] = [];
    for (const c of this.#chunks) {
      for (let j = 0; j < c.length && head.length < max; j++) head.push(c[j]!);
      if (head.length >= max) break;
    }
    return { length: this.#need, head: Uint8Array.from(head) };
  }

  /** Adds bytes; returns every frame body now complete. Throws WorkerProtocolError on a bad prefix. */
  push(chunk: Uint8Array): Uint8Array[] {
    if (chunk.length) {
      this.#chunks.push(chunk);
      this.#length += chunk.length;
    }
    const out: Uint8Array[] = [];
    for (;;) {
      if (this.#need < 0 && !this.#readPrefix()) break;
      if (this.#length < this.#need) break;
      out.push(this.#take(this.#need));
      this.#need = -1;
    }
    return out;
  }

  #readPrefix(): boolean {
    let value = 0;
    let i = 0;
    for (const c of this.#chunks) {
      for (let j = 0; j < c.length; j++) {
        const b = c[j]!;
        value += (b & 0x7f) * 2 ** (7 * i);
        i++;
        if ((b & 0x80) === 0) {
          if (value > this.#max) throw new WorkerProtocolError(`frame of ${value} bytes exceeds the ${this.#max}-byte limit`);
          this.#take(i);
          this.#need = value;
          return true;
        }
        if (i >= 5) throw new WorkerProtocolError('frame length prefix longer than 5 bytes');
      }
    }
    return false;
  }

  #take(n: number): Uint8Array {
    this.#length -= n;
    const first = this.#chunks[0];
    if (first && first.length >= n) {
      const body = first.subarray(0, n);
      if (first.length === n) this.#chunks.shift();
      else this.#chunks[0] = first.subarray(n);
      return body;
    }
    const body = new Uint8Array(n);
    let off = 0;
    while (off < n) {
      const c = this.#chunks[0]!;
      const k = Math.min(c.length, n - off);
      body.set(c.subarray(0, k), off);
      off += k;
      if (k === c.length) this.#chunks.shift();
      else this.#chunks[0] = c.subarray(k);
    }
    return body;
  }
}

