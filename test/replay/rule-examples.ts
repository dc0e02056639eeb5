/**
 * One example history per decision rule (and per variant worth showing). The table test checks
 * each decision; docs/recovery.md is generated from the same examples by recovery-doc.test.ts.
 */
import type { HistoryEvent, Lease } from '../../src/history/events.js';
import type { Decision } from '../../src/replay/decision.js';
import { historyBuilder, T0 } from '../../src/testing/history-builder.js';

export interface RuleExample {
  name: string;
  /** One line for the docs: what the history shows. */
  story: string;
  events: HistoryEvent[];
  lease: Lease | undefined;
  now: number;
  expected: Decision extends infer D ? (D extends Decision ? Partial<D> : never) : never;
}

const MIN = 60_000;
const live = (now: number): Lease => ({ owner: 'engine-a', instance: 'engine-a-1', generation: 1, expiresAt: now + 30_000 });
const dead = (now: number): Lease => ({ owner: 'engine-a', instance: 'engine-a-1', generation: 1, expiresAt: now - 1 });

const multi = () => historyBuilder('task-1').created({ workflow: 'support-agent', kind: 'multi-turn' });
/** Turn 1 ended, then an input scheduled for one day after T0. */
const reminder = () => multi().input('q1').turnStarted().suspended('waiting').input('standup reminder', { deliverAt: T0 + 86_400_000 }).build();
const oneShot = () => historyBuilder('task-1').created({ workflow: 'summarize', kind: 'one-shot' });

export const RULE_EXAMPLES: RuleExample[] = [
  {
    name: 'completed',
    story: 'A one-shot task whose turn completed (TurnCompleted + TaskCompleted in one batch).',
    events: oneShot().input('hi').turnStarted().step('llm', 'hello').completed('hello').build(),
    lease: undefined,
    now: T0 + 10_000,
    expected: { kind: 'none', rule: 'completed' },
  },
  {
    name: 'cancel-requested (no open turn)',
    story: 'A multi-turn task between turns; the caller cancels the task.',
    events: multi().input('q1').turnStarted().completed('a1').cancel('task', 'user closed the chat').build(),
    lease: undefined,
    now: T0 + 10_000,
    expected: { kind: 'complete-task', rule: 'cancel-requested', outcome: 'cancelled' },
  },
  {
    name: 'cancel-requested (open turn)',
    story: 'A multi-turn turn is running when its cancel is requested; the engine died before the handler ended.',
    events: multi().input('q1').turnStarted().step('llm', 'partial').cancel('turn', 'user pressed stop').build(),
    lease: dead(T0 + 10_000),
    now: T0 + 10_000,
    expected: { kind: 'finalize-turn', rule: 'cancel-requested', terminal: 'TurnCancelled', turn: 1 },
  },
  {
    name: 'owned',
    story: 'A turn is running under a live lease of another instance.',
    events: multi().input('q1').turnStarted().step('llm', 'partial').build(),
    lease: live(T0 + 10_000),
    now: T0 + 10_000,
    expected: { kind: 'none', rule: 'owned' },
  },
  {
    name: 'marker',
    story: 'The turn timed out, the marker was appended, then the engine died during the grace.',
    events: oneShot().input('hi').turnStarted().step('llm', 'x').at(T0 + MIN + 1_000).marker().build(),
    lease: undefined,
    now: T0 + MIN + 2_000,
    expected: { kind: 'finalize-turn', rule: 'marker', terminal: 'TurnTimedOut', cause: 'recovery_marker', completeTask: 'timed_out' },
  },
  {
    name: 'backstop',
    story: 'The engine died mid-turn and came back after the turn deadline; no marker was written.',
    events: multi().input('q1').turnStarted().step('llm', 'x').build(),
    lease: undefined,
    now: T0 + 2 * MIN,
    expected: { kind: 'finalize-turn', rule: 'backstop', terminal: 'TurnTimedOut', cause: 'recovery_backstop' },
  },
  {
    name: 'worker-crashes-exhausted',
    story: 'The turn\'s worker process crashed three times (maxWorkerCrashes 2).',
    events: oneShot()
      .input('hi')
      .turnStarted({ executor: 'process' })
      .crashed({ exitCode: null, signal: 'SIGSEGV' })
      .recovered({ executor: 'process' })
      .crashed({ exitCode: null, signal: 'SIGSEGV' })
      .recovered({ executor: 'process' })
      .crashed({ exitCode: null, signal: 'SIGSEGV' })
      .build(),
    lease: undefined,
    now: T0 + 20_000,
    expected: { kind: 'finalize-turn', rule: 'worker-crashes-exhausted', terminal: 'TurnFailed', completeTask: 'failed' },
  },
  {
    name: 'recoveries-exhausted',
    story: 'The turn was re-run three times after engine restarts (maxRecoveries 3); the fourth attempt died too.',
    events: multi().input('q1').turnStarted().exitedForRecovery().recovered().exitedForRecovery().recovered().recovered().build(),
    lease: undefined,
    now: T0 + 20_000,
    expected: { kind: 'finalize-turn', rule: 'recoveries-exhausted', terminal: 'TurnFailed', turn: 1 },
  },
  {
    name: 'recover',
    story: 'The engine shut down mid-turn (exit for recovery) after two steps; a new engine starts.',
    events: multi().input('q1').turnStarted().step('search', ['a', 'b']).step('llm', 'draft').exitedForRecovery('shutdown').build(),
    lease: undefined,
    now: T0 + 10_000,
    expected: { kind: 'rerun', rule: 'recover', turn: 1, attempt: 2 },
  },
  {
    name: 'queued-input (fresh)',
    story: 'A created task with its first input queued.',
    events: multi().input('q1').build(),
    lease: undefined,
    now: T0 + 5_000,
    expected: { kind: 'start-turn', rule: 'queued-input', turn: 1, inputIds: ['in-1'], entryMode: 'fresh', steered: false },
  },
  {
    name: 'queued-input (resumed, steered)',
    story: 'A steering input arrived during turn 1; turn 1 has ended.',
    events: multi().input('q1').turnStarted().input('actually, in French').completed('a1').build(),
    lease: undefined,
    now: T0 + 10_000,
    expected: { kind: 'start-turn', rule: 'queued-input', turn: 2, inputIds: ['in-2'], entryMode: 'resumed', steered: true },
  },
  {
    name: 'timer-due',
    story: 'Turn 1 ended; a reminder was sent with deliverAt one day later, and that time has come.',
    events: reminder(),
    lease: undefined,
    now: T0 + 86_400_000,
    expected: { kind: 'start-turn', rule: 'timer-due', turn: 2, inputIds: ['in-2'], entryMode: 'resumed', steered: false },
  },
  {
    name: 'waiting-for-timer',
    story: 'The same task an hour after the reminder was sent: only a scheduled input is queued, not yet due.',
    events: reminder(),
    lease: undefined,
    now: T0 + 3_600_000,
    expected: { kind: 'none', rule: 'waiting-for-timer', wakeAt: T0 + 86_400_000 },
  },
  {
    name: 'suspended',
    story: 'A multi-turn task whose turn ended, waiting for input.',
    events: multi().input('q1').turnStarted().suspended('waiting for the user', { output: 'a1' }).build(),
    lease: undefined,
    now: T0 + 10_000,
    expected: { kind: 'none', rule: 'suspended' },
  },
  {
    name: 'pending',
    story: 'A created task with no input yet.',
    events: multi().build(),
    lease: undefined,
    now: T0 + 1_000,
    expected: { kind: 'none', rule: 'pending' },
  },
];
