import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { HistoryInvariantError, isTurnlogError } from '../../src/errors.js';
import { isTurnTerminal, type HistoryEvent, type NewEvent } from '../../src/history/events.js';
import type { TaskState } from '../../src/history/state.js';
import { fold } from '../../src/replay/fold.js';
import { historyBuilder, payload, renumber } from '../../src/testing/history-builder.js';
import { arbHistory } from './arbitrary-history.js';

function rejection(events: HistoryEvent[]): { eventId: number; rule: string } | undefined {
  try {
    fold('t', events);
    return undefined;
  } catch (err) {
    expect(err).toBeInstanceOf(HistoryInvariantError);
    expect(isTurnlogError(err, 'TURNLOG_HISTORY_INVARIANT')).toBe(true);
    const e = err as HistoryInvariantError;
    expect(e.message).toContain(`event ${e.eventId}`);
    return { eventId: e.eventId, rule: e.rule };
  }
}

const multi = () => historyBuilder('t').created({ kind: 'multi-turn' });

describe('fold rejects broken histories (examples)', () => {
  const cases: [string, () => HistoryEvent[], number, string][] = [
    ['a gap in event ids', () => multi().input('a').input('b').build().filter((e) => e.eventId !== 2), 3, 'event-id-dense'],
    ['a first event that is not TaskCreated', () => renumber(multi().input('a').build().slice(1)), 1, 'first-event-task-created'],
    ['TaskCreated twice', () => multi().created().build(), 2, 'task-created-once'],
    ['a generation going down', () => multi().leaseClaimed().raw({ type: 'InputQueued', inputId: 'x', input: payload(1), steering: false, generation: 1 }).build(), 3, 'generation-monotonic'],
    ['a step for a turn that never started', () => multi().step('s', 1, { turn: 1, attempt: 1 }).build(), 2, 'turn-not-open'],
    ['a step for another turn than the open one', () => multi().input('a').turnStarted().step('s', 1, { turn: 2 }).build(), 4, 'turn-not-open'],
    ['a step after the turn ended', () => multi().input('a').turnStarted().completed('x').step('s', 1, { turn: 1 }).build(), 5, 'step-after-terminal'],
    ['two terminals for one turn', () => multi().input('a').turnStarted().completed('x').failed('y', { turn: 1 }).build(), 5, 'one-terminal-per-turn'],
    ['a terminal for a turn that never started', () => multi().completed('x', { turn: 1 }).build(), 2, 'turn-not-open'],
    ['a new turn while one is open', () => multi().input('a').input('b').turnStarted().turnStarted().build(), 5, 'turn-already-open'],
    ['a seq out of order', () => multi().input('a').turnStarted().step('s', 1).step('s', 2, { seq: 3 }).build(), 5, 'seq-order'],
    ['a repeated seq', () => multi().input('a').turnStarted().step('s', 1).checkpoint(2, { seq: 1 }).build(), 5, 'seq-order'],
    ['an event after TaskCompleted', () => multi().taskCompleted('succeeded').input('late').build(), 3, 'after-task-completed'],
    ['taking an unknown input', () => multi().input('a').turnStarted().take(['nope']).build(), 4, 'unknown-input'],
    ['withdrawing an unknown input', () => multi().withdraw('nope').build(), 2, 'unknown-input'],
    ['starting a turn with an unknown input', () => multi().turnStarted({ inputIds: ['nope'] }).build(), 2, 'unknown-input'],
    ['a step while no attempt runs', () => multi().input('a').turnStarted().crashed().step('s', 1).build(), 5, 'attempt-not-running'],
    ['a step of an old attempt', () => multi().input('a').turnStarted().recovered().step('s', 1, { attempt: 1 }).build(), 5, 'step-attempt'],
    ['a recovery that resets the turn start', () => multi().input('a').turnStarted().exitedForRecovery().turnStarted({ attempt: 2, turnStartedAt: 5 }).build(), 5, 'turn-start-preserved'],
    ['a recovery that skips an attempt', () => multi().input('a').turnStarted().turnStarted({ attempt: 3 }).build(), 4, 'attempt-order'],
    ['a recovery of a cancelled turn', () => multi().input('a').turnStarted().cancel('turn').recovered().build(), 5, 'cancelled-never-runs'],
    ['a turn after a task cancel', () => multi().input('a').cancel('task').turnStarted().build(), 4, 'cancelled-never-runs'],
    ['a second turn of a one-shot', () => historyBuilder('t').created().input('a').input('b').turnStarted().completed('x', { completeTask: false }).turnStarted().build(), 6, 'one-shot-single-turn'],
    ['TaskCompleted with a turn open', () => multi().input('a').turnStarted().taskCompleted('succeeded').build(), 4, 'turn-open-at-completion'],
  ];
  it.each(cases)('%s', (_name, build, eventId, rule) => {
    expect(rejection(build())).toEqual({ eventId, rule });
  });

  it('checks continuity with `from`', () => {
    const events = multi().input('a').input('b').build();
    const s = fold('t', events.slice(0, 2));
    expect(() => fold('t', events.slice(2).map((e) => ({ ...e, eventId: 4 })), s)).toThrow(/expected event id 3, got 4/);
  });
});

// ---------------------------------------------------------------------------------------------
// Property: mutate a valid history in one way; fold names the right event and rule.

interface Mutation {
  events: HistoryEvent[];
  eventId: number;
  rule: string;
}

function statesOf(events: HistoryEvent[]): TaskState[] {
  // states[k] = state after the first k events (k >= 1).
  const out: TaskState[] = [];
  let s: TaskState | undefined;
  for (let k = 0; k < events.length; k++) {
    s = fold('t', [events[k]!], s);
    out[k + 1] = s;
  }
  return out;
}

/** Inserts `e` at position `i` (0-based), written under the generation and time of the event before. */
function insertAt(events: HistoryEvent[], i: number, e: NewEvent | Omit<NewEvent, 'time' | 'generation'>): HistoryEvent[] {
  const prev = events[i - 1]!;
  const ev = { ...e, time: prev.time, generation: prev.generation, eventId: 0 } as HistoryEvent;
  return renumber([...events.slice(0, i), ev, ...events.slice(i)]);
}

const pick = <T>(xs: T[], r: number): T | undefined => (xs.length === 0 ? undefined : xs[r % xs.length]);
const range = (a: number, b: number): number[] => Array.from({ length: Math.max(0, b - a) }, (_, k) => a + k);

type Mutator = (events: HistoryEvent[], states: TaskState[], r: number) => Mutation | undefined;

const MUTATIONS: Record<string, Mutator> = {
  gap: (ev, _s, r) => {
    const i = pick(range(1, ev.length - 1), r);
    if (i === undefined) return undefined;
    return { events: [...ev.slice(0, i), ...ev.slice(i + 1)], eventId: ev[i + 1]!.eventId, rule: 'event-id-dense' };
  },
  duplicate: (ev, _s, r) => {
    const i = pick(range(1, ev.length), r);
    if (i === undefined) return undefined;
    return { events: [...ev.slice(0, i + 1), ev[i]!, ...ev.slice(i + 1)], eventId: ev[i]!.eventId, rule: 'event-id-dense' };
  },
  'generation-down': (ev, s, r) => {
    const i = pick(range(1, ev.length), r);
    if (i === undefined) return undefined;
    const g = s[i]!.highestGeneration - 1;
    return { events: ev.map((e, k) => (k === i ? { ...e, generation: g } : e)), eventId: ev[i]!.eventId, rule: 'generation-monotonic' };
  },
  'first-not-created': (ev) => (ev.length < 2 ? undefined : { events: renumber(ev.slice(1)), eventId: 1, rule: 'first-event-task-created' }),
  'created-twice': (ev, s, r) => {
    const i = pick(range(1, ev.length + 1).filter((k) => s[k]!.status !== 'completed'), r);
    if (i === undefined) return undefined;
    return { events: insertAt(ev, i, ev[0]!), eventId: i + 1, rule: 'task-created-once' };
  },
  'two-terminals': (ev, _s, r) => {
    const j = pick(range(0, ev.length).filter((k) => isTurnTerminal(ev[k]!)), r);
    if (j === undefined) return undefined;
    return { events: insertAt(ev, j + 1, ev[j]!), eventId: j + 2, rule: 'one-terminal-per-turn' };
  },
  'step-unstarted-turn': (ev, s, r) => {
    const i = pick(range(1, ev.length + 1).filter((k) => s[k]!.status !== 'completed'), r);
    if (i === undefined) return undefined;
    const step = { type: 'StepCompleted', turn: s[i]!.turn + 1, attempt: 1, seq: 1, name: 'x', result: payload(1), durationMs: 1 } as const;
    return { events: insertAt(ev, i, step), eventId: i + 1, rule: 'turn-not-open' };
  },
  'step-after-terminal': (ev, s, r) => {
    const j = pick(range(0, ev.length).filter((k) => isTurnTerminal(ev[k]!)), r);
    if (j === undefined) return undefined;
    const t = s[j + 1]!.lastTurn!.turn;
    const step = { type: 'StepCompleted', turn: t, attempt: 1, seq: 1, name: 'x', result: payload(1), durationMs: 1 } as const;
    return { events: insertAt(ev, j + 1, step), eventId: j + 2, rule: 'step-after-terminal' };
  },
  'turn-started-while-open': (ev, s, r) => {
    const i = pick(range(1, ev.length + 1).filter((k) => s[k]!.openTurn !== undefined), r);
    if (i === undefined) return undefined;
    const start = { ...(ev.find((e) => e.type === 'TurnStarted')! as Extract<HistoryEvent, { type: 'TurnStarted' }>), turn: s[i]!.turn + 1, attempt: 1, inputIds: [] };
    return { events: insertAt(ev, i, start), eventId: i + 1, rule: 'turn-already-open' };
  },
  'seq-out-of-order': (ev, _s, r) => {
    const j = pick(range(0, ev.length).filter((k) => 'seq' in ev[k]!), r);
    if (j === undefined) return undefined;
    return { events: ev.map((e, k) => (k === j ? ({ ...e, seq: (e as { seq: number }).seq + 1 + (r % 3) } as HistoryEvent) : e)), eventId: j + 1, rule: 'seq-order' };
  },
  'after-completed': (ev) => {
    if (ev[ev.length - 1]!.type !== 'TaskCompleted') return undefined;
    return { events: insertAt(ev, ev.length, { type: 'InputQueued', inputId: 'late', input: payload(1), steering: false }), eventId: ev.length + 1, rule: 'after-task-completed' };
  },
  'unknown-input': (ev, s, r) => {
    const i = pick(range(1, ev.length + 1).filter((k) => s[k]!.status !== 'completed'), r);
    if (i === undefined) return undefined;
    return { events: insertAt(ev, i, { type: 'InputWithdrawn', inputId: 'no-such-input', reason: 'x' }), eventId: i + 1, rule: 'unknown-input' };
  },
};

describe('fold rejects every kind of mutated valid history, naming the event', () => {
  it.each(Object.keys(MUTATIONS))('%s', (kind) => {
    let applied = 0;
    fc.assert(
      fc.property(arbHistory, fc.nat(), (events, r) => {
        const m = MUTATIONS[kind]!(events, statesOf(events), r);
        if (m === undefined) return;
        applied++;
        expect(rejection(m.events)).toEqual({ eventId: m.eventId, rule: m.rule });
      }),
      { numRuns: 150, seed: 42 },
    );
    expect(applied).toBeGreaterThan(10);
  });
});
