/**
 * Retry jitter (docs/workflows.md#retries): each backoff delay is spread by ± `retry.jitter`
 * (default 0.2) with a draw of the engine's `random`, so a seeded random (turnlog/testing's
 * `seededRandom`) gives the same delays on every run; replay never retries, so it never depends on them.
 */
import { describe, expect, it } from 'vitest';
import { backoffDelay, DEFAULT_JITTER } from '../../src/attempt/backoff.js';
import { DEFAULT_RETRY, defineWorkflow } from '../../src/workflow/define-workflow.js';
import { createTestEngine, seededRandom } from '../../src/testing/index.js';
import { isTurnlogError } from '../../src/errors.js';
import { until } from '../helpers/processes.js';

const policy = { ...DEFAULT_RETRY, maxAttempts: 3, initialIntervalMs: 1000, backoffCoefficient: 2, maxIntervalMs: 60_000 };

describe('backoffDelay', () => {
  it('spreads the capped exponential delay by ± jitter (default 0.2); 0 turns it off', () => {
    expect(DEFAULT_JITTER).toBe(0.2);
    expect(backoffDelay(policy, 1, 0)).toBe(800);
    expect(backoffDelay(policy, 1, 0.5)).toBe(1000);
    expect(backoffDelay(policy, 2, 0.999999)).toBeCloseTo(2400, 2);
    expect(backoffDelay({ ...policy, jitter: 0 }, 3, 0.9)).toBe(4000);
    expect(backoffDelay({ ...policy, jitter: 1 }, 1, 0)).toBe(0);
    expect(backoffDelay({ ...policy, maxIntervalMs: 1500, jitter: 0.5 }, 5, 0.75)).toBe(1875);
  });

  it('seededRandom: the same seed gives the same numbers in [0, 1), another seed others', () => {
    const a = seededRandom(42);
    const b = seededRandom(42);
    const xs = Array.from({ length: 100 }, () => a());
    expect(Array.from({ length: 100 }, () => b())).toEqual(xs);
    expect(xs.every((x) => x >= 0 && x < 1)).toBe(true);
    expect(new Set(xs).size).toBe(100);
    expect(seededRandom(43)()).not.toBe(xs[0]);
  });

  it('refuses a jitter outside [0, 1] at definition', () => {
    for (const jitter of [-0.1, 1.5, Number.NaN]) {
      expect(() => defineWorkflow({ name: 'bad-jitter', retry: { jitter }, turn: async () => 1 })).toThrow(/retry.jitter must be a number from 0 to 1/);
    }
  });
});

describe('jittered retries in the engine', () => {
  it('waits exactly the delays the seeded draws give (engine clock), then records the one outcome', async () => {
    let tries = 0;
    const wf = defineWorkflow({
      name: 'flaky',
      retry: policy,
      turn: async (ctx, _: null) =>
        ctx.step('call', () => {
          if (++tries < 3) throw new Error(`try ${tries} failed`);
          return tries;
        }),
    });
    const draws = seededRandom(7);
    const d1 = backoffDelay(policy, 1, draws());
    const d2 = backoffDelay(policy, 2, draws());
    expect(d1).not.toBe(1000); // jittered
    const t = await createTestEngine({ workflows: [wf], random: seededRandom(7) });
    try {
      const h = await t.engine.start(wf, null, { taskId: 'j1' });
      await until(() => tries === 1, 'the first try');
      await t.advance(Math.floor(d1) - 1);
      expect(tries).toBe(1);
      await t.advance(2);
      await until(() => tries === 2, 'the second try after d1');
      await t.advance(Math.floor(d2) - 2);
      expect(tries).toBe(2);
      await t.advance(3);
      expect(await h.result()).toBe(3);
      const steps = (await t.history('j1')).filter((e) => e.type === 'StepCompleted');
      expect(steps).toHaveLength(1); // retries are not recorded: replay never waits for them
      expect((await t.replay('j1')).turns).toBe(1);
    } finally {
      await t.close();
    }
  });

  it('EngineOptions.random must be a function', async () => {
    await expect(createTestEngine({ workflows: [], random: 42 as never })).rejects.toSatisfy((e: unknown) => isTurnlogError(e, 'TURNLOG_INVALID_ARGUMENT'));
  });
});
