/**
 * Applies a function to every payload inside an event or a recorded call. The engine uses it
 * to run PayloadCodecs (encryption, compression) at the store boundary, so handlers and
 * workers always see plain payloads and the history holds only encoded ones.
 */
import type { FailureInfo, HistoryEvent, Payload } from './events.js';
import type { PayloadCodec } from './payload.js';

export type PayloadFn = (p: Payload) => Payload;

function mapFailure(f: FailureInfo, fn: PayloadFn): FailureInfo {
  const out: FailureInfo = { ...f };
  if (f.details) out.details = fn(f.details);
  if (f.cause) out.cause = mapFailure(f.cause, fn);
  return out;
}

export function mapEventPayloads(e: HistoryEvent, fn: PayloadFn): HistoryEvent {
  switch (e.type) {
    case 'InputQueued':
      return { ...e, input: fn(e.input) };
    case 'StepCompleted': {
      const out = { ...e };
      if (e.result) out.result = fn(e.result);
      if (e.failure) out.failure = mapFailure(e.failure, fn);
      return out;
    }
    case 'Checkpointed':
      return { ...e, data: fn(e.data) };
    case 'TurnCompleted':
    case 'TurnSuspended': {
      const out = { ...e };
      if (e.output) out.output = fn(e.output);
      if (e.state) out.state = fn(e.state);
      return out;
    }
    case 'TurnFailed':
      return { ...e, failure: mapFailure(e.failure, fn) };
    default:
      return e;
  }
}

/** Encode through codecs in order; decode in reverse. Undefined when there are no codecs. */
export function codecChain(codecs: readonly PayloadCodec[]): { encode: PayloadFn; decode: PayloadFn } | undefined {
  if (codecs.length === 0) return undefined;
  return {
    encode: (p) => codecs.reduce((acc, c) => c.encode(acc), p),
    decode: (p) => codecs.reduceRight((acc, c) => c.decode(acc), p),
  };
}
