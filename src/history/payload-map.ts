/**
 * Applies a function to every payload inside an event or a recorded call. The engine uses it
 * to run PayloadCodecs (encryption, compression) at the store boundary, so handlers and
 * workers always see plain payloads and the history holds only encoded ones. Failure messages
 * and stacks are not payloads; with `encodeFailureAttributes` they move into one (Temporal's
 * failure converter `encodeCommonAttributes`), so a codec that encrypts covers them too.
 */
import type { FailureInfo, HistoryEvent, Payload } from './events.js';
import { DefaultPayloadConverter, type PayloadCodec } from './payload.js';

export type PayloadFn = (p: Payload) => Payload;
export type FailureFn = (f: FailureInfo) => FailureInfo;

/** The `message` of a failure whose message and stack are in `encodedAttributes` (Temporal's). */
export const ENCODED_FAILURE_MESSAGE = 'Encoded failure';

function mapFailure(f: FailureInfo, fn: PayloadFn): FailureInfo {
  const out: FailureInfo = { ...f };
  if (f.details) out.details = fn(f.details);
  if (f.encodedAttributes) out.encodedAttributes = fn(f.encodedAttributes);
  if (f.cause) out.cause = mapFailure(f.cause, fn);
  return out;
}

/** Maps every payload of `e`; failures go through `failure` (default: their payloads through `fn`). */
export function mapEventPayloads(e: HistoryEvent, fn: PayloadFn, failure: FailureFn = (f) => mapFailure(f, fn)): HistoryEvent {
  switch (e.type) {
    case 'InputQueued':
      return { ...e, input: fn(e.input) };
    case 'StepCompleted': {
      const out = { ...e };
      if (e.result) out.result = fn(e.result);
      if (e.failure) out.failure = failure(e.failure);
      return out;
    }
    case 'Checkpointed':
      return { ...e, data: fn(e.data) };
    case 'SignalReceived':
      return { ...e, value: fn(e.value) };
    case 'TurnCompleted':
    case 'TurnSuspended': {
      const out = { ...e };
      if (e.output) out.output = fn(e.output);
      if (e.state) out.state = fn(e.state);
      return out;
    }
    case 'TurnFailed':
      return { ...e, failure: failure(e.failure) };
    case 'StateMigrated':
      return e.state ? { ...e, state: fn(e.state) } : e;
    case 'ChildEnded': {
      const out = { ...e };
      if (e.output) out.output = fn(e.output);
      if (e.failure) out.failure = failure(e.failure);
      return out;
    }
    default:
      return e;
  }
}

const plain = new DefaultPayloadConverter();

/** Moves message and stack of `f` and of every cause into encoded payloads, then encodes details. */
function encodeFailure(f: FailureInfo, encode: PayloadFn, attributes: boolean): FailureInfo {
  const out: FailureInfo = { ...f };
  if (f.details) out.details = encode(f.details);
  if (attributes && !f.encodedAttributes) {
    out.encodedAttributes = encode(plain.toPayload({ message: f.message, stack_trace: f.stack ?? '' }));
    out.message = ENCODED_FAILURE_MESSAGE;
    delete out.stack;
  } else if (f.encodedAttributes) out.encodedAttributes = encode(f.encodedAttributes);
  if (f.cause) out.cause = encodeFailure(f.cause, encode, attributes);
  return out;
}

/** Restores message and stack from `encodedAttributes` (and decodes details), at every level. */
function decodeFailure(f: FailureInfo, decode: PayloadFn): FailureInfo {
  const out: FailureInfo = { ...f };
  if (f.details) out.details = decode(f.details);
  if (f.encodedAttributes) {
    const attrs = plain.fromPayload<{ message?: unknown; stack_trace?: unknown }>(decode(f.encodedAttributes));
    if (typeof attrs.message === 'string') out.message = attrs.message;
    if (typeof attrs.stack_trace === 'string' && attrs.stack_trace !== '') out.stack = attrs.stack_trace;
    delete out.encodedAttributes;
  }
  if (f.cause) out.cause = decodeFailure(f.cause, decode);
  return out;
}

export interface CodecChainOptions {
  /** Move failure messages and stacks into encoded payloads. Default true. */
  encodeFailureAttributes?: boolean;
}

/** The codecs applied to payloads, failures and whole events, both ways. */
export interface CodecChain {
  encode: PayloadFn;
  decode: PayloadFn;
  encodeFailure: FailureFn;
  decodeFailure: FailureFn;
  encodeEvent: (e: HistoryEvent) => HistoryEvent;
  decodeEvent: (e: HistoryEvent) => HistoryEvent;
}

/** Encode through codecs in order; decode in reverse. Undefined when there are no codecs. */
export function codecChain(codecs: readonly PayloadCodec[], options: CodecChainOptions = {}): CodecChain | undefined {
  if (codecs.length === 0) return undefined;
  const attributes = options.encodeFailureAttributes ?? true;
  const encode: PayloadFn = (p) => codecs.reduce((acc, c) => c.encode(acc), p);
  const decode: PayloadFn = (p) => codecs.reduceRight((acc, c) => c.decode(acc), p);
  const encodeF: FailureFn = (f) => encodeFailure(f, encode, attributes);
  // Decoding handles both forms, so histories written with the option off (or before it) read alike.
  const decodeF: FailureFn = (f) => decodeFailure(f, decode);
  return {
    encode,
    decode,
    encodeFailure: encodeF,
    decodeFailure: decodeF,
    encodeEvent: (e) => mapEventPayloads(e, encode, encodeF),
    decodeEvent: (e) => mapEventPayloads(e, decode, decodeF),
  };
}
