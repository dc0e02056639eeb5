import protobuf from 'protobufjs/light.js';
import { descriptor } from './descriptor.js';

/**
 * The one protobufjs root holding our messages and the Temporal messages they use
 * (`temporal.api.common.v1.Payload`, `temporal.api.failure.v1.Failure`), built from the
 * generated descriptor. Only `history/codec.ts` and `executor/protocol.ts` may import it.
 */
export const root: protobuf.Root = protobuf.Root.fromJSON(descriptor as unknown as protobuf.INamespace);
root.resolveAll();

export function lookupType(name: string): protobuf.Type {
  return root.lookupType(name);
}

export function lookupEnum(name: string): protobuf.Enum {
  return root.lookupEnum(name);
}

export { protobuf };
