/**
 * codec.ts decodes StepCompleted by hand (a speed-up for decode + fold, bench/replay). It must
 * give exactly what the generic protobufjs path gives; this compares the two on every event of
 * generated histories (round trip) and on edge cases (empty payloads, failures, corrupt bytes).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeEvent, encodeEvent } from '../../src/history/codec.js';
import type { HistoryEvent } from '../../src/history/events.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { arbHistory } from './arbitrary-history.js';

/** Plain data with byte arrays as number lists (Buffer and Uint8Array compare equal). */
function norm(v: unknown): unknown {
  if (v instanceof Uint8Array) return { bytes: Array.from(v) };
  if (Array.isArray(v)) return v.map(norm);
  if (typeof v === 'object' && v !== null) {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) if (x !== undefined) out[k] = norm(x);
    return out;
  }
  return v;
}

describe('codec StepCompleted fast path', () => {
  it('decodes every generated event like the encoder wrote it', () => {
    fc.assert(
      fc.property(arbHistory, (events) => {
        for (const e of events) expect(norm(decodeEvent(encodeEvent(e), 'sim'))).toEqual(norm(e));
      }),
      { numRuns: 100, seed: 3 },
    );
  });

  it('handles empty payloads, empty names and zero fields', () => {
    const b = historyBuilder('t').created().input('a').turnStarted();
    const step: HistoryEvent = { type: 'StepCompleted', eventId: 4, time: 0, generation: 0, turn: 0, attempt: 0, seq: 0, name: '', durationMs: 0, result: { metadata: {}, data: new Uint8Array(0) } };
    expect(norm(decodeEvent(encodeEvent(step), 't'))).toEqual(norm(step));
    const meta: HistoryEvent = { ...step, result: { metadata: { a: new Uint8Array(0), b: new Uint8Array([1]) }, data: new Uint8Array([2, 3]) } };
    expect(norm(decodeEvent(encodeEvent(meta), 't'))).toEqual(norm(meta));
    const failed = b.step('x', null, { failure: { message: 'm', type: 'T', code: 'C' } }).build().at(-1)!;
    expect(norm(decodeEvent(encodeEvent(failed), 't'))).toEqual(norm(failed));
  });

  it('turns truncated step bytes into HistoryCorruptError, like the generic path', () => {
    const e = historyBuilder('t').created().input('a').turnStarted().step('llm', { long: 'x'.repeat(50) }).build().at(-1)!;
    const bytes = encodeEvent(e);
    for (const cut of [bytes.length - 1, bytes.length - 10, 20, 12]) {
      expect(() => decodeEvent(bytes.subarray(0, cut), 't', 'k')).toThrow(expect.objectContaining({ code: 'TURNLOG_HISTORY_CORRUPT' }));
    }
    const zero = encodeEvent({ ...e, eventId: 0 } as HistoryEvent);
    expect(() => decodeEvent(zero, 't', 'k')).toThrow(/event id 0/);
  });
});
