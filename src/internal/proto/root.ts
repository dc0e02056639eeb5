import protobuf from 'protobufjs/light.js';
import { descriptor } from './descriptor.js';

/**
 * The one protobufjs root holding our messages and the Temporal messages they use
 * (`temporal.api.common.v1.Payload`, `temporal.api.failure.v1.Failure`), built from the
 * generated descriptor. Only `history/` may import it; the worker protocol has its own
 * hand-written codec (src/executor/wire.ts) so workers never load protobufjs.
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
