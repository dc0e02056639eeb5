/** Event builders for the store tests: the minimum each event needs, ids chosen by the caller. */
import type { HistoryEvent, TurnPolicy, WorkflowKind } from '../history/events.js';

export const POLICY: TurnPolicy = {
  turnTimeoutMs: 60_000,
  graceMs: 5_000,
  maxRecoveries: 3,
  maxWorkerCrashes: 2,
  steeringMaxQueued: 9,
  executor: 'inline',
  stepRetry: { maxAttempts: 3, initialIntervalMs: 100, backoffCoefficient: 2, maxIntervalMs: 1_000, nonRetryableTypes: [] },
};

const enc = new TextEncoder();
export const json = (v: unknown) => ({ metadata: { encoding: enc.encode('json/plain') }, data: enc.encode(JSON.stringify(v)) });

export function created(eventId = 1, opts: { workflow?: string; kind?: WorkflowKind; time?: number; generation?: number } = {}): HistoryEvent {
  return {
    type: 'TaskCreated',
    eventId,
    time: opts.time ?? 1_000,
    generation: opts.generation ?? 1,
    workflow: opts.workflow ?? 'wf',
    kind: opts.kind ?? 'one-shot',
    policy: POLICY,
    formatVersion: 1,
  };
}

export function queued(eventId: number, inputId: string, opts: { time?: number; generation?: number } = {}): HistoryEvent {
  return {
    type: 'InputQueued',
    eventId,
    time: opts.time ?? 1_000 + eventId,
    generation: opts.generation ?? 1,
    inputId,
    input: json({ inputId }),
    steering: false,
  };
}

export function started(eventId: number, turn: number, opts: { time?: number; generation?: number; instance?: string } = {}): HistoryEvent {
  const time = opts.time ?? 1_000 + eventId;
  return {
    type: 'TurnStarted',
    eventId,
    time,
    generation: opts.generation ?? 1,
    turn,
    attempt: 1,
    inputIds: [],
    entryMode: turn === 1 ? 'fresh' : 'resumed',
    steered: false,
    owner: 'engine',
    instance: opts.instance ?? 'i1',
    executor: 'inline',
    pid: 1,
    turnStartedAt: time,
    deadline: time + POLICY.turnTimeoutMs,
  };
}

export function step(eventId: number, seq: number, opts: { time?: number; generation?: number } = {}): HistoryEvent {
  return {
    type: 'StepCompleted',
    eventId,
    time: opts.time ?? 1_000 + eventId,
    generation: opts.generation ?? 1,
    turn: 1,
    attempt: 1,
    seq,
    name: `step-${seq}`,
    result: json(seq),
    durationMs: 1,
  };
}

export function turnCompleted(eventId: number, turn: number, opts: { time?: number; generation?: number } = {}): HistoryEvent {
  return { type: 'TurnCompleted', eventId, time: opts.time ?? 1_000 + eventId, generation: opts.generation ?? 1, turn, output: json('ok') };
}

export function taskCompleted(eventId: number, opts: { time?: number; generation?: number } = {}): HistoryEvent {
  return { type: 'TaskCompleted', eventId, time: opts.time ?? 1_000 + eventId, generation: opts.generation ?? 1, outcome: 'succeeded' };
}

/** `count` step events numbered from `first`. */
export function steps(first: number, count: number, generation = 1): HistoryEvent[] {
  return Array.from({ length: count }, (_, i) => step(first + i, first + i, { generation }));
}
