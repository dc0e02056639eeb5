import { describe, expect, it } from 'vitest';
import type { Lease } from '../../src/history/events.js';
import { decide } from '../../src/replay/decide.js';
import { fold } from '../../src/replay/fold.js';
import { historyBuilder, T0 } from '../../src/testing/history-builder.js';
import { RULE_EXAMPLES } from './rule-examples.js';

const live: Lease = { owner: 'engine-b', instance: 'engine-b-1', generation: 2, expiresAt: T0 + 1_000_000 };

describe('decide: one example per rule', () => {
  it.each(RULE_EXAMPLES)('$name', (ex) => {
    const d = decide(fold('task-1', ex.events), ex.lease, ex.now);
    expect(d).toMatchObject(ex.expected);
    expect(d.reason.length).toBeGreaterThan(10);
  });

  it('covers every rule', () => {
    const rules = new Set(RULE_EXAMPLES.map((ex) => ex.expected.rule));
    expect([...rules].sort()).toEqual(
      ['backstop', 'cancel-requested', 'completed', 'marker', 'owned', 'pending', 'queued-input', 'recover', 'recoveries-exhausted', 'suspended', 'worker-crashes-exhausted', 'timer-due', 'waiting-for-timer'].sort(),
    );
  });
});

describe('decide: edges and ordering', () => {
  const base = () => historyBuilder().created({ kind: 'multi-turn' }).input('q').turnStarted();

  it('a live lease does not protect an attempt that already ended', () => {
    const s = fold('task-1', base().crashed().build());
    expect(decide(s, live, T0 + 5_000)).toMatchObject({ kind: 'rerun', attempt: 2 });
  });

  it('a lease expiring exactly now is dead', () => {
    const s = fold('task-1', base().build());
    expect(decide(s, { ...live, expiresAt: T0 + 5_000 }, T0 + 5_000)).toMatchObject({ kind: 'rerun' });
    expect(decide(s, { ...live, expiresAt: T0 + 5_001 }, T0 + 5_000)).toMatchObject({ kind: 'none', rule: 'owned' });
  });

  it('the deadline is inclusive: now == deadline is a backstop', () => {
    const s = fold('task-1', base().build());
    const deadline = s.openTurn!.deadline;
    expect(decide(s, undefined, deadline)).toMatchObject({ rule: 'backstop' });
    expect(decide(s, undefined, deadline - 1)).toMatchObject({ rule: 'recover' });
  });

  it('the marker wins over the deadline and over exhausted crashes', () => {
    const s = fold('task-1', base().crashed().recovered().crashed().recovered().crashed().marker().build());
    expect(decide(s, undefined, T0 + 10 * 60_000)).toMatchObject({ rule: 'marker', cause: 'recovery_marker' });
  });

  it('cancel wins over a live lease (rule 2 before rule 3)', () => {
    const s = fold('task-1', base().cancel('turn').build());
    expect(decide(s, live, T0 + 5_000)).toMatchObject({ kind: 'finalize-turn', rule: 'cancel-requested', terminal: 'TurnCancelled' });
  });

  it('a task-scoped cancel on an open multi-turn turn completes the task', () => {
    const s = fold('task-1', base().cancel('task').build());
    expect(decide(s, undefined, T0 + 5_000)).toMatchObject({ kind: 'finalize-turn', completeTask: 'cancelled' });
    const turnOnly = fold('task-1', base().cancel('turn').build());
    expect(decide(turnOnly, undefined, T0 + 5_000)).not.toHaveProperty('completeTask');
  });

  it('a task cancel survives the turn it interrupted until TaskCompleted', () => {
    const s = fold('task-1', base().cancel('task').input('next').cancelled('stopped').build());
    expect(decide(s, undefined, T0 + 5_000)).toMatchObject({ kind: 'complete-task', outcome: 'cancelled' });
  });

  it('a one-shot finalize always completes the task', () => {
    const b = historyBuilder().created({ kind: 'one-shot' }).input('q').turnStarted();
    const s = fold('task-1', b.build());
    expect(decide(s, undefined, s.openTurn!.deadline)).toMatchObject({ rule: 'backstop', completeTask: 'timed_out' });
  });

  it('a policy argument overrides the recorded one', () => {
    const s = fold('task-1', base().exitedForRecovery().build());
    expect(decide(s, undefined, T0 + 5_000)).toMatchObject({ kind: 'rerun' });
    expect(decide(s, undefined, T0 + 5_000, { ...s.policy, maxRecoveries: 0 })).toMatchObject({ rule: 'recoveries-exhausted' });
  });

  it('takes one input per turn, the head of the queue', () => {
    const s = fold('task-1', historyBuilder().created({ kind: 'multi-turn' }).input('a').input('b').input('c').build());
    expect(decide(s, undefined, T0)).toMatchObject({ kind: 'start-turn', inputIds: ['in-1'], entryMode: 'fresh' });
  });

  it('a one-shot whose turn ended never starts another (transient state before TaskCompleted)', () => {
    const s = fold('task-1', historyBuilder().created({ kind: 'one-shot' }).input('a').turnStarted().input('late').completed('x', { completeTask: false }).build());
    expect(decide(s, undefined, T0 + 10_000)).toMatchObject({ kind: 'none', rule: 'suspended' });
  });

  it('reasons name the numbers they used', () => {
    const s = fold('task-1', base().build());
    const d = decide(s, undefined, T0 + 2 * 60_000);
    expect(d.reason).toContain('deadline 2026-01-01T00:01:02.000Z');
    expect(d.reason).toContain('2026-01-01T00:02:00.000Z');
  });

  it("a re-run's reason is formatted when read, from the facts as they were when decided", () => {
    const s = fold('task-1', base().step('a', 1).build());
    const lease: Lease = { ...live, expiresAt: T0 + 1_000 };
    const iso = Date.prototype.toISOString;
    let formats = 0;
    Date.prototype.toISOString = function (this: Date) {
      formats++;
      return iso.call(this);
    };
    let d: ReturnType<typeof decide>;
    try {
      d = decide(s, lease, T0 + 5_000);
      expect(formats).toBe(0); // the engine's recovery never reads it
    } finally {
      Date.prototype.toISOString = iso;
    }
    const before = d.reason;
    // What the decision saw, not what its inputs became (the engine replaces and folds on).
    s.openTurn!.attempt = 7;
    s.openTurn!.calls.push(s.openTurn!.calls[0]!);
    lease.owner = 'someone-else';
    expect(d.reason).toBe(before);
    expect(before).toBe(
      'turn 1 attempt 1: lease of engine-b (engine-b-1) expired at 2026-01-01T00:00:01.000Z (1767225601000) <= now 2026-01-01T00:00:05.000Z (1767225605000); ' +
        'deadline 2026-01-01T00:01:02.000Z (1767225662000) not reached at now 2026-01-01T00:00:05.000Z (1767225605000); re-run as attempt 2 replaying 1 recorded call(s)',
    );
  });

  it('never throws on an infinite deadline', () => {
    const s = fold('task-1', historyBuilder().created({ kind: 'multi-turn', policy: { turnTimeoutMs: Infinity } }).input('q').turnStarted().build());
    expect(decide(s, undefined, T0 + 1e12)).toMatchObject({ kind: 'rerun' });
  });
});

describe("decide: a re-run's lazy reason survives copies", () => {
  it('spread, JSON and structuredClone carry the same text (the getter is an own enumerable property)', () => {
    const s = fold('task-1', historyBuilder().created().input('q').turnStarted().step('a', 1).build());
    const d = decide(s, { ...live, expiresAt: T0 + 1_000 }, T0 + 5_000);
    expect(d.kind).toBe('rerun');
    const text = d.reason;
    expect(text).toContain('re-run as attempt 2');
    expect({ ...d }.reason).toBe(text);
    expect((JSON.parse(JSON.stringify(d)) as { reason: string }).reason).toBe(text);
    expect(structuredClone(d).reason).toBe(text);
    expect(Object.keys(d)).toContain('reason');
  });

  it('equals the plain object it reads as (own fields in order, reason formatted from the facts of its own decision)', () => {
    const s = fold('task-1', historyBuilder().created({ kind: 'multi-turn' }).input('q').turnStarted().build());
    const d = decide(s, undefined, T0 + 5_000);
    const reason = 'turn 1 attempt 1 has no live owner; deadline 2026-01-01T00:01:02.000Z (1767225662000) not reached at now 2026-01-01T00:00:05.000Z (1767225605000); re-run as attempt 2 replaying 0 recorded call(s)';
    const plain = { kind: 'rerun', rule: 'recover', turn: 1, attempt: 2, reason };
    expect(Object.keys(d)).toEqual(['kind', 'rule', 'turn', 'attempt', 'reason']);
    expect({ ...d }).toStrictEqual(plain);
    expect(d).toEqual(plain);
    // Decided again later, the first decision's reason still names its own now.
    decide(s, undefined, T0 + 9_000);
    expect(d.reason).toBe(reason);
  });
});
