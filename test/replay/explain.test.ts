import { describe, expect, it } from 'vitest';
import { decide } from '../../src/replay/decide.js';
import { explainDecision } from '../../src/replay/explain.js';
import { fold } from '../../src/replay/fold.js';
import { historyBuilder, T0 } from '../../src/testing/history-builder.js';

describe('explainDecision', () => {
  it('prints the decision, rule, reason and key facts', () => {
    const s = fold('t', historyBuilder('t').created({ kind: 'multi-turn', workflow: 'chat' }).input('a').turnStarted().step('x', 1).marker().input('b').build());
    const d = decide(s, undefined, T0 + 10_000);
    const text = explainDecision(d, s);
    expect(text).toContain('decision: finalize turn 1 with TurnTimedOut (cause recovery_marker)');
    expect(text).toContain('rule:     marker');
    expect(text).toContain(`reason:   ${d.reason}`);
    expect(text).toMatch(/status:\s+in_progress/);
    expect(text).toMatch(/open turn:\s+1, attempt 1 running/);
    expect(text).toMatch(/marker:\s+event 5/);
    expect(text).toMatch(/deadline:\s+2026-01-01T00:01:02.000Z/);
    expect(text).toMatch(/queue:\s+1 input\(s\): in-2\*/);
  });

  it('explains a completed task', () => {
    const s = fold('t', historyBuilder('t').created().input('a').turnStarted().completed('x').build());
    const text = explainDecision(decide(s, undefined, T0), s);
    expect(text).toContain('decision: nothing to do');
    expect(text).toMatch(/status:\s+completed \(succeeded\)/);
    expect(text).toMatch(/last turn:\s+1 ended with TurnCompleted/);
  });
});
