/**
 * The codec chain on failures (issue #18 item 4): message and stack of every level move into an
 * encoded payload and come back exactly; with the option off, or for failures stored before,
 * decoding changes nothing but the payloads.
 */
import { describe, expect, it } from 'vitest';
import type { FailureInfo, Payload } from '../../src/history/events.js';
import { ENCODED_FAILURE_MESSAGE, codecChain } from '../../src/history/payload-map.js';
import { payload } from '../../src/testing/history-builder.js';

const te = new TextEncoder();
const td = new TextDecoder();
// Reverses the bytes and marks the payload, so encoded bytes never hold the plain text.
const reverse = {
  encode: (p: Payload): Payload => ({ metadata: { encoding: te.encode('test/reversed'), inner: p.metadata['encoding']! }, data: p.data.slice().reverse() }),
  decode: (p: Payload): Payload => ({ metadata: { encoding: p.metadata['inner']! }, data: p.data.slice().reverse() }),
};

const failure: FailureInfo = {
  message: 'outer secret',
  type: 'CardError',
  stack: 'CardError: outer secret\n    at charge',
  code: 'CARD',
  nonRetryable: true,
  details: payload({ card: 'secret' }),
  cause: { message: 'inner secret', type: 'Error' },
};

describe('codecChain failures', () => {
  it('encodes message and stack at every level into encodedAttributes, and decodes them back exactly', () => {
    const chain = codecChain([reverse])!;
    const enc = chain.encodeFailure(failure);
    expect(enc).toMatchObject({ message: ENCODED_FAILURE_MESSAGE, type: 'CardError', code: 'CARD', nonRetryable: true, cause: { message: ENCODED_FAILURE_MESSAGE, type: 'Error' } });
    expect(enc.stack).toBeUndefined();
    expect(td.decode(enc.encodedAttributes!.metadata['encoding'])).toBe('test/reversed');
    expect(JSON.stringify(enc, (_k, v: unknown) => (v instanceof Uint8Array ? td.decode(v) : v))).not.toContain('secret');
    expect(chain.decodeFailure(enc)).toEqual(failure);
  });

  it('on events: StepCompleted and TurnFailed failures both go through it', () => {
    const chain = codecChain([reverse])!;
    const base = { eventId: 5, time: 0, generation: 1, turn: 1 };
    const step = chain.encodeEvent({ ...base, type: 'StepCompleted', attempt: 1, seq: 1, name: 'charge', failure, durationMs: 1 });
    const turn = chain.encodeEvent({ ...base, type: 'TurnFailed', failure });
    for (const e of [step, turn]) expect((e as { failure: FailureInfo }).failure.message).toBe(ENCODED_FAILURE_MESSAGE);
    expect((chain.decodeEvent(turn) as { failure: FailureInfo }).failure).toEqual(failure);
  });

  it('encodeFailureAttributes: false encodes only payloads; decoding reads both forms', () => {
    const off = codecChain([reverse], { encodeFailureAttributes: false })!;
    const enc = off.encodeFailure(failure);
    expect(enc.message).toBe('outer secret');
    expect(enc.encodedAttributes).toBeUndefined();
    expect(off.decodeFailure(enc)).toEqual(failure);
    expect(codecChain([reverse])!.decodeFailure(enc)).toEqual(failure);
  });
});
