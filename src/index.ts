// turnlog public API. Named exports, grouped by area.

// errors
export * from './errors.js';

// history model
export * from './history/events.js';
export type { PayloadCodec, PayloadConverter } from './history/payload.js';
export { DefaultPayloadConverter, defaultPayloadConverter } from './history/payload.js';
export type { TaskState, OpenTurn, QueuedInput, RecordedCall } from './history/state.js';

// store
export type * from './store/history-store.js';

// replay
export type { Decision, DecisionRule } from './replay/decision.js';
