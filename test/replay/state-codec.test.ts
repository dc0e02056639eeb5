import { describe, expect, it } from 'vitest';
import { isTurnlogError } from '../../src/errors.js';
import { lookupType } from '../../src/internal/proto/root.js';
import { decodeEvent, encodeEvent } from '../../src/history/codec.js';
import { decodeState, encodeState, SNAPSHOT_VERSION } from '../../src/history/state-codec.js';
import { fold } from '../../src/replay/fold.js';
import { historyBuilder } from '../../src/testing/history-builder.js';

// Every optional field set: checkpoint, marker, cancels, failures with details, causes and encoded attributes.
const full = () =>
  historyBuilder('snap')
    .created({ kind: 'multi-turn', policy: { executor: 'process', stepRetry: { maxAttempts: 3, initialIntervalMs: 10, backoffCoefficient: 2, maxIntervalMs: 100, nonRetryableTypes: ['TypeError'] } } })
    .input('a')
    .turnStarted()
    .failed({ message: 'outer', type: 'AppError', code: 'E1', stack: 'at x', nonRetryable: true, details: { metadata: {}, data: new Uint8Array([1, 2]) }, cause: { message: 'inner', type: 'Error' } })
    .input('b')
    .turnStarted()
    .step('s', { x: 1 })
    .step('f', null, { failure: { message: 'Encoded failure', type: 'Error', encodedAttributes: { metadata: { encoding: new Uint8Array([9]) }, data: new Uint8Array([3]) } } })
    .checkpoint({ c: 1 })
    .input('steer')
    .input('steer2')
    .take(['in-3'])
    .marker()
    .crashed({ exitCode: null, signal: 'SIGKILL' })
    .cancel('turn', 'stop')
    .input('queued');

describe('state snapshots', () => {
  it('round-trip a state with every optional field set', () => {
    const s = fold('snap', full().build());
    expect(s.openTurn?.marker && s.openTurn.cancelRequested && s.openTurn.checkpoint && s.lastFailure?.cause).toBeTruthy();
    expect(decodeState(encodeState(s))).toStrictEqual(s);
    const completed = fold('snap', full().cancelled('stop').cancel('task', 'bye').taskCompleted('cancelled').build());
    expect(decodeState(encodeState(completed))).toStrictEqual(completed);
  });

  it('keep each input’s trace context (SnapshotInput.trace): queued, taken by the open turn, taken by takeInputs', () => {
    const tp = (n: number) => `00-${String(n).repeat(32)}-${String(n).repeat(16)}-01`;
    const events = historyBuilder('snap')
      .created({ kind: 'multi-turn' })
      .input('a', { trace: { traceparent: tp(1), tracestate: 'vendor=x' } })
      .turnStarted()
      .input('steer', { trace: { traceparent: tp(2) } })
      .take(['in-2'])
      .input('queued', { trace: { traceparent: tp(3) } })
      .input('untraced')
      .build();
    // The event codec carries it (InputQueued fields 5 and 6)…
    expect(events.filter((e) => e.type === 'InputQueued').map((e) => (decodeEvent(encodeEvent(e), 'snap') as { trace?: unknown }).trace)).toEqual([
      { traceparent: tp(1), tracestate: 'vendor=x' },
      { traceparent: tp(2) },
      { traceparent: tp(3) },
      undefined,
    ]);
    // …and so does the folded state's snapshot.
    const s = fold('snap', events);
    expect(s.openTurn!.inputs[0]!.trace).toEqual({ traceparent: tp(1), tracestate: 'vendor=x' });
    expect(s.openTurn!.taken[0]!.trace).toEqual({ traceparent: tp(2) });
    expect(s.queue.map((q) => q.trace)).toEqual([{ traceparent: tp(3) }, undefined]);
    expect(decodeState(encodeState(s))).toStrictEqual(s);
  });

  it('hands back plain Uint8Arrays even when the state held Node Buffers', () => {
    const events = full().build().map((e) => decodeEvent(encodeEvent(e), 'snap'));
    const s = fold('snap', events);
    const back = decodeState(encodeState(s));
    expect(back.openTurn!.checkpoint!.data.constructor).toBe(Uint8Array);
    expect(Array.from(back.openTurn!.checkpoint!.data)).toEqual(Array.from(s.openTurn!.checkpoint!.data));
    expect(encodeState(back)).toEqual(encodeState(s));
  });

  it('rejects garbled bytes and unknown layout versions', () => {
    expect(() => decodeState(new Uint8Array([0xff, 0xff, 0xff]))).toThrow(expect.objectContaining({ code: 'TURNLOG_HISTORY_CORRUPT' }));
    const T = lookupType('turnlog.v1.TaskStateSnapshot');
    const msg = T.decode(encodeState(fold('snap', full().build()))) as unknown as Record<string, unknown>;
    msg['snapshotVersion'] = SNAPSHOT_VERSION + 1;
    try {
      decodeState(T.encode(msg as never).finish());
      expect.unreachable();
    } catch (err) {
      expect(isTurnlogError(err, 'TURNLOG_HISTORY_FORMAT')).toBe(true);
    }
  });
});
