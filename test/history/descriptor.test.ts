import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import type protobufjs from 'protobufjs';
import { decodeFailure, decodePayload, encodeFailure, encodePayload } from '../../src/history/codec.js';
import type { FailureInfo, Payload } from '../../src/history/events.js';
import { TEMPORAL_PROTO_VERSION, TEMPORAL_TYPES } from '../../src/internal/proto/descriptor.js';
import { root } from '../../src/internal/proto/root.js';

// scripts/gen-proto.mjs copies the Temporal types we use out of @temporalio/proto; these tests
// fail when the installed package moves on without `npm run gen:proto`.
const require = createRequire(import.meta.url);
const temporal = require('@temporalio/proto') as protobufjs.Root;
temporal.resolveAll();

describe('generated descriptor', () => {
  it('was generated from the installed @temporalio/proto', () => {
    const pkg = require('@temporalio/proto/package.json') as { version: string };
    expect(TEMPORAL_PROTO_VERSION).toBe(pkg.version);
  });

  it('holds Payload and Failure among the Temporal types', () => {
    expect(TEMPORAL_TYPES).toContain('temporal.api.common.v1.Payload');
    expect(TEMPORAL_TYPES).toContain('temporal.api.failure.v1.Failure');
  });

  for (const name of TEMPORAL_TYPES) {
    it(`${name} equals @temporalio/proto's definition`, () => {
      expect(root.lookup(name)!.toJSON()).toEqual(temporal.lookup(name)!.toJSON());
    });
  }
});

describe('wire compatibility with @temporalio/proto', () => {
  const enc = new TextEncoder();
  const payload: Payload = { metadata: { encoding: enc.encode('json/plain') }, data: enc.encode('{"a":1}') };
  const failure: FailureInfo = {
    message: 'tool call failed',
    type: 'ToolError',
    stack: 'ToolError: tool call failed\n    at step',
    nonRetryable: true,
    code: 'TURNLOG_TURN_FAILED',
    details: payload,
    cause: { message: 'socket hang up', type: 'Error' },
  };
  const TPayload = temporal.lookupType('temporal.api.common.v1.Payload');
  const TFailure = temporal.lookupType('temporal.api.failure.v1.Failure');

  it('a Payload encoded with our root decodes with Temporal and back', () => {
    const theirs = TPayload.toObject(TPayload.decode(encodePayload(payload))) as { metadata: Record<string, Uint8Array>; data: Uint8Array };
    expect([...theirs.data]).toEqual([...payload.data]);
    expect([...theirs.metadata['encoding']!]).toEqual([...payload.metadata['encoding']!]);
    const ours = decodePayload(TPayload.encode(TPayload.fromObject(theirs)).finish());
    expect(new TextDecoder().decode(ours.data)).toBe('{"a":1}');
    expect(new TextDecoder().decode(ours.metadata['encoding'])).toBe('json/plain');
  });

  it('a Failure encoded with our root decodes with Temporal and back', () => {
    const theirs = TFailure.toObject(TFailure.decode(encodeFailure(failure))) as Record<string, any>;
    expect(theirs['message']).toBe('tool call failed');
    expect(theirs['stackTrace']).toBe(failure.stack);
    expect(theirs['applicationFailureInfo']).toMatchObject({ type: 'ToolError', nonRetryable: true });
    expect(theirs['cause']).toMatchObject({ message: 'socket hang up' });
    const back = decodeFailure(TFailure.encode(TFailure.fromObject(theirs)).finish());
    expect(back).toMatchObject({ message: failure.message, type: 'ToolError', nonRetryable: true, code: 'TURNLOG_TURN_FAILED' });
    expect(back.cause).toMatchObject({ message: 'socket hang up', type: 'Error' });
    expect(new TextDecoder().decode(back.details!.data)).toBe('{"a":1}');
  });

  it('a Failure written by Temporal tooling decodes with our root', () => {
    const bytes = TFailure.encode(
      TFailure.fromObject({ message: 'timed out', source: 'TypeScriptSDK', timeoutFailureInfo: { timeoutType: 1 } }),
    ).finish();
    expect(decodeFailure(bytes)).toMatchObject({ message: 'timed out', type: 'Error' });
  });
});
