/**
 * The fold: a task's history → its {@link TaskState}. Pure and incremental; every event is
 * validated against the history invariants before it is applied (docs/recovery.md#validation).
 */
import { HistoryInvariantError } from '../errors.js';
import type { HistoryEvent, TurnTerminalEvent } from '../history/events.js';
import type { ChildOutcome, OpenTurn, QueuedInput, TaskState, WaitOutcome } from '../history/state.js';
import { applyStateDelta, turnSources, withFullState } from '../history/state-delta.js';
import { decodeState } from '../history/state-codec.js';

/**
 * How many events the engine folds at a time when it loads a stored history (runtime/task-cache):
 * a page's decoded events die young, so even a long history without a snapshot is collected by
 * scavenges instead of being promoted and mark-compacted whole (bench/replay, decode + fold).
 * Above the engine's snapshot cadence (1,000), so a task's tail is one read.
 */
export const FOLD_PAGE = 2_048;

/**
 * Folds `events` into a task state. With `from`, continues from that state (a snapshot), so
 * `fold(id, tail, fold(id, prefix))` deep-equals `fold(id, prefix.concat(tail))`.
 * `from` is never mutated (with no events, `from` itself is returned). A history that breaks an invariant throws
 * {@link HistoryInvariantError} naming the first offending event; nothing is folded silently.
 *
 * @example
 * const state = fold('task-1', await store.read('task-1'));
 * const next = fold('task-1', newEvents, state); // incremental
 */
export function fold(taskId: string, events: readonly HistoryEvent[], from?: TaskState): TaskState {
  let s: TaskState;
  let i = 0;
  if (from === undefined) {
    const first = events[0];
    if (first === undefined) {
      throw new HistoryInvariantError(taskId, 0, 'first-event-task-created', 'the history is empty');
    }
    if (first.type !== 'TaskCreated') {
      throw new HistoryInvariantError(
        taskId,
        first.eventId,
        'first-event-task-created',
        `the first event is ${first.type}, expected TaskCreated`,
      );
    }
    if (first.eventId !== 1) {
      throw new HistoryInvariantError(taskId, first.eventId, 'event-id-dense', `expected event id 1, got ${first.eventId}`);
    }
    s = {
      taskId,
      workflow: first.workflow,
      kind: first.kind,
      policy: first.policy,
      formatVersion: first.formatVersion,
      createdAt: first.time,
      updatedAt: first.time,
      lastEventId: 1,
      highestGeneration: first.generation,
      status: 'pending',
      turn: 0,
      queue: [],
      recoveryCount: 0,
      workerCrashCount: 0,
    };
    if (first.parent !== undefined) s.parent = first.parent;
    i = 1;
  } else {
    if (events.length === 0) return from;
    s = cloneState(from);
  }
  for (; i < events.length; i++) apply(s, events[i]!);
  // A field the fold ended (turn ended, cancel done, signals taken) is left undefined, never
  // deleted: `delete` turns the state into a dictionary-mode object in V8 (~800 bytes more, and
  // slow to read), and every finished task kept one (heap snapshot after recovering 10,000 tasks:
  // 8.7 of 59 MB). One field copy drops the undefined slots instead.
  return withoutEnded(s);
}

/**
 * `events` with every state delta replaced by the full state it describes (format 2 → the
 * format-1 shape), for readers that look at a terminal's `state` on its own (replay testing).
 * Returns a copy of `events`; events without a delta are shared.
 */
export function withFullStates(taskId: string, events: readonly HistoryEvent[]): HistoryEvent[] {
  if (!events.some((e) => (e.type === 'TurnCompleted' || e.type === 'TurnSuspended' || e.type === 'StateMigrated') && e.stateDelta !== undefined)) return events.slice();
  const out: HistoryEvent[] = [];
  let s: TaskState | undefined;
  for (const e of events) {
    const full = s === undefined ? e : withFullState(s, e);
    out.push(full);
    s = fold(taskId, [e], s);
  }
  return out;
}

/**
 * Copy-on-write, once per fold call: the arrays and objects the fold mutates are copied;
 * immutable leaves (payloads, recorded calls, queued inputs) are shared with `from`.
 */
// Field by field, not `{ ...from }`: a spread over TaskState's optional-field variants is
// megamorphic in V8 (µs per fold, the engine's top cost). A new field must be added here;
// the incremental-equals-full fold property test fails if one is dropped.
/** @internal Exported for its field-list test (test/replay/clone-state.test.ts). */
export function cloneState(from: TaskState, copy = true): TaskState {
  const s: TaskState = {
    taskId: from.taskId,
    workflow: from.workflow,
    kind: from.kind,
    policy: from.policy,
    formatVersion: from.formatVersion,
    createdAt: from.createdAt,
    updatedAt: from.updatedAt,
    lastEventId: from.lastEventId,
    highestGeneration: from.highestGeneration,
    status: from.status,
    turn: from.turn,
    queue: copy ? from.queue.slice() : from.queue,
    recoveryCount: from.recoveryCount,
    workerCrashCount: from.workerCrashCount,
  };
  if (from.outcome !== undefined) s.outcome = from.outcome;
  if (from.openTurn !== undefined) s.openTurn = copy ? cloneOpenTurn(from.openTurn) : from.openTurn;
  if (from.lastOutput !== undefined) s.lastOutput = from.lastOutput;
  if (from.state !== undefined) s.state = from.state;
  if (from.lastFailure !== undefined) s.lastFailure = from.lastFailure;
  if (from.lastTurn !== undefined) s.lastTurn = from.lastTurn;
  if (from.cancelRequested !== undefined) s.cancelRequested = from.cancelRequested;
  if (from.lastInputId !== undefined) s.lastInputId = from.lastInputId;
  if (from.stateVersion !== undefined) s.stateVersion = from.stateVersion;
  if (from.parent !== undefined) s.parent = from.parent;
  // Shared: the fold replaces the array (never mutates it) when a child starts or ends.
  if (from.children !== undefined) s.children = from.children;
  if (from.signals !== undefined) s.signals = copy ? from.signals.slice() : from.signals;
  return s;
}

/** `s` without the optional fields the fold left undefined (`s` itself when there are none). */
function withoutEnded(s: TaskState): TaskState {
  const ended = (s.openTurn === undefined && 'openTurn' in s) || (s.cancelRequested === undefined && 'cancelRequested' in s) || (s.signals === undefined && 'signals' in s);
  return ended ? cloneState(s, false) : s;
}

/** Ends an optional field of the state being folded (see {@link withoutEnded}). */
function end(s: TaskState, field: 'openTurn' | 'cancelRequested' | 'signals'): void {
  (s as { [k in typeof field]?: unknown })[field] = undefined;
}

function cloneOpenTurn(t: OpenTurn): OpenTurn {
  const o: OpenTurn = {
    turn: t.turn,
    attempt: t.attempt,
    attemptRunning: t.attemptRunning,
    inputIds: t.inputIds.slice(),
    inputs: t.inputs.slice(),
    entryMode: t.entryMode,
    steered: t.steered,
    turnStartedAt: t.turnStartedAt,
    deadline: t.deadline,
    executor: t.executor,
    owner: t.owner,
    instance: t.instance,
    startedEventId: t.startedEventId,
    calls: t.calls.slice(),
    taken: t.taken.slice(),
    workerCrashes: t.workerCrashes,
  };
  if (t.checkpoint !== undefined) o.checkpoint = t.checkpoint;
  if (t.marker !== undefined) o.marker = t.marker;
  if (t.cancelRequested !== undefined) o.cancelRequested = t.cancelRequested;
  if (t.workflowVersion !== undefined) o.workflowVersion = t.workflowVersion;
  return o;
}

function fail(s: TaskState, e: HistoryEvent, rule: string, detail: string): never {
  throw new HistoryInvariantError(s.taskId, e.eventId, rule, detail);
}

/** The open turn an event names, or an invariant error explaining why there is none. */
function openTurnFor(s: TaskState, e: HistoryEvent & { turn: number }): OpenTurn {
  const t = s.openTurn;
  if (t !== undefined && t.turn === e.turn) return t;
  if (t === undefined && s.lastTurn !== undefined && s.lastTurn.turn === e.turn) {
    // The turn existed and ended: a terminal is a second terminal, anything else came too late.
    if (e.type === 'TurnCompleted' || e.type === 'TurnFailed' || e.type === 'TurnSuspended' || e.type === 'TurnCancelled' || e.type === 'TurnTimedOut') {
      fail(s, e, 'one-terminal-per-turn', `turn ${e.turn} already ended with ${s.lastTurn.terminal} at event ${s.lastTurn.eventId}`);
    }
    fail(s, e, 'step-after-terminal', `${e.type} for turn ${e.turn}, which ended with ${s.lastTurn.terminal} at event ${s.lastTurn.eventId}`);
  }
  const open = t === undefined ? 'no turn is open' : `the open turn is ${t.turn}`;
  return fail(s, e, 'turn-not-open', `${e.type} for turn ${e.turn}, but ${open}`);
}

function requireRunning(s: TaskState, t: OpenTurn, e: HistoryEvent): void {
  if (!t.attemptRunning) {
    fail(s, e, 'attempt-not-running', `${e.type} for turn ${t.turn} after attempt ${t.attempt} ended without a terminal`);
  }
}

function nextSeq(s: TaskState, t: OpenTurn, e: HistoryEvent & { seq: number }): void {
  const expected = t.calls.length + 1;
  if (e.seq !== expected) fail(s, e, 'seq-order', `turn ${t.turn} expected call seq ${expected}, got ${e.seq}`);
}

/** Removes `ids` from the queue in the order given; every id must be queued. */
function takeFromQueue(s: TaskState, e: HistoryEvent, ids: readonly string[]): QueuedInput[] {
  const out: QueuedInput[] = [];
  for (const id of ids) {
    const k = s.queue.findIndex((q) => q.inputId === id);
    if (k < 0) fail(s, e, 'unknown-input', `input ${id} is not queued`);
    out.push(s.queue[k]!);
    s.queue.splice(k, 1);
  }
  return out;
}

function apply(s: TaskState, e: HistoryEvent): void {
  if (e.eventId !== s.lastEventId + 1) {
    const what = e.eventId <= s.lastEventId ? 'duplicate' : 'gap';
    fail(s, e, 'event-id-dense', `${what}: expected event id ${s.lastEventId + 1}, got ${e.eventId}`);
  }
  if (e.generation < s.highestGeneration) {
    fail(s, e, 'generation-monotonic', `generation ${e.generation} is below ${s.highestGeneration}, already seen`);
  }
  if (s.status === 'completed') fail(s, e, 'after-task-completed', `${e.type} after TaskCompleted(${s.outcome})`);

  switch (e.type) {
    case 'TaskCreated':
      return fail(s, e, 'task-created-once', 'TaskCreated is already event 1');
    case 'InputQueued':
      if (s.queue.some((q) => q.inputId === e.inputId)) fail(s, e, 'duplicate-input', `input ${e.inputId} is already queued`);
      s.queue.push({
        inputId: e.inputId,
        input: e.input,
        steering: e.steering,
        eventId: e.eventId,
        time: e.time,
        ...(e.deliverAt === undefined ? {} : { deliverAt: e.deliverAt }),
        ...(e.trace === undefined ? {} : { trace: e.trace }),
      });
      s.lastInputId = e.inputId;
      break;
    case 'InputWithdrawn':
      takeFromQueue(s, e, [e.inputId]);
      break;
    case 'OperatorAction':
      // A record of who acted; the action's effect is its own events (docs/cli.md#operator-actions).
      break;
    case 'TurnStarted':
      turnStarted(s, e);
      break;
    case 'StateMigrated':
      stateMigrated(s, e);
      break;
    case 'StepCompleted': {
      const t = openTurnFor(s, e);
      requireRunning(s, t, e);
      if (e.attempt !== t.attempt) fail(s, e, 'step-attempt', `step of attempt ${e.attempt}, but attempt ${t.attempt} is running`);
      nextSeq(s, t, e);
      const call: OpenTurn['calls'][number] = {
        kind: 'step',
        seq: e.seq,
        name: e.name,
        eventId: e.eventId,
        attempt: e.attempt,
        durationMs: e.durationMs,
      };
      if (e.result !== undefined) call.result = e.result;
      if (e.failure !== undefined) call.failure = e.failure;
      t.calls.push(call);
      break;
    }
    case 'InputsTaken': {
      const t = openTurnFor(s, e);
      requireRunning(s, t, e);
      nextSeq(s, t, e);
      for (const q of takeFromQueue(s, e, e.inputIds)) t.taken.push(q);
      t.calls.push({ kind: 'take-inputs', seq: e.seq, eventId: e.eventId, inputIds: e.inputIds.slice() });
      break;
    }
    case 'TimerStarted': {
      const t = openTurnFor(s, e);
      requireRunning(s, t, e);
      nextSeq(s, t, e);
      t.calls.push({ kind: 'sleep', seq: e.seq, eventId: e.eventId, durationMs: e.durationMs, fireAt: e.fireAt });
      break;
    }
    case 'ChildStarted': {
      const t = openTurnFor(s, e);
      requireRunning(s, t, e);
      nextSeq(s, t, e);
      if (s.children?.some((c) => c.childId === e.childId)) fail(s, e, 'duplicate-child', `child ${e.childId} was already started`);
      t.calls.push({ kind: 'child', seq: e.seq, eventId: e.eventId, op: 'start', childId: e.childId, workflow: e.workflow, detached: e.detached });
      s.children = [...(s.children ?? []), { childId: e.childId, workflow: e.workflow, turn: e.turn, seq: e.seq, detached: e.detached }];
      break;
    }
    case 'ChildEnded': {
      const t = openTurnFor(s, e);
      requireRunning(s, t, e);
      nextSeq(s, t, e);
      const k = s.children?.findIndex((c) => c.childId === e.childId) ?? -1;
      if (k < 0) fail(s, e, 'unknown-child', `child ${e.childId} was never started by this task`);
      const outcome: ChildOutcome = { status: e.status };
      if (e.output !== undefined) outcome.output = e.output;
      if (e.failure !== undefined) outcome.failure = e.failure;
      if (e.reason !== undefined) outcome.reason = e.reason;
      t.calls.push({ kind: 'child', seq: e.seq, eventId: e.eventId, op: 'await', childId: e.childId, outcome });
      s.children = s.children!.map((c, i) => (i === k ? { ...c, status: e.status } : c));
      break;
    }
    case 'SignalReceived':
      if (s.signals?.some((x) => x.signalId === e.signalId)) fail(s, e, 'duplicate-signal', `signal ${e.signalId} is already buffered`);
      (s.signals ??= []).push({ signalId: e.signalId, name: e.name, value: e.value, eventId: e.eventId, time: e.time });
      break;
    case 'WaitStarted': {
      const t = openTurnFor(s, e);
      requireRunning(s, t, e);
      nextSeq(s, t, e);
      const call: OpenTurn['calls'][number] = { kind: 'wait', seq: e.seq, eventId: e.eventId, name: e.name };
      if (e.timeoutMs !== undefined) call.timeoutMs = e.timeoutMs;
      if (e.deadline !== undefined) call.deadline = e.deadline;
      t.calls.push(call);
      break;
    }
    case 'WaitEnded':
      waitEnded(s, e);
      break;
    case 'Checkpointed': {
      const t = openTurnFor(s, e);
      requireRunning(s, t, e);
      nextSeq(s, t, e);
      t.calls.push({ kind: 'checkpoint', seq: e.seq, eventId: e.eventId, data: e.data });
      t.checkpoint = e.data;
      break;
    }
    case 'PatchMarked': {
      const t = openTurnFor(s, e);
      requireRunning(s, t, e);
      nextSeq(s, t, e);
      t.calls.push({ kind: 'patch', seq: e.seq, eventId: e.eventId, patchId: e.patchId, deprecated: e.deprecated });
      break;
    }
    case 'TimeoutCancelRequested': {
      const t = openTurnFor(s, e);
      // The first marker is the one that counts (non-resurrection); a repeat changes nothing.
      if (t.marker === undefined) t.marker = { at: e.at, graceUntil: e.graceUntil, eventId: e.eventId };
      break;
    }
    case 'CancelRequested': {
      const req = { scope: e.scope, reason: e.reason, eventId: e.eventId };
      const t = s.openTurn;
      if (t !== undefined && (e.scope === 'task' || e.turn === t.turn)) {
        // A task-scoped cancel upgrades a pending turn-scoped one; otherwise the first wins.
        if (t.cancelRequested === undefined || (e.scope === 'task' && t.cancelRequested.scope === 'turn')) {
          t.cancelRequested = req;
        }
      } else if (e.scope === 'task') {
        if (s.cancelRequested === undefined) s.cancelRequested = req;
      }
      // A turn-scoped cancel for a turn that already ended has nothing left to cancel.
      break;
    }
    case 'WorkerKilled':
      openTurnFor(s, e);
      break;
    case 'WorkerCrashed': {
      const t = openTurnFor(s, e);
      requireRunning(s, t, e);
      if (e.attempt !== t.attempt) fail(s, e, 'step-attempt', `crash of attempt ${e.attempt}, but attempt ${t.attempt} is running`);
      t.attemptRunning = false;
      t.workerCrashes++;
      s.workerCrashCount++;
      break;
    }
    case 'TurnExitedForRecovery': {
      const t = openTurnFor(s, e);
      requireRunning(s, t, e);
      if (e.attempt !== t.attempt) fail(s, e, 'step-attempt', `exit of attempt ${e.attempt}, but attempt ${t.attempt} is running`);
      t.attemptRunning = false;
      break;
    }
    case 'TurnCompleted':
    case 'TurnFailed':
    case 'TurnSuspended':
    case 'TurnCancelled':
    case 'TurnTimedOut':
      turnEnded(s, e);
      break;
    case 'LeaseClaimed':
      break;
    case 'HistoryCompacted':
      historyCompacted(s, e);
      s.highestGeneration = e.generation;
      s.updatedAt = e.time;
      return;
    case 'TaskCompleted':
      if (s.openTurn !== undefined) {
        fail(s, e, 'turn-open-at-completion', `turn ${s.openTurn.turn} is open; it needs its terminal event first`);
      }
      s.status = 'completed';
      s.outcome = e.outcome;
      end(s, 'cancelRequested');
      break;
  }
  s.lastEventId = e.eventId;
  s.updatedAt = e.time;
  s.highestGeneration = e.generation;
}

/** A wait ends once, in the attempt that runs it; the signal it took leaves the buffer. */
function waitEnded(s: TaskState, e: Extract<HistoryEvent, { type: 'WaitEnded' }>): void {
  const t = openTurnFor(s, e);
  requireRunning(s, t, e);
  const k = t.calls.findIndex((c) => c.seq === e.seq);
  const call = t.calls[k];
  if (call?.kind !== 'wait') return fail(s, e, 'wait-ended', `call ${e.seq} of turn ${t.turn} is not a wait`);
  if (call.ended) fail(s, e, 'wait-ended', `the wait at ${e.seq} already ended (event ${call.ended.eventId})`);
  if (e.timedOut === (e.signalId !== '')) fail(s, e, 'wait-ended', 'a wait ends with exactly one of a signal and its timeout');
  const ended: WaitOutcome = { signalId: e.signalId, timedOut: e.timedOut, eventId: e.eventId };
  if (!e.timedOut) {
    const i = s.signals?.findIndex((x) => x.signalId === e.signalId) ?? -1;
    const sig = s.signals?.[i];
    if (sig === undefined || sig.name !== call.name) fail(s, e, 'wait-ended', `signal ${e.signalId} named "${call.name}" is not buffered`);
    s.signals!.splice(i, 1);
    if (s.signals!.length === 0) end(s, 'signals');
    ended.value = sig!.value;
  }
  // Recorded calls are shared with the state folded from: replaced, never changed in place.
  t.calls[k] = { ...call, ended };
}

/** Compaction: event 2 stands for events 2..throughEventId; the state there is in the event. */
function historyCompacted(s: TaskState, e: Extract<HistoryEvent, { type: 'HistoryCompacted' }>): void {
  if (e.eventId !== 2) fail(s, e, 'history-compacted', `HistoryCompacted must be event 2, it is event ${e.eventId}`);
  if (e.throughEventId < e.eventId) fail(s, e, 'history-compacted', `throughEventId ${e.throughEventId} is before the event itself`);
  let at: TaskState;
  try {
    at = decodeState(e.state);
  } catch (err) {
    return fail(s, e, 'history-compacted', `its state does not decode: ${(err as Error).message}`);
  }
  if (at.workflow !== s.workflow || at.kind !== s.kind) {
    fail(s, e, 'history-compacted', `its state is of workflow ${at.workflow} (${at.kind}), the task's is ${s.workflow} (${s.kind})`);
  }
  if (at.highestGeneration > e.generation) fail(s, e, 'generation-monotonic', `its state saw generation ${at.highestGeneration}, above the event's ${e.generation}`);
  // The task id is the folding task's: a fork or an import under another id keeps its own.
  Object.assign(s, at, { taskId: s.taskId, createdAt: s.createdAt, lastEventId: e.throughEventId });
}

/** The migration hook's recorded result replaces the state (docs/versioning.md#state-migrations). */
function stateMigrated(s: TaskState, e: Extract<HistoryEvent, { type: 'StateMigrated' }>): void {
  // An open turn whose attempt still looks running here is a re-run after its engine died (nothing
  // recorded that attempt's end): the driver writes a migration only just before a TurnStarted.
  if (e.toVersion <= e.fromVersion) fail(s, e, 'state-migrated', `version ${e.fromVersion} → ${e.toVersion} does not go up`);
  // Unknown (a snapshot from before state versions) is not checked.
  if (s.stateVersion !== undefined && s.stateVersion !== e.fromVersion) fail(s, e, 'state-migrated', `migrates from version ${e.fromVersion}, but the state is of version ${s.stateVersion}`);
  if (e.state !== undefined) s.state = e.state;
  else if (e.stateDelta !== undefined) {
    if (s.state === undefined) fail(s, e, 'state-delta', 'a state migration records a delta, but there is no previous state');
    const next = applyStateDelta(s.state, e.stateDelta, []);
    if (typeof next === 'string') fail(s, e, 'state-delta', `state migration: ${next}`);
    s.state = next;
  } else fail(s, e, 'state-migrated', 'it records neither a state nor a delta');
  s.stateVersion = e.toVersion;
}

function turnStarted(s: TaskState, e: Extract<HistoryEvent, { type: 'TurnStarted' }>): void {
  const t = s.openTurn;
  if (e.attempt === 1) {
    if (t !== undefined) fail(s, e, 'turn-already-open', `turn ${e.turn} started while turn ${t.turn} is open`);
    if (e.turn !== s.turn + 1) fail(s, e, 'turn-order', `expected turn ${s.turn + 1}, got ${e.turn}`);
    if (e.entryMode === 'recovered') fail(s, e, 'entry-mode', 'attempt 1 cannot enter as recovered');
    if (s.kind === 'one-shot' && s.turn > 0) fail(s, e, 'one-shot-single-turn', `one-shot task already ran turn ${s.turn}`);
    // Invariant 7: a task-scoped cancel, once requested, is final.
    if (s.cancelRequested !== undefined) {
      fail(s, e, 'cancelled-never-runs', `task cancel requested at event ${s.cancelRequested.eventId}`);
    }
    s.openTurn = {
      turn: e.turn,
      attempt: 1,
      attemptRunning: true,
      inputIds: e.inputIds.slice(),
      inputs: takeFromQueue(s, e, e.inputIds),
      entryMode: e.entryMode,
      steered: e.steered,
      turnStartedAt: e.turnStartedAt,
      deadline: e.deadline,
      executor: e.executor,
      owner: e.owner,
      instance: e.instance,
      startedEventId: e.eventId,
      calls: [],
      taken: [],
      workerCrashes: 0,
    };
    if (e.workflowVersion !== undefined) s.openTurn.workflowVersion = e.workflowVersion;
    s.turn = e.turn;
    s.status = 'in_progress';
    return;
  }
  // attempt > 1 re-opens the same turn; everything recorded so far stays.
  if (t === undefined || t.turn !== e.turn) {
    const open = t === undefined ? 'no turn is open' : `the open turn is ${t.turn}`;
    fail(s, e, 'turn-not-open', `attempt ${e.attempt} of turn ${e.turn}, but ${open}`);
  }
  if (e.attempt !== t.attempt + 1) fail(s, e, 'attempt-order', `expected attempt ${t.attempt + 1}, got ${e.attempt}`);
  if (e.entryMode !== 'recovered') fail(s, e, 'entry-mode', `attempt ${e.attempt} must enter as recovered, not ${e.entryMode}`);
  // Invariant 6: the turn start (and so the deadline) survives recovery unchanged.
  if (e.turnStartedAt !== t.turnStartedAt || e.deadline !== t.deadline) {
    fail(
      s,
      e,
      'turn-start-preserved',
      `attempt ${e.attempt} has turnStartedAt ${e.turnStartedAt}/deadline ${e.deadline}, turn ${t.turn} started at ${t.turnStartedAt}/deadline ${t.deadline}`,
    );
  }
  if (t.cancelRequested !== undefined) {
    fail(s, e, 'cancelled-never-runs', `turn ${t.turn} cancel requested at event ${t.cancelRequested.eventId}`);
  }
  t.attempt = e.attempt;
  t.attemptRunning = true;
  t.entryMode = 'recovered';
  t.executor = e.executor;
  t.owner = e.owner;
  t.instance = e.instance;
  if (e.workflowVersion !== undefined) t.workflowVersion = e.workflowVersion;
  else delete t.workflowVersion;
  s.recoveryCount++;
}

function turnEnded(s: TaskState, e: TurnTerminalEvent): void {
  const t = openTurnFor(s, e);
  s.lastTurn = { turn: t.turn, terminal: e.type, eventId: e.eventId, attempts: t.attempt };
  if (e.type === 'TurnCompleted' || e.type === 'TurnSuspended') {
    if (e.output !== undefined) s.lastOutput = e.output;
    // The state written is of the version of the code that wrote it (a failed turn writes none).
    if (e.state !== undefined || e.stateDelta !== undefined) s.stateVersion = t.workflowVersion ?? 0;
    if (e.state !== undefined) s.state = e.state;
    else if (e.stateDelta !== undefined) {
      if (s.state === undefined) fail(s, e, 'state-delta', `turn ${t.turn} records a state delta, but there is no previous state`);
      const next = applyStateDelta(s.state, e.stateDelta, turnSources(t, e.output));
      if (typeof next === 'string') fail(s, e, 'state-delta', `turn ${t.turn}: ${next}`);
      s.state = next;
    }
  } else if (e.type === 'TurnFailed') {
    s.lastFailure = e.failure;
  }
  // A task-scoped cancel outlives the turn it interrupted until TaskCompleted lands.
  if (t.cancelRequested?.scope === 'task' && s.cancelRequested === undefined) s.cancelRequested = t.cancelRequested;
  end(s, 'openTurn');
  // One-shot: stays in_progress until TaskCompleted, which the engine appends in the same batch.
  if (s.kind === 'multi-turn') s.status = 'suspended';
}
