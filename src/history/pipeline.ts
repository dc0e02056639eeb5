/**
 * One payload pipeline: conversion (JS values ⇄ plain payloads) and the codec chain (plain ⇄
 * stored payloads, failures and events), built once by {@link payloadPipeline}. The engine, the
 * inline executor, process workers, replay testing (in-process and worker threads) and the CLI
 * each obtain theirs through that function, so a custom converter or codec list reaches all of
 * them alike (docs/workflows.md#custom-payload-converters). A process worker needs only the
 * converter (codecs run in the engine), so it takes {@link moduleConverter} without this module:
 * every module it loads at start-up costs it about 1 ms.
 */
import type { FailureInfo, HistoryEvent, Payload } from './events.js';
import { codecChain, type CodecChain } from './payload-map.js';
import { DefaultPayloadConverter, type PayloadCodec, type PayloadConverter } from './payload.js';

// Defined in payload.ts, which a worker loads anyway (child-main imports it from there).
export { moduleConverter } from './payload.js';

/** What a pipeline is built from. Every field is optional: the default is JSON, no codecs. */
export interface PayloadPipelineOptions {
  /** Values ⇄ payloads. Default: the JSON converter ({@link DefaultPayloadConverter}). */
  converter?: PayloadConverter | undefined;
  /** Applied at the store boundary: encode in order on the way in, decode in reverse on the way out. */
  codecs?: readonly PayloadCodec[] | undefined;
  /** Move failure messages and stacks into encoded payloads (with codecs only). Default true. */
  encodeFailureAttributes?: boolean | undefined;
}

/**
 * Conversion and codecs as one object. `toPayload`/`fromPayload` convert only (handlers and
 * workers see plain payloads); `encode*`/`decode*` run the codecs (the identity without any).
 */
export interface PayloadPipeline {
  readonly converter: PayloadConverter;
  /** The codec chain, or undefined when there are no codecs (hot paths skip the mapping). */
  readonly chain: CodecChain | undefined;
  toPayload(value: unknown): Payload;
  fromPayload<T = unknown>(payload: Payload): T;
  encode(payload: Payload): Payload;
  decode(payload: Payload): Payload;
  decodeFailure(failure: FailureInfo): FailureInfo;
  encodeEvent(event: HistoryEvent): HistoryEvent;
  decodeEvent(event: HistoryEvent): HistoryEvent;
  /** A stored payload as a value: codecs, then the converter. */
  fromStored<T = unknown>(payload: Payload): T;
}

const same = <T>(x: T): T => x;

/** Builds the pipeline; the one way engine, workers, replay testing and the CLI get theirs. */
export function payloadPipeline(options: PayloadPipelineOptions = {}): PayloadPipeline {
  const converter = options.converter ?? new DefaultPayloadConverter();
  const chain = codecChain(
    options.codecs ?? [],
    options.encodeFailureAttributes === undefined ? {} : { encodeFailureAttributes: options.encodeFailureAttributes },
  );
  return {
    converter,
    chain,
    toPayload: (v) => converter.toPayload(v),
    fromPayload: <T>(p: Payload) => converter.fromPayload<T>(p),
    encode: chain ? chain.encode : same,
    decode: chain ? chain.decode : same,
    decodeFailure: chain ? chain.decodeFailure : same,
    encodeEvent: chain ? chain.encodeEvent : same,
    decodeEvent: chain ? chain.decodeEvent : same,
    fromStored: <T>(p: Payload) => converter.fromPayload<T>(chain ? chain.decode(p) : p),
  };
}
