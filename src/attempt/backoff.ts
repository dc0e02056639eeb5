/**
 * Step retry backoff (docs/workflows.md#retries): exponential from `initialIntervalMs`, capped at
 * `maxIntervalMs`, then spread by ± `jitter` (default 0.2) with a draw `u` in [0, 1), so tasks
 * that failed together do not retry in lockstep. Pure: the draw comes from the host
 * (`EngineOptions.random` inline), so a seeded random gives the same delays every run.
 */
import type { RetryPolicy } from '../history/events.js';

/** `RetryPolicy.jitter` when a policy sets none (histories recorded before jitter included). */
export const DEFAULT_JITTER = 0.2;

/** The delay after failed try `attempt` (1-based) of a step, given the draw `u` in [0, 1). */
export function backoffDelay(policy: RetryPolicy, attempt: number, u: number): number {
  const base = Math.min(policy.maxIntervalMs, policy.initialIntervalMs * Math.pow(Math.max(1, policy.backoffCoefficient), attempt - 1));
  const jitter = policy.jitter ?? DEFAULT_JITTER;
  return Math.max(0, base * (1 + jitter * (2 * u - 1)));
}
