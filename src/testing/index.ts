/**
 * `turnlog/testing`: replay-test turns against recorded histories, build histories event by
 * event, and run workflows on an in-memory store with a manual clock. See docs/testing.md.
 */

// replay testing
export {
  replayHistory,
  replayHistories,
  ReplayFailuresError,
  HISTORY_FILE_PATTERN,
  DEFAULT_REPLAY_TIMEOUT_MS,
  isWorkflow,
  workflowMap,
} from './replay-history.js';
export type {
  ReplayHistoryOptions,
  ReplayReport,
  TurnReplayResult,
  ReplayHistoriesReport,
  ReplayFailure,
  WorkflowSource,
} from './replay-history.js';

// history builder
export { historyBuilder, HistoryBuilder, renumber as renumberEvents } from './history-builder.js';
export type { BuilderOptions as HistoryBuilderOptions, TerminalOptions as HistoryBuilderTerminalOptions } from './history-builder.js';

// test engine
export { createTestEngine } from './test-engine.js';
export type { TestEngine, TestEngineOptions } from './test-engine.js';
export { ManualClock } from '../runtime/clock.js';
export { seededRandom } from './random.js';
export { MemoryHistoryStore } from '../store/memory-store.js';
export { NonDeterminismError, ReplayStalledError, isTurnlogError } from '../errors.js';

// store contract suite (for a third-party HistoryStore)
export { storeContract } from './store-contract.js';
export type { StoreFixture, StoreCapabilities, ContractTestApi, ContractAssertion } from './store-contract.js';
