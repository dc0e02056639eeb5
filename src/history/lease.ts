/**
 * The lease acquisition table (pure). Every store applies it the same way; the contract
 * suite tests it on each backend.
 *
 * | current lease                 | result                              |
 * |-------------------------------|-------------------------------------|
 * | none                          | generation 1                        |
 * | same owner and instance       | same generation (renewal)           |
 * | same owner, new instance      | generation + 1 (shared: once expired)|
 * | foreign owner, expired        | generation + 1                      |
 * | foreign owner, live           | LeaseHeldError                      |
 *
 * `shared` (a store many engines use at once, e.g. PostgreSQL): fencing goes by instance, so a
 * live lease of another instance of the same owner is held too (two engines on one host with the
 * default owner never take each other's turns; test: contract "row 3").
 */
import { LeaseHeldError } from '../errors.js';
import type { Lease } from './events.js';

export interface LeaseRequest {
  owner: string;
  instance: string;
  durationMs: number;
  now: number;
}

export function isLeaseLive(lease: Lease | undefined, now: number): lease is Lease {
  return lease !== undefined && lease.expiresAt > now;
}

/** The lease a claim produces, or LeaseHeldError. `floor` is a generation the result must exceed or equal. */
export function nextLease(taskId: string, current: Lease | undefined, req: LeaseRequest, floor = 0, shared = false): Lease {
  const expiresAt = req.now + req.durationMs;
  if (!current) return { owner: req.owner, instance: req.instance, generation: Math.max(1, floor), expiresAt };
  if (current.owner === req.owner && current.instance === req.instance) {
    return { ...current, generation: Math.max(current.generation, floor), expiresAt };
  }
  if ((shared || current.owner !== req.owner) && isLeaseLive(current, req.now)) {
    throw new LeaseHeldError(taskId, current.owner, current.instance, current.expiresAt);
  }
  return {
    owner: req.owner,
    instance: req.instance,
    generation: Math.max(current.generation + 1, floor),
    expiresAt,
  };
}
