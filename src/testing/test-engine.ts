/**
 * An engine for tests: in-memory store, a clock that moves only when told, silent logs and
 * fixed identities, so a test drives turn timeouts, grace periods and leases without waiting.
 */
import type { HistoryEvent } from '../history/events.js';
import { ManualClock } from '../runtime/clock.js';
import { Engine, type EngineOptions } from '../runtime/engine.js';
import { silentLogger } from '../logger.js';
import { MemoryHistoryStore } from '../store/memory-store.js';
import { replayHistory, type ReplayReport } from './replay-history.js';

export interface TestEngineOptions extends Omit<EngineOptions, 'store' | 'clock'> {
  /** Default a new ManualClock at 2026-01-01T00:00:00Z. */
  clock?: ManualClock;
  /** Default a new MemoryHistoryStore; pass one to reopen an engine on the same histories. */
  store?: MemoryHistoryStore;
}

export interface TestEngine {
  readonly engine: Engine;
  readonly clock: ManualClock;
  readonly store: MemoryHistoryStore;
  /** Moves the clock forward, firing due timers (turn deadlines, grace, lease renewals) in order. */
  advance(ms: number): Promise<void>;
  /** The task's events as stored. */
  history(taskId: string): Promise<HistoryEvent[]>;
  /** Replays the task's history against the engine's workflows (see {@link replayHistory}). */
  replay(taskId: string): Promise<ReplayReport>;
  /** Shuts the engine down without waiting for running turns (they stay in the store). */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * Opens an engine on a {@link MemoryHistoryStore} with a {@link ManualClock}.
 * The periodic recovery scan is off unless `scanIntervalMs` is given.
 *
 * @example
 * const t = await createTestEngine({ workflows: [slowAgent] });
 * const task = await t.engine.start(slowAgent, 'hi', { taskId: 'chat-1' });
 * await t.advance(60_000); // the turn timeout fires now, not in a minute
 * expect((await task.nextTurn()).status).toBe('timed_out');
 * await t.close();
 */
export async function createTestEngine(options: TestEngineOptions): Promise<TestEngine> {
  const { clock = new ManualClock(), store = new MemoryHistoryStore(), ...rest } = options;
  const engine = await Engine.open({
    logger: silentLogger,
    scanIntervalMs: 0,
    owner: 'test|turnlog',
    instance: 'test-engine',
    ...rest,
    store,
    clock,
  });
  const close = () => engine.shutdown({ graceMs: 0 });
  return {
    engine,
    clock,
    store,
    advance: (ms) => clock.advance(ms),
    history: (taskId) => engine.history(taskId),
    replay: async (taskId) =>
      replayHistory({
        history: await engine.history(taskId),
        taskId,
        workflows: [...engine.workflows.values()],
        ...(rest.payloadCodecs ? { payloadCodecs: rest.payloadCodecs } : {}),
        ...(rest.payloadConverter ? { payloadConverter: rest.payloadConverter } : {}),
      }),
    close,
    [Symbol.asyncDispose]: close,
  };
}
