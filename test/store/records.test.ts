import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Lease, TaskSummary } from '../../src/history/events.js';
import { decodeSummary, encodeLease, encodeLeaseObject, encodeSummary, encodeSummaryRow } from '../../src/store/records.js';

// Lone surrogates included: the records are JSON text, which escapes them (issue #10, item 1's bug class).
// Generated ids (plain ASCII) take the byte-written path; the others its fallback.
const text = fc.oneof(
  fc.stringMatching(/^[A-Za-z0-9_-]{1,21}$/),
  fc.constant(''), fc.constantFrom('one-step', 'support-agent', 'ü"\\\n', 'Sure \ud83d', '\udc00x'), fc.string({ unit: 'binary', maxLength: 20 }));
const num = fc.oneof(
  fc.constantFrom(0, -0, 1, 9, 10, 99, 100, 0xffffffff, 1_764_443_012_345, 1_764_443_012_345.5, Number.MAX_SAFE_INTEGER, 2 ** 53, -1, 1e21, 5e-324),
  fc.nat(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
);
const summary: fc.Arbitrary<TaskSummary> = fc.record(
  {
    taskId: fc.constant('t'),
    workflow: text,
    kind: fc.constantFrom('one-shot', 'multi-turn'),
    status: fc.constantFrom('pending', 'in_progress', 'suspended', 'completed'),
    outcome: fc.constantFrom('succeeded', 'failed', 'cancelled', 'timed_out'),
    lastEventId: num,
    turn: num,
    queued: num,
    lastInputId: text,
    createdAt: num,
    updatedAt: num,
  },
  { requiredKeys: ['taskId', 'workflow', 'kind', 'status', 'lastEventId', 'turn', 'queued', 'createdAt', 'updatedAt'] },
);

describe('summary records', () => {
  it('the fast encoding gives the bytes of JSON.stringify(row), and decodes back', () => {
    fc.assert(
      fc.property(fc.array(summary, { minLength: 1, maxLength: 4 }), (list) => {
        for (const s of list) {
          const bytes = encodeSummary(s);
          expect(bytes.toString('hex')).toBe(encodeSummaryRow(s).toString('hex'));
          const back = decodeSummary('t', bytes);
          expect(back.workflow).toBe(s.workflow);
          expect(back.lastInputId).toBe(s.lastInputId);
        }
      }),
      { seed: 2024, numRuns: 500 },
    );
  });

  it('a kind or status it does not know is written as JSON.stringify writes its index (-1)', () => {
    const s = { taskId: 't', workflow: 'w', kind: 'other', status: 'nope', lastEventId: 12, turn: 3, queued: 0, lastInputId: 'in-1', createdAt: 1_764_443_012_345, updatedAt: 1_764_443_012_346 } as unknown as TaskSummary;
    expect(encodeSummary(s).toString()).toBe('["w",-1,-1,-1,12,3,0,"in-1",1764443012345,1764443012346]');
    expect(encodeSummary({ ...s, kind: 'multi-turn', status: 'completed', outcome: 'timed_out' }).toString()).toBe('["w",1,3,3,12,3,0,"in-1",1764443012345,1764443012346]');
  });

  it('non-finite numbers fall back to JSON.stringify (null)', () => {
    const s: TaskSummary = { taskId: 't', workflow: 'w', kind: 'one-shot', status: 'pending', lastEventId: 1, turn: 0, queued: 0, createdAt: Number.NaN, updatedAt: Number.POSITIVE_INFINITY };
    expect(encodeSummary(s).toString()).toBe('["w",0,0,-1,1,0,0,null,null,null]');
  });

  it('the fast lease encoding gives the bytes of JSON.stringify({ owner, instance, generation, expiresAt })', () => {
    const lease: fc.Arbitrary<Lease> = fc.record({
      owner: text,
      instance: text,
      generation: num,
      expiresAt: fc.oneof(num, fc.constantFrom(Number.NaN, Number.NEGATIVE_INFINITY)),
    });
    fc.assert(
      fc.property(fc.array(lease, { minLength: 1, maxLength: 4 }), (list) => {
        for (const l of list) {
          const bytes = encodeLease(l);
          expect(bytes.toString('hex')).toBe(encodeLeaseObject(l).toString('hex'));
          expect(bytes.toString()).toBe(JSON.stringify({ owner: l.owner, instance: l.instance, generation: l.generation, expiresAt: l.expiresAt }));
        }
      }),
      { seed: 2025, numRuns: 500 },
    );
  });
});

describe('records: the byte-written path against JSON.stringify over the whole safe-integer range', () => {
  // Every digit count (writeNat divides by 10 in doubles) and every non-ASCII or escaped workflow,
  // owner and instance (those are copied as cached JSON bytes, UTF-8).
  const whole = fc.oneof(fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }), fc.nat({ max: 20 }).map((d) => 10 ** Math.min(d, 15) - 1), fc.nat({ max: 15 }).map((d) => 10 ** d));
  const name = fc.oneof(fc.string({ unit: 'binary', maxLength: 40 }), fc.string({ unit: 'grapheme', maxLength: 40 }), fc.constantFrom('\u2028\u2029', '\u007f', '\ud800\udc00', '\udfff\ud800', 'x'.repeat(400)));
  const plainId = fc.stringMatching(/^[ -!#-[\]-~]{0,60}$/);

  it('summaries', () => {
    fc.assert(
      fc.property(name, plainId, fc.array(whole, { minLength: 5, maxLength: 5 }), fc.option(fc.constantFrom('succeeded', 'failed', 'cancelled', 'timed_out'), { nil: undefined }), (workflow, id, [a, b, c, d, e], outcome) => {
        const s: TaskSummary = { taskId: 't', workflow, kind: 'multi-turn', status: 'suspended', lastEventId: a!, turn: b!, queued: c!, lastInputId: id, createdAt: d!, updatedAt: e! };
        if (outcome !== undefined) s.outcome = outcome;
        expect(encodeSummary(s).toString('hex')).toBe(encodeSummaryRow(s).toString('hex'));
        const { lastInputId: _, ...noId } = s;
        expect(encodeSummary(noId).toString('hex')).toBe(encodeSummaryRow(noId).toString('hex'));
      }),
      { seed: 7, numRuns: 5_000 },
    );
  });

  it('leases', () => {
    fc.assert(
      fc.property(name, name, whole, whole, (owner, instance, generation, expiresAt) => {
        const l: Lease = { owner, instance, generation, expiresAt };
        expect(encodeLease(l).toString('hex')).toBe(Buffer.from(JSON.stringify(l)).toString('hex'));
      }),
      { seed: 8, numRuns: 5_000 },
    );
  });
});
