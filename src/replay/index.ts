/**
 * The deterministic replayer: history → state → recovery decision. Pure: no I/O, no clock,
 * no randomness (test/replay/boundary.test.ts enforces it).
 */

// fold
export { FOLD_PAGE, fold, withFullStates } from './fold.js';

// compaction (opt-in per workflow)
export { compaction } from './compact.js';

// fork (Engine.fork, `turnlog fork`)
export { forkEvents, type ForkOptions } from './fork.js';

// decide
export { decide, formatTime, isDue, nextWakeAt } from './decide.js';
export type { Decision, DecisionRule } from './decision.js';

// explain (`turnlog why`)
export { explainDecision, describeAction } from './explain.js';
