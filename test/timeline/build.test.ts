import { describe, expect, it } from 'vitest';
import { summarize } from '../../src/history/summary.js';
import { buildTimeline, recoveries, taskTimeline } from '../../src/timeline/build.js';
import { historyBuilder } from '../../src/testing/history-builder.js';

describe('buildTimeline', () => {
  it('groups attempts, steps, kills and crashes under their turn', () => {
    const events = historyBuilder('t1')
      .created({ kind: 'multi-turn' })
      .input('hi')
      .turnStarted()
      .step('llm', { text: 'a' }, { durationMs: 40 })
      .crashed({ message: 'worker died' })
      .recovered()
      .step('tool', null, { failure: 'nope', durationMs: 5 })
      .killed({ reason: 'hard cap' })
      .timedOut('hard_cap')
      .build();
    const { turns, timeline } = buildTimeline(events, 0);
    expect(turns).toHaveLength(1);
    const t = turns[0]!;
    expect(t.attempts.map((a) => [a.attempt, a.entryMode, a.ended?.kind ?? null])).toEqual([
      [1, 'fresh', 'worker-crashed'],
      [2, 'recovered', null],
    ]);
    expect(t.steps.map((s) => [s.name, s.durationMs, s.ok])).toEqual([
      ['llm', 40, true],
      ['tool', 5, false],
    ]);
    expect([t.kills, t.crashes, t.outcome?.type, t.outcome?.detail]).toEqual([1, 1, 'TurnTimedOut', 'hard_cap']);
    expect(timeline.map((e) => e.eventId)).toEqual(events.map((e) => e.eventId));
  });
});

describe('recoveries', () => {
  it('names the replayer rule for each event recovery appended', () => {
    const events = historyBuilder('t2')
      .created({ kind: 'multi-turn' })
      .input('hi')
      .turnStarted()
      .crashed()
      .recovered()
      .marker()
      .timedOut('recovery_marker')
      .build();
    const recovered = events.find((e) => e.type === 'TurnStarted' && e.entryMode === 'recovered')!;
    const timedOut = events.at(-1)!;
    expect(recoveries('t2', events).map((r) => [r.eventId, r.rule])).toEqual([
      [recovered.eventId, 'recover'],
      [timedOut.eventId, 'marker'],
    ]);
  });

  it('finds none in a history no recovery touched', () => {
    const events = historyBuilder('t3').created({ kind: 'multi-turn' }).input('hi').turnStarted().step('llm').completed('ok').build();
    expect(recoveries('t3', events)).toEqual([]);
  });
});

describe('taskTimeline', () => {
  it("decides an open turn without a lease as recovery would, and decodes every event's payloads", () => {
    const events = historyBuilder('t4').created({ kind: 'multi-turn' }).input({ q: 'why?' }).turnStarted().step('llm', { a: 1 }).build();
    const task = summarize('t4', undefined, events);
    const view = taskTimeline(task, events, undefined, events.at(-1)!.time + 1);
    expect(view.decision?.decision.rule).toBe('recover');
    expect(view.decision?.explanation).toContain('recover');
    expect(view.events).toHaveLength(events.length);
    expect(JSON.stringify(view.events)).toContain('"why?"');
    expect(view.turns[0]!.steps[0]!.result).toEqual({ encoding: 'json/plain', value: { a: 1 } });
  });
});
