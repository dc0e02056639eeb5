// StateMigrated (pure): the fold takes the recorded state and version, checks where a migration
// may stand, applies a delta; snapshots keep the state's version; the timeline names it.
import { describe, expect, it } from 'vitest';
import { decodeEvent, encodeEvent } from '../../src/history/codec.js';
import type { HistoryEvent } from '../../src/history/events.js';
import { defaultPayloadConverter } from '../../src/history/payload.js';
import { decodeState, encodeState } from '../../src/history/state-codec.js';
import { withStateDelta } from '../../src/history/state-delta.js';
import { fold, withFullStates } from '../../src/replay/fold.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { describeEvent } from '../../src/timeline/format.js';

const value = (e: { state?: { metadata: Record<string, Uint8Array>; data: Uint8Array } } | undefined) => defaultPayloadConverter.fromPayload(e!.state!);

/** Two turns of version 1, a migration to 2, a third turn under 2. */
function migrated(format = 2) {
  const b = historyBuilder('m', { tick: 10 }).created({ kind: 'multi-turn', formatVersion: format });
  b.input('a').turnStarted({ workflowVersion: 1 }).suspended('waiting', { state: { messages: ['a'] } });
  b.input('b').turnStarted({ workflowVersion: 1 }).suspended('waiting', { state: { messages: ['a', 'b'] } });
  b.input('c').stateMigrated({ log: ['a', 'b'] }, { from: 1, to: 2 }).turnStarted({ workflowVersion: 2 });
  return b;
}

describe('fold: StateMigrated', () => {
  it('the state version follows the writer of the state, and the migration replaces the state', () => {
    const b = migrated();
    const events = b.build();
    const at = (type: HistoryEvent['type'], n = 0) => fold('m', events.slice(0, events.filter((e) => e.type === type)[n]!.eventId));
    expect(at('TurnSuspended').stateVersion).toBe(1);
    expect(at('StateMigrated').stateVersion).toBe(2);
    const s = fold('m', events);
    expect(s.stateVersion).toBe(2);
    expect(s.openTurn?.workflowVersion).toBe(2);
    expect(defaultPayloadConverter.fromPayload(s.state!)).toEqual({ log: ['a', 'b'] });
    // A turn that ends without writing state (failed) leaves the version as it was.
    const failed = historyBuilder('f').created({ kind: 'multi-turn' });
    failed.input('a').turnStarted({ workflowVersion: 1 }).suspended('w', { state: { n: 1 } });
    failed.input('b').turnStarted({ workflowVersion: 2 }).failed('the hook threw');
    expect(fold('f', failed.build()).stateVersion).toBe(1);
    // Code without a version writes version 0.
    const plain = historyBuilder('p').created({ kind: 'multi-turn' }).input('a').turnStarted().suspended('w', { state: { n: 1 } });
    expect(fold('p', plain.build()).stateVersion).toBe(0);
  });

  it('refuses a migration that does not go up, and one from another version', () => {
    const up = historyBuilder('r').created({ kind: 'multi-turn' }).input('a').turnStarted({ workflowVersion: 2 }).suspended('w', { state: { n: 1 } });
    expect(() => fold('r', up.stateMigrated({ n: 2 }, { from: 2, to: 2 }).build())).toThrow(/does not go up/);
    const other = historyBuilder('r').created({ kind: 'multi-turn' }).input('a').turnStarted({ workflowVersion: 1 }).suspended('w', { state: { n: 1 } });
    expect(() => fold('r', other.stateMigrated({ n: 2 }, { from: 3, to: 4 }).build())).toThrow(/the state is of version 1/);
  });

  it('between attempts of an open turn (a recovered attempt under new code) it is allowed', () => {
    const b = historyBuilder('o').created({ kind: 'multi-turn' }).input('a').turnStarted({ workflowVersion: 1 }).suspended('w', { state: { n: 1 } });
    b.input('b').turnStarted({ workflowVersion: 1 }).crashed().stateMigrated({ m: 1 }, { from: 1, to: 2 }).turnStarted({ attempt: 2, workflowVersion: 2 });
    const s = fold('o', b.build());
    expect(s.openTurn).toMatchObject({ attempt: 2, workflowVersion: 2 });
    expect(defaultPayloadConverter.fromPayload(s.state!)).toEqual({ m: 1 });
    // After an engine crash nothing records the dead attempt's end: the re-run's migration still folds.
    const e = historyBuilder('e').created({ kind: 'multi-turn' }).input('a').turnStarted({ workflowVersion: 1 }).suspended('w', { state: { n: 1 } });
    e.input('b').turnStarted({ workflowVersion: 1 }).stateMigrated({ m: 2 }, { from: 1, to: 2 }).turnStarted({ attempt: 2, workflowVersion: 2 });
    expect(fold('e', e.build()).openTurn).toMatchObject({ attempt: 2, workflowVersion: 2 });
  });

  it('a delta of the old state folds to the migrated state, through the codec; withFullStates restores the full state', () => {
    const big = { messages: Array.from({ length: 50 }, (_, i) => `message number ${i} of a long conversation`) };
    const b = historyBuilder('d').created({ kind: 'multi-turn', formatVersion: 2 }).input('a').turnStarted({ workflowVersion: 1 }).suspended('w', { state: big });
    const prefix = b.build();
    const next = { ...big, schema: 2 };
    const full = historyBuilder('d').created({ kind: 'multi-turn', formatVersion: 2 }).input('a').turnStarted({ workflowVersion: 1 }).suspended('w', { state: big }).stateMigrated(next, { from: 1, to: 2 }).build();
    const m = full.at(-1)!;
    const delta = withStateDelta(fold('d', prefix), m);
    expect(delta).toMatchObject({ type: 'StateMigrated', fromVersion: 1, toVersion: 2 });
    expect(delta.type === 'StateMigrated' && delta.state).toBe(undefined);
    expect(encodeEvent(delta).length).toBeLessThan(encodeEvent(m).length / 4);
    const stored = [...prefix, delta].map((e) => decodeEvent(encodeEvent(e), 'd'));
    expect(defaultPayloadConverter.fromPayload(fold('d', stored).state!)).toEqual(next);
    expect(value(withFullStates('d', stored).at(-1) as never)).toEqual(next);
    // Format 1 keeps the full state.
    const f1 = historyBuilder('d').created({ kind: 'multi-turn', formatVersion: 1 }).input('a').turnStarted({ workflowVersion: 1 }).suspended('w', { state: big }).build();
    expect(withStateDelta(fold('d', f1), m)).toBe(m);
  });

  it('snapshots keep the state version and the open attempt version; an old snapshot has none', () => {
    const s = fold('m', migrated().build());
    const back = decodeState(encodeState(s));
    expect(back.stateVersion).toBe(2);
    expect(back.openTurn?.workflowVersion).toBe(2);
    const old = { ...s };
    delete old.stateVersion;
    expect(decodeState(encodeState(old)).stateVersion).toBeUndefined();
    // A fold from a snapshot without a version does not check fromVersion (unknown).
    const b = historyBuilder('u').created({ kind: 'multi-turn' }).input('a').turnStarted({ workflowVersion: 1 }).suspended('w', { state: { n: 1 } });
    const events = b.build();
    const before = fold('u', events);
    delete before.stateVersion;
    const snap = decodeState(encodeState(before));
    const tail = historyBuilder('u').created({ kind: 'multi-turn' }).input('a').turnStarted({ workflowVersion: 1 }).suspended('w', { state: { n: 1 } }).stateMigrated({ n: 2 }, { from: 0, to: 2 }).build().slice(events.length);
    expect(fold('u', tail, snap).stateVersion).toBe(2);
  });

  it('turnlog show describes it', () => {
    const m = migrated().build().find((e) => e.type === 'StateMigrated')!;
    expect(describeEvent(m, 80)).toBe('state migrated: version 1 → 2 → {"log":["a","b"]}');
  });
});
