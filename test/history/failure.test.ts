// errorToFailure is total: whatever a handler throws becomes a failure with a sensible message
// (issue #10 item 7: a Proxy whose traps throw used to escape it and be recorded as TURNLOG_WORKER_START).
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { TerminalError, TurnlogError } from '../../src/errors.js';
import { errorToFailure } from '../../src/history/failure.js';

/** A Proxy every one of whose traps throws. */
function hostile(): object {
  const thrower = () => {
    throw new Error('trap');
  };
  return new Proxy({}, { get: thrower, getPrototypeOf: thrower, has: thrower, ownKeys: thrower, getOwnPropertyDescriptor: thrower });
}

describe('errorToFailure', () => {
  it('turns a Proxy whose traps throw into a failure instead of throwing', () => {
    const f = errorToFailure(hostile());
    expect(f.type).toBe('UninspectableThrow');
    expect(f.message).toContain('Throw an Error instead');
  });

  it('survives an Error whose getters throw, keeping what it can read', () => {
    const err = new Error('kept');
    Object.defineProperty(err, 'stack', { get: () => { throw new Error('no stack'); } });
    Object.defineProperty(err, 'cause', { get: () => { throw new Error('no cause'); } });
    const f = errorToFailure(err);
    expect(f).toEqual({ message: 'kept', type: 'Error' });
  });

  it.each([
    ['null', null, 'null', 'null was thrown'],
    ['undefined', undefined, 'undefined', ''],
    ['a symbol', Symbol('s'), 'symbol', 'Symbol(s)'],
    ['a string', 'boom', 'string', 'boom'],
    ['a number', 42, 'number', '42'],
    ['a function', function named() {}, 'function', 'A function (named) was thrown'],
    ['a frozen plain object', Object.freeze({ why: 'frozen' }), 'Object', '{"why":"frozen"}'],
    ['an object without a prototype', Object.create(null) as object, 'Object', 'A non-Error object was thrown'],
    ['a cyclic object', (() => { const o: Record<string, unknown> = {}; o['self'] = o; return o; })(), 'Object', 'A non-Error object was thrown'],
  ])('gives %s a failure with a sensible message', (_what, value, type, message) => {
    const f = errorToFailure(value);
    expect(f.type).toBe(type);
    expect(f.message).toContain(message);
  });

  it('reads error-like objects from another realm as errors (they fail instanceof Error)', () => {
    const foreign = runInNewContext('const e = new TypeError("from a vm"); e.code = "E_VM"; e') as unknown;
    expect(foreign instanceof Error).toBe(false);
    const f = errorToFailure(foreign);
    expect(f).toMatchObject({ message: 'from a vm', type: 'TypeError', code: 'E_VM' });
    expect(f.stack).toContain('from a vm');
  });

  it('keeps code, nonRetryable, type and causes of ordinary errors', () => {
    const f = errorToFailure(new TerminalError('declined', { type: 'CardDeclined', cause: new TurnlogError('TURNLOG_FENCED', 'inner') }));
    expect(f).toMatchObject({ message: 'declined', type: 'CardDeclined', nonRetryable: true, cause: { message: 'inner', code: 'TURNLOG_FENCED' } });
  });
});
