// Payload limits, non-JSON refusals and thrown values in real worker processes (issue #10 items 5–7).
// Workers import the compiled fixtures (dist/test/fixtures/workflows): `npm run build` first.
// The inline executor's cases: test/runtime/engine-payloads.test.ts.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import { MAX_PAYLOAD_BYTES } from '../../src/history/payload.js';
import { ProcessExecutor } from '../../src/executor/process-executor.js';
import { MAX_FRAME_BYTES } from '../../src/executor/protocol.js';
import { Engine, type EngineOptions } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { payloads, takeAfterGate, type PayloadMode } from '../fixtures/workflows/payloads.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { mapPricesInWorker, payloadConverter } from '../fixtures/custom-payloads/workflows.js';

const MODULE = fileURLToPath(new URL('../../dist/test/fixtures/workflows/payloads.js', import.meta.url));
const KiB = 1024;

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function open(options: Partial<EngineOptions> = {}): Promise<{ engine: Engine; store: MemoryHistoryStore; exec: ProcessExecutor }> {
  const exec = new ProcessExecutor({ workflowsModule: MODULE, execArgv: [], logger: silentLogger, maxWorkers: 1 });
  cleanups.push(async () => {
    const pids = exec.workerPids;
    await exec.close();
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  });
  const store = new MemoryHistoryStore();
  const engine = await Engine.open({ store, workflows: [payloads, takeAfterGate], executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0, ...options });
  cleanups.push(() => engine.shutdown({ graceMs: 100 }));
  return { engine, store, exec };
}

const of = <T extends HistoryEvent['type']>(h: HistoryEvent[], type: T) => h.filter((e): e is Extract<HistoryEvent, { type: T }> => e.type === type);

async function run(engine: Engine, m: PayloadMode, taskId: string) {
  const h = await engine.start(payloads, m, { taskId });
  const r = await h.nextTurn();
  return { r, hist: await h.history() };
}

describe('process worker: payload limits', () => {
  it('refuses an input over the limit before any worker is asked (it used to crash the worker three times)', async () => {
    const { engine, store, exec } = await open();
    const big = { mode: 'step', bytes: 1, pad: 'x'.repeat(5 * 1024 * KiB) } as PayloadMode;
    await expect(engine.start(payloads, big, { taskId: 'in' })).rejects.toMatchObject({
      code: 'TURNLOG_PAYLOAD_TOO_LARGE',
      field: 'input',
      limit: 4 * 1024 * KiB,
      message: expect.stringMatching(/^Task in, input in-\S+: input is \d+ bytes, over the 4194304-byte limit/),
    });
    expect(await store.readEvents('in')).toEqual([]);
    expect(exec.workerCount).toBe(0);
  });

  it('records a step result over the engine limit as a non-retryable step failure', async () => {
    const { engine } = await open({ limits: { stepResultBytes: 4 * KiB } });
    const { r, hist } = await run(engine, { mode: 'step', bytes: 8 * KiB }, 'big-step');
    expect(r.status).toBe('failed');
    expect(r.failure).toMatchObject({ code: 'TURNLOG_PAYLOAD_TOO_LARGE', nonRetryable: true });
    const [step] = of(hist, 'StepCompleted');
    expect(step!.result).toBeUndefined();
    expect(step!.failure!.message).toContain('Task big-step, turn 1, step "big" result: stepResult is');
    expect(of(hist, 'WorkerCrashed')).toEqual([]);
  });

  it('refuses a step result over the hard cap inside the worker, so no frame outgrows the protocol', async () => {
    const { engine } = await open();
    const { r, hist } = await run(engine, { mode: 'step', bytes: MAX_PAYLOAD_BYTES + 1 }, 'huge-step');
    expect(r.failure).toMatchObject({ code: 'TURNLOG_PAYLOAD_TOO_LARGE', nonRetryable: true });
    expect(r.failure!.message).toContain(`over the ${MAX_PAYLOAD_BYTES}-byte limit`);
    expect(of(hist, 'StepCompleted')[0]!.failure!.code).toBe('TURNLOG_PAYLOAD_TOO_LARGE');
    expect(of(hist, 'WorkerCrashed')).toEqual([]);
  });

  it('fails a turn whose output is over the limit', async () => {
    const { engine } = await open({ limits: { outputBytes: 4 * KiB } });
    const { r, hist } = await run(engine, { mode: 'output', bytes: 8 * KiB }, 'big-out');
    expect(r.failure).toMatchObject({ code: 'TURNLOG_PAYLOAD_TOO_LARGE', nonRetryable: true });
    expect(of(hist, 'TurnCompleted')).toEqual([]);
  });

  it('fails a re-run whose Run frame would exceed the frame cap instead of crashing the worker', async () => {
    // Attempt 1 records five 15 MiB steps, then dies; attempt 2 would need all five (75 MiB) in its Run frame.
    const bytes = 15 * 1024 * KiB;
    const { engine } = await open({ limits: { stepResultBytes: MAX_PAYLOAD_BYTES } });
    const { r, hist } = await run(engine, { mode: 'steps-then-crash', steps: 5, bytes }, 'run-frame');
    expect(5 * bytes).toBeGreaterThan(MAX_FRAME_BYTES);
    expect(of(hist, 'StepCompleted')).toHaveLength(5);
    expect(of(hist, 'WorkerCrashed')).toHaveLength(1);
    expect(r.status).toBe('failed');
    expect(r.failure).toMatchObject({ code: 'TURNLOG_PAYLOAD_TOO_LARGE', type: 'PayloadTooLargeError' });
    expect(r.failure!.message).toContain('Task run-frame, turn 1: workerRun is');
  }, 60_000);
});

describe('process worker: frames over the cap', () => {
  it('fails a turn whose taken inputs would not fit in one reply frame, instead of killing the worker with it', async () => {
    const tmp = await makeTmpDir();
    cleanups.push(tmp.remove);
    const gate = join(tmp.path, 'gate');
    const { engine } = await open({ limits: { inputBytes: MAX_PAYLOAD_BYTES } });
    const h = await engine.start(takeAfterGate, gate, { taskId: 'take' });
    const big = 14 * 1024 * KiB;
    for (let i = 0; i < 5; i++) await h.send(String(i).repeat(big)); // queued: the turn waits in its step
    expect(5 * big).toBeGreaterThan(MAX_FRAME_BYTES);
    await writeFile(gate, '');
    const r = await h.turnResult((await h.history()).find((e) => e.type === 'InputQueued')!.inputId);
    expect(r.status).toBe('failed');
    expect(r.failure).toMatchObject({ code: 'TURNLOG_PAYLOAD_TOO_LARGE', type: 'PayloadTooLargeError' });
    expect(r.failure!.message).toContain('Task take, turn 1: workerRun is');
    expect(r.failure!.message).toContain('ctx.takeInputs()');
    expect(of(await h.history(), 'WorkerCrashed')).toEqual([]);
  }, 60_000);
});

describe('process worker: non-JSON values and thrown values', () => {
  it('fails a step that returns a Map, naming the step and the path', async () => {
    const { engine } = await open();
    const { r } = await run(engine, { mode: 'map-step' }, 'map');
    expect(r.failure).toMatchObject({ code: 'TURNLOG_PAYLOAD_ENCODING', nonRetryable: true });
    expect(r.failure!.message).toMatch(/^Task map, turn 1, step "prices" result: \$\.prices\[1\]\.amount is a Map/);
  });

  it('records a thrown Proxy whose traps throw as a turn failure, not TURNLOG_WORKER_START', async () => {
    const { engine } = await open();
    const { r, hist } = await run(engine, { mode: 'proxy' }, 'proxy');
    expect(r.status).toBe('failed');
    expect(r.failure!.type).toBe('UninspectableThrow');
    expect(of(hist, 'WorkerCrashed')).toEqual([]);
  });
});

describe("process worker: payloads: 'custom'", () => {
  it("uses the workflows module's payloadConverter export, so a Map survives the worker", async () => {
    const mod = fileURLToPath(new URL('../../dist/test/fixtures/custom-payloads/workflows.js', import.meta.url));
    const exec = new ProcessExecutor({ workflowsModule: mod, execArgv: [], logger: silentLogger, maxWorkers: 1 });
    cleanups.push(() => exec.close());
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [mapPricesInWorker], payloadConverter, executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0 });
    cleanups.push(() => engine.shutdown({ graceMs: 100 }));
    const out = await (await engine.start(mapPricesInWorker, new Map([['eur', 5]]))).result();
    expect(out.pid).not.toBe(process.pid);
    expect(out.prices).toEqual(new Map([['eur', 10]]));
  });
});
