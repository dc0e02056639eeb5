import { describe, expect, it } from 'vitest';
import { isTurnlogError } from '../../src/errors.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';

// docs/workflows.md#defining-a-workflow: bad options throw TURNLOG_WORKFLOW_INVALID naming the
// workflow and the field, at definition, never later as a failed turn.
const turn = async (): Promise<number> => 1;

function refusal(options: Record<string, unknown>): string {
  try {
    defineWorkflow({ name: 'w', turn, ...options } as Parameters<typeof defineWorkflow>[0]);
  } catch (err) {
    expect(isTurnlogError(err, 'TURNLOG_WORKFLOW_INVALID'), String(err)).toBe(true);
    return (err as Error).message;
  }
  throw new Error(`accepted ${JSON.stringify(options)}`);
}

describe('defineWorkflow refuses a malformed definition', () => {
  it.each([
    [{ maxRecoveries: 1.5 }, 'maxRecoveries must be an integer from 0 to 1000, got 1.5'],
    [{ maxWorkerCrashes: 0.5 }, 'maxWorkerCrashes must be an integer from 0 to 1000, got 0.5'],
    [{ retry: { maxAttempts: 2.5 } }, 'retry.maxAttempts must be an integer from 1 to 1000, got 2.5'],
    [{ kind: 'multi-turn', steering: { maxQueued: 3.5 } }, 'steering.maxQueued must be an integer from 0 to 10000, got 3.5'],
  ])('a fractional count: %j', (options, detail) => {
    expect(refusal(options)).toBe(`Workflow w: ${detail}.`);
  });

  it('an initialState that is not a function (it failed every first turn as TURNLOG_WORKER_START)', () => {
    expect(refusal({ initialState: { messages: [] } })).toContain('`initialState` must be a function');
    expect(refusal({ initialState: 5 })).toContain('Workflow w:');
  });

  it('retry.nonRetryableTypes that is not an array of type names', () => {
    expect(refusal({ retry: { nonRetryableTypes: 'RateLimitError' } })).toContain('retry.nonRetryableTypes must be an array');
    expect(refusal({ retry: { nonRetryableTypes: [42] } })).toContain('retry.nonRetryableTypes');
  });

  it('accepts the documented defaults and integer counts at the ends of their ranges', () => {
    const wf = defineWorkflow({ name: 'w', kind: 'multi-turn', turn, initialState: () => ({}), maxRecoveries: 0, maxWorkerCrashes: 1000, retry: { maxAttempts: 1000, nonRetryableTypes: ['RateLimitError'] }, steering: { maxQueued: 0 } });
    expect(wf.policy).toMatchObject({ maxRecoveries: 0, maxWorkerCrashes: 1000, steeringMaxQueued: 0, stepRetry: { maxAttempts: 1000, nonRetryableTypes: ['RateLimitError'] } });
    expect(defineWorkflow({ name: 'd', turn }).policy).toEqual({
      turnTimeoutMs: 3_600_000,
      graceMs: 30_000,
      maxRecoveries: 5,
      maxWorkerCrashes: 2,
      steeringMaxQueued: 0,
      executor: undefined,
      stepRetry: { maxAttempts: 3, initialIntervalMs: 100, backoffCoefficient: 2, maxIntervalMs: 10_000, nonRetryableTypes: [] },
    });
  });
});
