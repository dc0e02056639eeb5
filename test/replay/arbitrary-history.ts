/**
 * fast-check arbitraries for VALID histories: a small simulator of a legal engine plays a random
 * sequence of creates, inputs, withdrawals, turns with steps/checkpoints/takes, crashes,
 * exits for recovery, recoveries, markers, cancels, kills, lease claims and terminals.
 * Randomness is a list of integers (shrinkable); the simulation is deterministic from it.
 */
import fc from 'fast-check';
import type { HistoryEvent, Lease, TurnPolicy, WorkflowKind } from '../../src/history/events.js';
import type { TaskState } from '../../src/history/state.js';
import { withStateDelta } from '../../src/history/state-delta.js';
import { fold } from '../../src/replay/fold.js';
import { historyBuilder, T0 } from '../../src/testing/history-builder.js';

export interface SimInput {
  kind: WorkflowKind;
  policy: Partial<TurnPolicy>;
  choices: number[];
  /** A long conversation: no cancels or task completion, terminals with state at every turn end. */
  chatty?: boolean;
}

type Action =
  | 'input'
  | 'withdraw'
  | 'lease'
  | 'cancel-task'
  | 'cancel-turn'
  | 'start'
  | 'complete-cancelled'
  | 'complete-task'
  | 'step'
  | 'step-fail'
  | 'checkpoint'
  | 'take'
  | 'marker'
  | 'crash'
  | 'exit'
  | 'recover'
  | 'completed'
  | 'failed'
  | 'suspended'
  | 'cancelled'
  | 'timed-out'
  | 'kill';

/** Plays `choices` against a legal engine model; returns the history it wrote. */
export function simulate(input: SimInput): HistoryEvent[] {
  const b = historyBuilder('sim', { tick: 250 });
  b.created({ kind: input.kind, policy: input.policy });
  const oneShot = input.kind === 'one-shot';
  let completed = false;
  let taskCancel = false;
  let turnCancel = false;
  let marker = false;
  let running = false;
  let open = false;
  let turns = 0;
  // A chat kept in state (the README's pattern): it grows by the turn's input and step results,
  // and sometimes changes in place, so terminals carry states that deltas can encode.
  let chat: unknown[] = [];
  let turnMessages: unknown[] = [];
  const chatState = (c: number): unknown => {
    if (c % 11 === 0 && chat.length > 0) chat[c % chat.length] = { edited: c };
    else if (c % 13 === 0) chat = chat.slice(1);
    chat = chat.concat(turnMessages);
    return c % 17 === 0 ? undefined : { title: `chat ${c % 3}`, messages: chat };
  };

  for (const c of input.choices) {
    if (completed) break;
    const queued = b.queued.length;
    const acts: Action[] = [];
    if (queued < 9) acts.push('input', 'input');
    if (queued > 0) acts.push('withdraw');
    // Rarer actions are gated on the choice itself, so long turns still happen.
    if (c % 3 === 0) acts.push('lease');
    if (!taskCancel && c % 7 === 0) acts.push('cancel-task');
    if (!open) {
      if (taskCancel) acts.push('complete-cancelled', 'complete-cancelled');
      else {
        if (queued > 0 && !(oneShot && turns > 0)) acts.push('start', 'start', 'start');
        if (!oneShot && turns > 0) acts.push('complete-task');
      }
    } else {
      if (!turnCancel && c % 5 === 0) acts.push('cancel-turn');
      if (running) {
        acts.push('step', 'step', 'step', 'step', 'step', 'step', 'step-fail', 'checkpoint', 'checkpoint', 'crash', 'exit');
        if (c % 2 === 0) acts.push('completed', 'completed', 'failed', 'suspended', 'timed-out', 'kill');
        if (queued > 0) acts.push('take');
        if (!marker) acts.push('marker');
      }
      // An engine crash writes nothing, so a running attempt may also be re-run by a new owner.
      if (!marker && !turnCancel && !taskCancel) acts.push('recover', 'recover');
      if (c % 4 === 0) acts.push('cancelled');
    }
    if (input.chatty) {
      if (running) acts.push('completed', 'suspended', 'completed', 'suspended');
      for (const no of ['cancel-task', 'cancel-turn', 'complete-task'] as const) {
        const k = acts.indexOf(no);
        if (k >= 0) acts.splice(k, 1);
      }
    }
    const act = acts[c % acts.length]!;
    b.advance(Math.floor(c / acts.length) % 20_000);
    const endTurn = (): void => {
      open = false;
      running = false;
      marker = false;
      turnCancel = false;
      if (oneShot || taskCancel) completed = true;
    };
    // A pending task cancel completes the task as cancelled whatever ends the turn.
    const term = taskCancel ? { completeTask: 'cancelled' as const } : {};
    switch (act) {
      case 'input':
        b.input({ n: c % 100 });
        break;
      case 'withdraw':
        b.withdraw(b.queued[c % queued]);
        break;
      case 'lease':
        b.leaseClaimed({ owner: c % 2 === 0 ? 'engine-a' : 'engine-b' });
        break;
      case 'cancel-task':
        b.cancel('task', 'stop');
        taskCancel = true;
        break;
      case 'cancel-turn':
        b.cancel('turn', 'skip');
        turnCancel = true;
        break;
      case 'start':
        turnMessages = [{ role: 'user', text: `${'question '.repeat(4 + (c % 5))}${c}` }];
        b.turnStarted();
        turns++;
        open = true;
        running = true;
        break;
      case 'complete-cancelled':
        b.taskCompleted('cancelled');
        completed = true;
        break;
      case 'complete-task':
        b.taskCompleted('succeeded');
        completed = true;
        break;
      case 'step': {
        const reply = { role: 'assistant', text: `${'answer '.repeat(5 + (c % 7))}${c}`, v: c % 1000 };
        turnMessages.push(reply);
        b.step(`s${c % 7}`, reply);
        break;
      }
      case 'step-fail':
        b.step(`s${c % 7}`, null, { failure: { message: 'nope', type: 'TypeError', nonRetryable: true } });
        break;
      case 'checkpoint':
        b.checkpoint({ at: c % 1000 });
        break;
      case 'take':
        b.take(b.queued.slice(0, 1 + (c % queued)));
        break;
      case 'marker':
        b.marker();
        marker = true;
        break;
      case 'crash':
        b.crashed({ exitCode: c % 3 === 0 ? null : 1, signal: c % 3 === 0 ? 'SIGSEGV' : null });
        running = false;
        break;
      case 'exit':
        b.exitedForRecovery('shutdown');
        running = false;
        break;
      case 'recover':
        b.recovered({ instance: `inst-${c % 5}` });
        running = true;
        break;
      case 'completed':
        b.completed({ out: c % 50 }, { ...term, state: c % 2 === 0 || input.chatty ? chatState(c) : undefined });
        endTurn();
        break;
      case 'failed':
        b.failed({ message: 'boom', type: 'Error', stack: 'Error: boom\n    at x' }, term);
        endTurn();
        break;
      case 'suspended':
        b.suspended('waiting', { ...term, output: { o: 1 }, state: chatState(c) });
        endTurn();
        break;
      case 'cancelled':
        b.cancelled('cancelled', term);
        endTurn();
        break;
      case 'timed-out':
        b.timedOut(marker ? 'cooperative' : 'hard_cap', term);
        endTurn();
        break;
      case 'kill':
        b.killed();
        b.timedOut('hard_cap', term);
        endTurn();
        break;
    }
  }
  return b.build();
}

export const arbSimInput: fc.Arbitrary<SimInput> = fc.record({
  kind: fc.constantFrom<WorkflowKind>('one-shot', 'multi-turn'),
  policy: fc.record({
    turnTimeoutMs: fc.integer({ min: 1_000, max: 120_000 }),
    maxRecoveries: fc.integer({ min: 0, max: 3 }),
    maxWorkerCrashes: fc.integer({ min: 0, max: 2 }),
  }),
  choices: fc.array(fc.nat({ max: 1 << 24 }), { minLength: 3, maxLength: 120 }),
});

/** A long multi-turn conversation whose turns end with a growing chat state (state deltas). */
export const arbChatHistory: fc.Arbitrary<HistoryEvent[]> = fc
  .array(fc.nat({ max: 1 << 24 }), { minLength: 20, maxLength: 200 })
  .map((choices) => simulate({ kind: 'multi-turn', policy: { maxRecoveries: 3, maxWorkerCrashes: 2 }, choices, chatty: true }));

/** A valid history (at least the TaskCreated event). */
export const arbHistory: fc.Arbitrary<HistoryEvent[]> = arbSimInput.map(simulate);

/** A lease that may be absent, live or expired relative to `now`, and a `now` near the history. */
export const arbLeaseNow: fc.Arbitrary<{ lease: Lease | undefined; now: number }> = fc
  .record({
    now: fc.integer({ min: T0, max: T0 + 3_000_000 }),
    lease: fc.option(
      fc.record({
        owner: fc.constantFrom('engine-a', 'engine-b'),
        instance: fc.constantFrom('i-1', 'i-2'),
        generation: fc.integer({ min: 1, max: 50 }),
        expiresIn: fc.integer({ min: -60_000, max: 60_000 }),
      }),
      { nil: undefined },
    ),
  })
  .map(({ now, lease }) => ({
    now,
    lease: lease === undefined ? undefined : { owner: lease.owner, instance: lease.instance, generation: lease.generation, expiresAt: now + lease.expiresIn },
  }));

/** The history as the engine writes it in format 2: each terminal's state as a delta when smaller. */
export function withDeltas(events: readonly HistoryEvent[]): HistoryEvent[] {
  const out: HistoryEvent[] = [];
  let s: TaskState | undefined;
  for (const e of events) {
    const d = s === undefined ? e : withStateDelta(s, e);
    out.push(d);
    s = fold('sim', [d], s);
  }
  return out;
}
