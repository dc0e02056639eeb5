// Payload limits, non-JSON refusals and thrown values on the inline executor (issue #10 items 5–7).
// The same cases in a process worker: test/executor/process-payloads.test.ts.
import { afterEach, describe, expect, it } from 'vitest';
import { isTurnlogError } from '../../src/errors.js';
import type { HistoryEvent } from '../../src/history/events.js';
import { MAX_PAYLOAD_BYTES } from '../../src/history/payload.js';
import { Engine, type EngineOptions } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { mapPrices, payloadConverter } from '../fixtures/custom-payloads/workflows.js';

const engines: Engine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
});

async function open(options: Partial<EngineOptions> & Pick<EngineOptions, 'workflows'>): Promise<{ engine: Engine; store: MemoryHistoryStore }> {
  const store = new MemoryHistoryStore();
  const engine = await Engine.open({ store, logger: silentLogger, scanIntervalMs: 0, ...options });
  engines.push(engine);
  return { engine, store };
}

const of = <T extends HistoryEvent['type']>(h: HistoryEvent[], type: T) => h.filter((e): e is Extract<HistoryEvent, { type: T }> => e.type === type);

async function thrown(p: Promise<unknown>): Promise<Error & { code?: string }> {
  try {
    await p;
  } catch (err) {
    return err as Error & { code?: string };
  }
  throw new Error('expected a rejection');
}

const KiB = 1024;

describe('engine options: limits', () => {
  it.each([
    [{ inputBytes: 0 }, 'limits.inputBytes must be an integer from 1'],
    [{ outputBytes: 16 * 1024 * KiB + 1 }, 'limits.outputBytes must be an integer from 1'],
    [{ stateBytes: 1.5 }, 'limits.stateBytes'],
    [{ inputbytes: 10 } as never, 'limits.inputbytes is not a payload limit'],
  ])('refuses %o', async (limits, message) => {
    const wf = defineWorkflow({ name: 'w', turn: () => 1 });
    const err = await thrown(Engine.open({ store: new MemoryHistoryStore(), workflows: [wf], limits, logger: silentLogger }));
    expect(err.code).toBe('TURNLOG_INVALID_ARGUMENT');
    expect(err.message).toContain(message);
  });
});

describe('inputs', () => {
  const echo = defineWorkflow({ name: 'echo', kind: 'multi-turn', turn: (_ctx, s: unknown) => s });

  it('throws TURNLOG_PAYLOAD_TOO_LARGE from start() for an input over the limit, writing nothing', async () => {
    const { engine, store } = await open({ workflows: [echo], limits: { inputBytes: 4 * KiB } });
    const err = await thrown(engine.start(echo, 'x'.repeat(5 * KiB), { taskId: 'big', inputId: 'in-1' }));
    expect(isTurnlogError(err, 'TURNLOG_PAYLOAD_TOO_LARGE')).toBe(true);
    expect(err).toMatchObject({ field: 'input', limit: 4 * KiB, nonRetryable: true });
    expect(err.message).toMatch(/^Task big, input in-1: input is \d+ bytes, over the 4096-byte limit/);
    expect(await store.readEvents('big')).toEqual([]);
  });

  it('checks send() too, and keeps the task as it was', async () => {
    const { engine } = await open({ workflows: [echo], limits: { inputBytes: 4 * KiB } });
    const h = await engine.start(echo, 'small', { taskId: 't' });
    await h.nextTurn();
    const before = (await h.history()).length;
    expect((await thrown(h.send('x'.repeat(5 * KiB)))).code).toBe('TURNLOG_PAYLOAD_TOO_LARGE');
    expect(await h.history()).toHaveLength(before);
  });

  it('refuses a non-JSON input naming the task, the input and the path', async () => {
    const { engine, store } = await open({ workflows: [echo] });
    const err = await thrown(engine.start(echo, { when: new Date(0) }, { taskId: 'd', inputId: 'in-d' }));
    expect(err.code).toBe('TURNLOG_PAYLOAD_ENCODING');
    expect(err.message).toMatch(/^Task d, input in-d: \$\.when is a Date/);
    expect(await store.readEvents('d')).toEqual([]);
  });
});

describe('step results', () => {
  it('records an oversized step result as a non-retryable step failure; fn runs once', async () => {
    let runs = 0;
    const wf = defineWorkflow({
      name: 'big-step',
      retry: { maxAttempts: 5, initialIntervalMs: 1 },
      turn: async (ctx) => {
        const err = await ctx.step('big', () => (runs++, 'x'.repeat(8 * KiB))).catch((e: unknown) => e as Error & { code: string });
        const after = await ctx.step('after', () => 'small');
        return { code: (err as { code: string }).code, after };
      },
    });
    const { engine } = await open({ workflows: [wf], limits: { stepResultBytes: 4 * KiB } });
    const h = await engine.start(wf, null, { taskId: 's' });
    expect(await h.result()).toEqual({ code: 'TURNLOG_PAYLOAD_TOO_LARGE', after: 'small' });
    expect(runs).toBe(1);
    const steps = of(await h.history(), 'StepCompleted');
    expect(steps.map((s) => [s.seq, s.name])).toEqual([[1, 'big'], [2, 'after']]);
    expect(steps[0]!.result).toBeUndefined();
    expect(steps[0]!.failure).toMatchObject({ code: 'TURNLOG_PAYLOAD_TOO_LARGE', nonRetryable: true, type: 'PayloadTooLargeError' });
    expect(steps[0]!.failure!.message).toContain('Task s, turn 1, step "big" result: stepResult is');
  });

  it('fails a step that returns a Map (it used to record {} and break the caller at run time)', async () => {
    let runs = 0;
    const wf = defineWorkflow({
      name: 'map-step',
      turn: async (ctx) => {
        // Typed `unknown` as data from an untyped library would be (a typed Map fails to compile: test/types.test.ts).
        const prices = await ctx.step('prices', (): unknown => (runs++, { prices: [1, 2, { amount: new Map([['eur', 3]]) }] }));
        return prices;
      },
    });
    const { engine } = await open({ workflows: [wf] });
    const h = await engine.start(wf, null, { taskId: 'm' });
    const r = await h.nextTurn();
    expect(r.status).toBe('failed');
    expect(r.failure).toMatchObject({ code: 'TURNLOG_PAYLOAD_ENCODING', type: 'PayloadEncodingError', nonRetryable: true });
    expect(r.failure!.message).toMatch(/^Task m, turn 1, step "prices" result: \$\.prices\[2\]\.amount is a Map/);
    const [step] = of(await h.history(), 'StepCompleted');
    expect(step!.result).toBeUndefined();
    expect(step!.failure!.code).toBe('TURNLOG_PAYLOAD_ENCODING');
    expect(runs).toBe(1);
  });
});

describe('checkpoints, outputs and state', () => {
  it('fails the turn on an oversized checkpoint even if the handler catches it; nothing later is recorded', async () => {
    const wf = defineWorkflow({
      name: 'big-checkpoint',
      turn: async (ctx) => {
        await ctx.checkpoint('x'.repeat(8 * KiB)).catch(() => undefined);
        await ctx.step('later', () => 1).catch(() => undefined);
        return 'done anyway';
      },
    });
    const { engine } = await open({ workflows: [wf], limits: { checkpointBytes: 4 * KiB } });
    const h = await engine.start(wf, null, { taskId: 'c' });
    const r = await h.nextTurn();
    expect(r.status).toBe('failed');
    expect(r.failure).toMatchObject({ code: 'TURNLOG_PAYLOAD_TOO_LARGE', nonRetryable: true });
    expect(r.failure!.message).toContain('Task c, turn 1, checkpoint: checkpoint is');
    const hist = await h.history();
    expect(of(hist, 'Checkpointed')).toEqual([]);
    expect(of(hist, 'StepCompleted')).toEqual([]);
  });

  it('fails the turn on a checkpoint over the 16 MiB hard cap too (refused in the context, before a seq)', async () => {
    const wf = defineWorkflow({
      name: 'huge-checkpoint',
      turn: async (ctx) => {
        const code = await ctx.checkpoint('x'.repeat(MAX_PAYLOAD_BYTES)).then(() => 'none', (e: { code: string }) => e.code);
        await ctx.step('later', () => code);
        return 'done anyway';
      },
    });
    const { engine } = await open({ workflows: [wf] });
    const h = await engine.start(wf, null, { taskId: 'hc' });
    const r = await h.nextTurn();
    expect(r.failure).toMatchObject({ code: 'TURNLOG_PAYLOAD_TOO_LARGE', nonRetryable: true });
    expect(r.failure!.message).toContain(`over the ${MAX_PAYLOAD_BYTES}-byte limit`);
    const hist = await h.history();
    expect(of(hist, 'Checkpointed')).toEqual([]);
    expect(of(hist, 'StepCompleted').map((e) => e.seq)).toEqual([1]);
  });

  it('refuses a non-JSON checkpoint before it takes a seq, so the turn goes on without a gap', async () => {
    const wf = defineWorkflow({
      name: 'map-checkpoint',
      turn: async (ctx) => {
        const code = await ctx.checkpoint(new Set([1]) as unknown).then(() => 'none', (e: { code: string }) => e.code);
        await ctx.step('next', () => 1);
        return code;
      },
    });
    const { engine } = await open({ workflows: [wf] });
    const h = await engine.start(wf, null, { taskId: 'cs' });
    expect(await h.result()).toBe('TURNLOG_PAYLOAD_ENCODING');
    expect(of(await h.history(), 'StepCompleted').map((s) => s.seq)).toEqual([1]);
  });

  it('fails a turn whose output is over the limit; the TurnFailed carries no output', async () => {
    const wf = defineWorkflow({ name: 'big-out', turn: () => 'y'.repeat(8 * KiB) });
    const { engine } = await open({ workflows: [wf], limits: { outputBytes: 4 * KiB } });
    const h = await engine.start(wf, null, { taskId: 'o' });
    const err = await thrown(h.result());
    expect(err.code).toBe('TURNLOG_TURN_FAILED');
    const hist = await h.history();
    expect(of(hist, 'TurnCompleted')).toEqual([]);
    expect(of(hist, 'TurnFailed')[0]!.failure).toMatchObject({ code: 'TURNLOG_PAYLOAD_TOO_LARGE', nonRetryable: true });
  });

  it('fails a turn whose state grew over the limit and keeps the previous state', async () => {
    const wf = defineWorkflow({
      name: 'big-state',
      kind: 'multi-turn',
      initialState: () => ({ log: [] as string[] }),
      turn: (ctx, s: string) => {
        ctx.state.log.push(s);
        return ctx.suspend('more', ctx.state.log.length);
      },
    });
    const { engine } = await open({ workflows: [wf], limits: { stateBytes: 4 * KiB } });
    const h = await engine.start(wf, 'a', { taskId: 'st' });
    expect((await h.nextTurn()).status).toBe('suspended');
    await h.send('z'.repeat(3 * KiB));
    expect((await h.nextTurn()).status).toBe('suspended');
    await h.send('z'.repeat(3 * KiB));
    const r = await h.nextTurn();
    expect(r.failure).toMatchObject({ code: 'TURNLOG_PAYLOAD_TOO_LARGE', type: 'PayloadTooLargeError' });
    expect(r.failure!.message).toContain('Task st, turn 3, ctx.state: state is');
    expect(((await h.describe()).state as { log: string[] }).log).toHaveLength(2);
  });

  it('fails a turn whose state holds a Date, naming ctx.state and the path', async () => {
    const wf = defineWorkflow({
      name: 'date-state',
      kind: 'multi-turn',
      initialState: () => ({ seen: [] as unknown[] }),
      turn: (ctx) => {
        ctx.state.seen.push(new Date(0));
        return ctx.suspend('more');
      },
    });
    const { engine } = await open({ workflows: [wf] });
    const r = await (await engine.start(wf, null, { taskId: 'ds' })).nextTurn();
    expect(r.failure!.message).toMatch(/^Task ds, turn 1, ctx\.state: \$\.seen\[0\] is a Date/);
  });
});

describe('thrown values (inline)', () => {
  const hostile = () => {
    const thrower = () => {
      throw new Error('trap');
    };
    return new Proxy({}, { get: thrower, getPrototypeOf: thrower, has: thrower, ownKeys: thrower });
  };

  it.each([
    ['a Proxy whose traps throw', hostile, 'UninspectableThrow'],
    ['null', () => null, 'null'],
    ['a symbol', () => Symbol('s'), 'symbol'],
    ['a frozen object', () => Object.freeze({ a: 1 }), 'Object'],
  ])('records %s thrown by the handler as a turn failure, not TURNLOG_WORKER_START', async (_what, make, type) => {
    const wf = defineWorkflow({
      name: 'thrower',
      turn: () => {
        throw make();
      },
    });
    const { engine } = await open({ workflows: [wf] });
    const r = await (await engine.start(wf, null)).nextTurn();
    expect(r.status).toBe('failed');
    expect(r.failure!.type).toBe(type);
    expect(r.failure!.code).toBeUndefined();
  });

  it('records a Proxy thrown from a retried step as the step failure', async () => {
    const wf = defineWorkflow({
      name: 'step-thrower',
      turn: async (ctx) => {
        await ctx.step('s', () => {
          throw hostile();
        });
      },
    });
    const { engine } = await open({ workflows: [wf] });
    const h = await engine.start(wf, null);
    const r = await h.nextTurn();
    expect(r.failure!.type).toBe('UninspectableThrow');
    expect(of(await h.history(), 'StepCompleted')[0]!.failure!.type).toBe('UninspectableThrow');
  });
});

describe("payloads: 'custom' and EngineOptions.payloadConverter", () => {
  it('refuses to open with a custom-payload workflow and no converter', async () => {
    const err = await thrown(Engine.open({ store: new MemoryHistoryStore(), workflows: [mapPrices], logger: silentLogger }));
    expect(err.code).toBe('TURNLOG_INVALID_ARGUMENT');
    expect(err.message).toContain("Workflow map-prices is defined with payloads: 'custom', but the engine has no payloadConverter");
  });

  it('round-trips a Map through input, step and output with the engine converter (inline)', async () => {
    const { engine } = await open({ workflows: [mapPrices], payloadConverter });
    const h = await engine.start(mapPrices, new Map([['eur', 21]]), { taskId: 'mp' });
    const out = await h.result();
    expect(out.eur).toBe(42);
    expect(out.prices).toEqual(new Map([['eur', 42]]));
    const [step] = of(await h.history(), 'StepCompleted');
    expect(new TextDecoder().decode(step!.result!.metadata['encoding'])).toBe('json/maps');
  });
});
