/**
 * Large payloads by reference: at the store boundary, a payload whose data is above the store's
 * threshold is written once, content-addressed (SHA-256) beside the task's history, and the
 * stored event keeps a reference (the payload's metadata plus `turnlog-ref`, empty data).
 * Reads resolve references, so everything above the store (fold, engine, workers, export)
 * sees whole payloads. docs/history.md#large-payloads-by-reference.
 */
import { createHash } from 'node:crypto';
import { HistoryCorruptError, invalidArgument } from '../errors.js';
import type { FailureInfo, HistoryEvent, Payload } from '../history/events.js';
import { mapEventPayloads } from '../history/payload-map.js';

/** The metadata key of a reference; its value is `sha256:<hex>` of the payload's data. */
export const PAYLOAD_REF_KEY = 'turnlog-ref';

const enc = new TextEncoder();
const dec = new TextDecoder();

/** A store's `payloadRefBytes` option: undefined (off) or a positive integer. */
export function checkRefBytes(n: number | undefined): number | undefined {
  if (n === undefined) return undefined;
  if (!Number.isInteger(n) || n < 1) throw invalidArgument(`payloadRefBytes must be a positive integer (bytes), got ${String(n)}. Pass for example 256 * 1024, or leave it out to store every payload inline.`);
  return n;
}

/** `e` with its large payloads as references, and the blobs to write (hash → data). */
export function externalize(e: HistoryEvent, threshold: number | undefined, blobs: Map<string, Uint8Array>): HistoryEvent {
  if (threshold === undefined) return e;
  let changed = false;
  const out = mapEventPayloads(e, (p) => {
    if (p.data.length <= threshold || Object.hasOwn(p.metadata, PAYLOAD_REF_KEY)) return p;
    const hash = `sha256:${createHash('sha256').update(p.data).digest('hex')}`;
    blobs.set(hash, p.data);
    changed = true;
    return { metadata: { ...p.metadata, [PAYLOAD_REF_KEY]: enc.encode(hash) }, data: new Uint8Array(0) };
  });
  return changed ? out : e;
}

function isRef(p: Payload | undefined): boolean {
  return p !== undefined && Object.hasOwn(p.metadata, PAYLOAD_REF_KEY) && p.metadata[PAYLOAD_REF_KEY] !== undefined;
}

function failureHoldsRef(f: FailureInfo | undefined): boolean {
  for (let x = f; x !== undefined; x = x.cause) if (isRef(x.details) || isRef(x.encodedAttributes)) return true;
  return false;
}

/**
 * Whether `e` holds a reference: the payloads {@link mapEventPayloads} visits, read in place. A
 * read checks every event it returns; {@link referencedHashes} copies the event (a step's every
 * field) to find none in almost all of them (test: store/payload-refs, every event type).
 */
export function holdsRef(e: HistoryEvent): boolean {
  switch (e.type) {
    case 'InputQueued':
      return isRef(e.input);
    case 'StepCompleted':
      return isRef(e.result) || failureHoldsRef(e.failure);
    case 'Checkpointed':
      return isRef(e.data);
    case 'SignalReceived':
      return isRef(e.value);
    case 'TurnCompleted':
    case 'TurnSuspended':
      return isRef(e.output) || isRef(e.state);
    case 'TurnFailed':
      return failureHoldsRef(e.failure);
    case 'StateMigrated':
      return isRef(e.state);
    case 'ChildEnded':
      return isRef(e.output) || failureHoldsRef(e.failure);
    default:
      return false;
  }
}

/** The hashes `e` references (empty for almost every event). */
export function referencedHashes(e: HistoryEvent): string[] {
  const out: string[] = [];
  mapEventPayloads(e, (p) => {
    const ref = Object.hasOwn(p.metadata, PAYLOAD_REF_KEY) ? p.metadata[PAYLOAD_REF_KEY] : undefined;
    if (ref !== undefined) out.push(dec.decode(ref));
    return p;
  });
  return out;
}

/** `e` with its references replaced by the blobs' data; a missing blob is a corrupt history. */
export function resolve(taskId: string, e: HistoryEvent, blobs: ReadonlyMap<string, Uint8Array | undefined>): HistoryEvent {
  return mapEventPayloads(e, (p): Payload => {
    const ref = Object.hasOwn(p.metadata, PAYLOAD_REF_KEY) ? p.metadata[PAYLOAD_REF_KEY] : undefined;
    if (ref === undefined) return p;
    const hash = dec.decode(ref);
    const data = blobs.get(hash);
    if (data === undefined) throw new HistoryCorruptError(`${taskId}/payload/${hash}`, `event ${e.eventId} references payload ${hash}, which is not stored`);
    const metadata = { ...p.metadata };
    delete metadata[PAYLOAD_REF_KEY];
    return { metadata, data };
  });
}

/** Resolves every reference of `events`, fetching each blob once. */
export async function resolveAll(taskId: string, events: HistoryEvent[], get: (hash: string) => Promise<Uint8Array | undefined>): Promise<HistoryEvent[]> {
  let blobs: Map<string, Uint8Array | undefined> | undefined;
  for (let i = 0; i < events.length; i++) {
    if (!holdsRef(events[i]!)) continue;
    const hashes = referencedHashes(events[i]!);
    if (hashes.length === 0) continue;
    blobs ??= new Map();
    for (const h of hashes) if (!blobs.has(h)) blobs.set(h, await get(h));
    events[i] = resolve(taskId, events[i]!, blobs);
  }
  return events;
}
