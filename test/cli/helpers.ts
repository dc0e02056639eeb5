/**
 * Small history builders for the CLI and history-file tests: dense event ids, fixed times,
 * every event type the timeline prints. No I/O here; tests append through the store API.
 */
import { defaultPayloadConverter } from '../../src/history/payload.js';
import type { HistoryEvent, NewEvent, TurnPolicy, WorkflowKind } from '../../src/history/events.js';
import { POLICY as STORE_POLICY } from '../../src/testing/store-events.js';

export const T0 = Date.UTC(2025, 0, 2, 3, 4, 5);

export const POLICY: TurnPolicy = {
  ...STORE_POLICY,
  executor: 'process',
  stepRetry: { ...STORE_POLICY.stepRetry, maxIntervalMs: 1000, nonRetryableTypes: ['TypeError'] },
};

export const p = (v: unknown) => defaultPayloadConverter.toPayload(v);

/** Numbers events densely from 1 and spaces their times 10 ms apart. */
export function number(events: NewEvent[], start = T0): HistoryEvent[] {
  return events.map((e, i) => ({ ...e, eventId: i + 1, time: start + i * 10 }) as HistoryEvent);
}

const base = { time: 0, generation: 1 };

function turnStarted(turn: number, attempt: number, inputIds: string[], entryMode: 'fresh' | 'resumed' | 'recovered', generation = 1): NewEvent {
  return {
    ...base,
    generation,
    type: 'TurnStarted',
    turn,
    attempt,
    inputIds,
    entryMode,
    steered: false,
    owner: 'engine-a',
    instance: `inst-${generation}`,
    executor: 'process',
    pid: 4242,
    turnStartedAt: T0 + 100,
    deadline: T0 + 100 + 60_000,
  };
}

/**
 * A multi-turn support-agent history: turn 1 with a recovery (exit for recovery, worker crash),
 * steps, a checkpoint, a steering input; turn 2 timed out after marker and kill; a queued input
 * left waiting. Status: suspended, one queued input.
 */
export function richHistory(): HistoryEvent[] {
  return number([
    { ...base, type: 'TaskCreated', workflow: 'support-agent', kind: 'multi-turn', policy: POLICY, formatVersion: 1 },
    { ...base, type: 'InputQueued', inputId: 'in-1', input: p({ text: 'my order #123 never arrived, please help me find it' }), steering: false },
    turnStarted(1, 1, ['in-1'], 'fresh'),
    { ...base, type: 'StepCompleted', turn: 1, attempt: 1, seq: 1, name: 'lookup-order', result: p({ order: 123, status: 'shipped' }), durationMs: 42 },
    { ...base, type: 'TurnExitedForRecovery', turn: 1, attempt: 1, reason: 'engine shutdown' },
    { ...base, generation: 2, type: 'LeaseClaimed', owner: 'engine-a', instance: 'inst-2', previousGeneration: 1, reason: 'recovery', expiresAt: T0 + 30_000 },
    turnStarted(1, 2, ['in-1'], 'recovered', 2),
    { ...base, generation: 2, type: 'WorkerCrashed', turn: 1, attempt: 2, pid: 4242, exitCode: null, signal: 'SIGSEGV', message: 'worker died' },
    turnStarted(1, 3, ['in-1'], 'recovered', 2),
    { ...base, generation: 2, type: 'InputQueued', inputId: 'in-2', input: p('also, the address changed'), steering: true },
    { ...base, generation: 2, type: 'InputsTaken', turn: 1, seq: 2, inputIds: ['in-2'] },
    { ...base, generation: 2, type: 'Checkpointed', turn: 1, seq: 3, data: p({ draft: 'Hello' }) },
    {
      ...base,
      generation: 2,
      type: 'StepCompleted',
      turn: 1,
      attempt: 3,
      seq: 4,
      name: 'call-llm',
      failure: { message: 'rate limited', type: 'RateLimitError', nonRetryable: true, code: 'LLM_429' },
      durationMs: 1500,
    },
    { ...base, generation: 2, type: 'TurnSuspended', turn: 1, reason: 'awaiting-user', output: p({ reply: 'Looking into it' }), state: p({ n: 1 }) },
    { ...base, generation: 2, type: 'InputQueued', inputId: 'in-3', input: p('any news?'), steering: false },
    turnStarted(2, 1, ['in-3'], 'resumed', 2),
    { ...base, generation: 2, type: 'TimeoutCancelRequested', turn: 2, at: T0 + 60_100, graceUntil: T0 + 65_100 },
    { ...base, generation: 2, type: 'WorkerKilled', turn: 2, pid: 4242, signal: 'SIGKILL', reason: 'hard cap' },
    { ...base, generation: 2, type: 'TurnTimedOut', turn: 2, cause: 'hard_cap' },
    { ...base, generation: 2, type: 'InputQueued', inputId: 'in-4', input: p('hello?'), steering: false },
    { ...base, generation: 2, type: 'InputWithdrawn', inputId: 'in-4', reason: 'duplicate' },
    { ...base, generation: 2, type: 'InputQueued', inputId: 'in-5', input: p(new Uint8Array([1, 2, 3])), steering: false },
  ] as NewEvent[]);
}

/** A one-shot task that completed with the given outcome. */
export function oneShotHistory(workflow = 'summarize', outcome: 'succeeded' | 'failed' | 'cancelled' = 'succeeded'): HistoryEvent[] {
  const end: NewEvent[] =
    outcome === 'succeeded'
      ? [{ ...base, type: 'TurnCompleted', turn: 1, output: p({ summary: 'ok' }) }]
      : outcome === 'failed'
        ? [{ ...base, type: 'TurnFailed', turn: 1, failure: { message: 'boom', type: 'Error', stack: 'Error: boom\n    at x' } }]
        : [
            { ...base, type: 'CancelRequested', scope: 'task', turn: 1, reason: 'user asked' },
            { ...base, type: 'TurnCancelled', turn: 1, reason: 'user asked' },
          ];
  return number([
    { ...base, type: 'TaskCreated', workflow, kind: 'one-shot' as WorkflowKind, policy: POLICY, formatVersion: 1 },
    { ...base, type: 'InputQueued', inputId: 'i1', input: p({ doc: 'x' }), steering: false },
    turnStarted(1, 1, ['i1'], 'fresh'),
    { ...base, type: 'StepCompleted', turn: 1, attempt: 1, seq: 1, name: 'fetch', result: p('data'), durationMs: 7 },
    ...end,
    { ...base, type: 'TaskCompleted', outcome },
  ] as NewEvent[]);
}

/** A task with an open turn and a live-looking lease: `why` must treat it as recoverable. */
export function openTurnHistory(): HistoryEvent[] {
  return number([
    { ...base, type: 'TaskCreated', workflow: 'summarize', kind: 'one-shot', policy: { ...POLICY, turnTimeoutMs: 10 * 365 * 86_400_000 }, formatVersion: 1 },
    { ...base, type: 'InputQueued', inputId: 'i1', input: p('x'), steering: false },
    { ...turnStarted(1, 1, ['i1'], 'fresh'), deadline: T0 + 10 * 365 * 86_400_000 } as NewEvent,
  ] as NewEvent[]);
}

/** `n` events: one long turn of steps (bench and progress tests). */
export function longHistory(n: number): HistoryEvent[] {
  const events: NewEvent[] = [
    { ...base, type: 'TaskCreated', workflow: 'long', kind: 'multi-turn', policy: POLICY, formatVersion: 1 },
    { ...base, type: 'InputQueued', inputId: 'i1', input: p('go'), steering: false },
    turnStarted(1, 1, ['i1'], 'fresh'),
  ];
  for (let s = 1; events.length < n - 1; s++) {
    events.push({ ...base, type: 'StepCompleted', turn: 1, attempt: 1, seq: s, name: `step-${s}`, result: p({ i: s, text: 'lorem ipsum dolor' }), durationMs: 3 });
  }
  events.push({ ...base, type: 'TurnSuspended', turn: 1, reason: 'done', output: p('ok') });
  return number(events);
}
