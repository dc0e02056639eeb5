/**
 * JS errors ⇄ recorded failures. A recorded step failure is rethrown on replay as an Error
 * with the same name, message, stack and code, so handler code that catches it behaves alike.
 */
import type { FailureInfo } from './events.js';

const MAX_MESSAGE = 4000;
const MAX_STACK = 8000;

/**
 * Any thrown value as a failure. Total: a Proxy whose traps throw, an object without a
 * prototype, a getter that throws, a symbol or `null` each give a failure, never an exception
 * (a throw here used to surface as TURNLOG_WORKER_START; test: history/failure.test.ts).
 */
export function errorToFailure(err: unknown, depth = 0): FailureInfo {
  try {
    return describe(err, depth);
  } catch {
    return { message: `A value of type ${safeTypeof(err)} was thrown, and inspecting it threw too (a Proxy or a throwing getter?). Throw an Error instead.`, type: 'UninspectableThrow' };
  }
}

function describe(err: unknown, depth: number): FailureInfo {
  // Error-like objects from other realms (vm contexts, workers) fail `instanceof Error`.
  if (err instanceof Error || isErrorLike(err)) {
    const e = err as object;
    const t = field(e, 'type');
    const name = field(e, 'name');
    const type = typeof t === 'string' ? t : typeof name === 'string' ? name : 'Error';
    const f: FailureInfo = { message: truncate(text(field(e, 'message')), MAX_MESSAGE), type };
    const stack = field(e, 'stack');
    if (typeof stack === 'string' && stack) f.stack = truncate(stack, MAX_STACK);
    const code = field(e, 'code');
    if (typeof code === 'string') f.code = code;
    if (field(e, 'nonRetryable') === true) f.nonRetryable = true;
    const cause = field(e, 'cause');
    if (cause !== undefined && depth < 8) f.cause = errorToFailure(cause, depth + 1);
    return f;
  }
  if (err === null) return { message: 'null was thrown. Throw an Error instead.', type: 'null' };
  if (typeof err === 'object') return { message: truncate(`A non-Error object was thrown: ${preview(err)}. Throw an Error instead.`, MAX_MESSAGE), type: 'Object' };
  if (typeof err === 'function') return { message: `A function (${err.name || 'anonymous'}) was thrown. Throw an Error instead.`, type: 'function' };
  return { message: truncate(text(err), MAX_MESSAGE), type: typeof err };
}

function isErrorLike(v: unknown): boolean {
  return typeof v === 'object' && v !== null && typeof (v as Error).message === 'string' && typeof (v as Error).name === 'string';
}

/** A property read that a throwing getter cannot break. */
function field(o: object, key: string): unknown {
  try {
    return (o as Record<string, unknown>)[key];
  } catch {
    return undefined;
  }
}

function text(v: unknown): string {
  if (typeof v === 'string') return v;
  if (v === undefined) return '';
  try {
    return String(v);
  } catch {
    return `(a ${safeTypeof(v)} with no string form)`;
  }
}

function preview(o: object): string {
  try {
    const json = JSON.stringify(o);
    if (json !== undefined && json !== '{}') return json.length > 200 ? `${json.slice(0, 200)}…` : json;
  } catch {
    // cycles, BigInt, throwing toJSON: fall back to the constructor name
  }
  try {
    const ctor = (Object.getPrototypeOf(o) as { constructor?: { name?: unknown } } | null)?.constructor?.name;
    return typeof ctor === 'string' && ctor !== 'Object' ? `a ${ctor}` : text(o);
  } catch {
    return 'an object';
  }
}

function safeTypeof(v: unknown): string {
  try {
    return v === null ? 'null' : typeof v;
  } catch {
    return 'unknown';
  }
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
