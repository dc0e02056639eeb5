/**
 * Shared shapes for fast-check arbitraries of recorded failures. Each test passes its own field
 * arbitraries: the codec round-trip tests need canonical values, the byte-equality tests need
 * edge cases (empty strings, -0, NaN), so the domains stay per test and only the shape is shared.
 */
import fc from 'fast-check';
import type { FailureInfo, Payload } from '../../src/history/events.js';

export interface FailureFields {
  message: fc.Arbitrary<string>;
  type: fc.Arbitrary<string>;
  stack: fc.Arbitrary<string>;
  nonRetryable: fc.Arbitrary<boolean>;
  code: fc.Arbitrary<string>;
  details: fc.Arbitrary<Payload>;
  /** Only where the encoding carries it (history codec, not the worker protocol). */
  encodedAttributes?: fc.Arbitrary<Payload>;
}

/** A FailureInfo with an optional chain of causes (depth shrinks small); absent causes are omitted. */
export function failureArbitrary(fields: FailureFields): fc.Arbitrary<FailureInfo> {
  return fc.letrec<{ f: FailureInfo }>((tie) => ({
    f: fc
      .record(
        { ...fields, cause: fc.oneof({ depthSize: 'small', withCrossShrink: true }, fc.constant(undefined), tie('f')) },
        { requiredKeys: ['message', 'type'] },
      )
      .map((f) => {
        const out = { ...f } as FailureInfo;
        if (out.cause === undefined) delete out.cause;
        return out;
      }),
  })).f;
}
