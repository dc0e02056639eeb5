// The worker frames' bodies are read by one table (WORKER_BODIES in src/executor/protocol.ts):
// each body's fields by tag with the kind to read them as. The tags come from the generated
// fields.ts; the kinds are written by hand, so this test derives them from worker.proto's
// descriptor and fails when a field is added, retyped or dropped without the table following.
import { describe, expect, it } from 'vitest';
import protobuf from 'protobufjs';
import { WORKER_BODIES, type Kind } from '../../src/executor/protocol.js';
import { root } from '../../src/internal/proto/root.js';

const WIRE: Record<string, number> = { double: 1, string: 2, uint32: 0 };

function kindOf(f: protobuf.Field): Kind {
  if (f.partOf) return 'member';
  const t = f.resolvedType;
  if (t instanceof protobuf.Type) {
    if (t.fullName === '.temporal.api.common.v1.Payload') return 'payload';
    if (t.fullName === '.temporal.api.failure.v1.Failure') return 'failure';
    throw new Error(`${f.fullName}: a message field of type ${t.fullName} has no kind`);
  }
  if (f.type === 'string') return f.repeated ? 'strings' : 'string';
  if (f.type === 'uint32' || f.type === 'double') return f.type;
  throw new Error(`${f.fullName}: type ${f.type} has no kind`);
}

function tagOf(f: protobuf.Field): number {
  return (f.id << 3) | (f.partOf || f.resolvedType instanceof protobuf.Type ? 2 : WIRE[f.type]!);
}

describe('WORKER_BODIES against worker.proto', () => {
  it('has one entry per WorkerFrame.body member, with every field of its message at its kind', () => {
    root.resolveAll();
    const frame = root.lookupType('turnlog.v1.WorkerFrame');
    const body = frame.oneofs['body']!;
    const expected: Record<number, Record<number, Kind>> = {};
    for (const member of body.fieldsArray) {
      const type = member.resolvedType as protobuf.Type;
      const kinds: Record<number, Kind> = {};
      for (const f of type.fieldsArray) kinds[tagOf(f)] = kindOf(f);
      expected[(member.id << 3) | 2] = kinds;
    }
    expect(Object.keys(expected).length).toBeGreaterThan(8);
    expect(WORKER_BODIES).toEqual(expected);
  });
});
