/**
 * JS errors ⇄ recorded failures. A recorded step failure is rethrown on replay as an Error
 * with the same name, message, stack and code, so handler code that catches it behaves alike.
 */
import type { FailureInfo } from './events.js';

const MAX_MESSAGE = 4000;
const MAX_STACK = 8000;

export function errorToFailure(err: unknown, depth = 0): FailureInfo {
  if (err instanceof Error) {
    const f: FailureInfo = {
      message: truncate(err.message, MAX_MESSAGE),
      type: typeof (err as { type?: unknown }).type === 'string' ? String((err as unknown as { type: string }).type) : err.name,
    };
    if (err.stack) f.stack = truncate(err.stack, MAX_STACK);
    const code = (err as { code?: unknown }).code;
    if (typeof code === 'string') f.code = code;
    if ((err as { nonRetryable?: unknown }).nonRetryable === true) f.nonRetryable = true;
    if (err.cause !== undefined && depth < 8) f.cause = errorToFailure(err.cause, depth + 1);
    return f;
  }
  return { message: truncate(String(err), MAX_MESSAGE), type: typeof err === 'object' ? 'Object' : typeof err };
}

/** A recorded failure as a throwable Error (name = the recorded type). */
export class RecordedFailure extends Error {
  readonly type: string;
  readonly code: string | undefined;
  readonly nonRetryable: boolean;
  readonly failure: FailureInfo;
  constructor(f: FailureInfo) {
    super(f.message, f.cause ? { cause: new RecordedFailure(f.cause) } : undefined);
    this.name = f.type;
    this.type = f.type;
    this.code = f.code;
    this.nonRetryable = f.nonRetryable ?? false;
    this.failure = f;
    if (f.stack) this.stack = f.stack;
  }
}

export function failureToError(f: FailureInfo): RecordedFailure {
  return new RecordedFailure(f);
}

function truncate(s: string, max: number): string {
  return s.length <= max ? s : `${s.slice(0, max)}… (${s.length - max} more chars)`;
}
