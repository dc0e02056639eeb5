/** Payload conversion of what a handler produces (step results, checkpoints, chunks, state, output), checked against the hard cap. */
import { PayloadEncodingError, PayloadTooLargeError, isTurnlogError, type PayloadField } from '../errors.js';
import type { Payload } from '../history/events.js';
import { MAX_PAYLOAD_BYTES, payloadSize, type PayloadConverter } from '../history/payload.js';

/**
 * Converts a value the handler produced, naming it in a refusal. Payloads over the hard cap are
 * refused here, in whichever process runs the handler, so no worker frame outgrows the
 * protocol's cap; the engine checks its configured (lower or equal) limits on receipt.
 */
export function encodeFor(converter: PayloadConverter, value: unknown, field: PayloadField, subject: string): Payload {
  let p: Payload;
  try {
    p = converter.toPayload(value);
  } catch (err) {
    // Thrown by the module's converter, perhaps from its own copy of turnlog: checked by code, not class.
    if (isTurnlogError(err, 'TURNLOG_PAYLOAD_ENCODING') && typeof (err as PayloadEncodingError).about === 'function') throw (err as PayloadEncodingError).about(subject);
    throw err;
  }
  const size = payloadSize(p);
  if (size > MAX_PAYLOAD_BYTES) {
    throw new PayloadTooLargeError(field, size, MAX_PAYLOAD_BYTES, subject, "That is turnlog's hard cap (no limit can be set above it): keep large data outside the task and pass a reference.");
  }
  return p;
}
