/**
 * Failures through the payload codec (issue #18 item 4): with a codec, a failure's message and
 * stack (and every cause's) are stored as an encoded payload (Temporal's encoded_attributes),
 * inline and from a worker process; the engine, replay and `turnlog show --codecs` read them back,
 * and `turnlog show` without the codec says so instead of printing the secret.
 */
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import { ProcessExecutor } from '../../src/executor/process-executor.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { Engine } from '../../src/runtime/engine.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { silentLogger } from '../../src/logger.js';
import { replayHistory } from '../../src/testing/index.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { ROOT, cli, cliJSON, ensureBuilt } from '../cli/run-cli.js';
import { SECRET, encryptingCodec, leaky, leakyCrash, leakyProcess } from '../fixtures/workflows/secrets.js';

const SECRETS_JS = join(ROOT, 'dist/test/fixtures/workflows/secrets.js');
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
beforeAll(() => ensureBuilt(), 300_000);

/** Every byte LevelDB wrote (logs, tables), as latin1 text to search. */
async function rawStoreText(dir: string): Promise<string> {
  let out = '';
  for (const f of await readdir(dir)) out += (await readFile(join(dir, f))).toString('latin1');
  return out;
}

/** Runs one failing task in a fresh Level store; returns its directory, the result and the stored events. */
async function failOnce(workflow: typeof leaky | typeof leakyCrash, encodeFailureAttributes?: boolean) {
  const tmp = await makeTmpDir('turnlog-secret-');
  cleanups.push(tmp.remove);
  const dir = join(tmp.path, 'store');
  const exec = new ProcessExecutor({ workflowsModule: SECRETS_JS, execArgv: [], logger: silentLogger });
  cleanups.push(() => exec.close());
  const engine = await Engine.open({
    store: dir,
    workflows: [leaky, leakyProcess, leakyCrash],
    executors: { process: exec },
    payloadCodecs: [encryptingCodec],
    logger: silentLogger,
    scanIntervalMs: 0,
    ...(encodeFailureAttributes === undefined ? {} : { encodeFailureAttributes }),
  });
  let events: HistoryEvent[];
  let result;
  try {
    const h = await engine.start(workflow, null, { taskId: 'pay-1' });
    result = await h.nextTurn();
    events = await engine.history('pay-1');
  } finally {
    await engine.shutdown({ graceMs: 0 });
  }
  return { dir, result, events };
}

describe('failures through the payload codec', () => {
  for (const wf of [leaky, leakyProcess]) {
    it(`${wf.name}: the secret is in no stored byte; the engine's result and replay read it back`, async () => {
      const { dir, result, events } = await failOnce(wf);
      expect(result.status).toBe('failed');
      expect(result.failure?.message).toBe(`charge declined for ${SECRET}`);
      expect(result.failure?.cause?.message).toBe(`gateway said no to ${SECRET}`);
      expect(result.failure?.stack).toContain(SECRET);
      expect(await rawStoreText(dir)).not.toContain('SECRET');

      const step = events.find((e) => e.type === 'StepCompleted');
      const failed = events.find((e) => e.type === 'TurnFailed');
      for (const f of [step?.type === 'StepCompleted' ? step.failure : undefined, failed?.type === 'TurnFailed' ? failed.failure : undefined]) {
        expect(f).toMatchObject({ message: 'Encoded failure', type: 'Error', cause: { message: 'Encoded failure' } });
        expect(f?.stack).toBeUndefined();
        expect(f?.encodedAttributes).toBeDefined();
      }
      const report = await replayHistory({ history: events, workflows: [leaky, leakyProcess], payloadCodecs: [encryptingCodec] });
      expect(report.results[0]).toMatchObject({ status: 'ok', terminal: 'TurnFailed' });
    });
  }

  it('a recovered attempt gets the recorded step failure back with its real message', async () => {
    let block = true;
    const catcher = defineWorkflow({
      name: 'catcher',
      kind: 'multi-turn',
      retry: { maxAttempts: 1 },
      turn: async (ctx) => {
        const message = await ctx.step('charge', () => Promise.reject(new Error(`declined ${SECRET}`))).catch((e: Error) => e.message);
        if (block) await new Promise<never>(() => undefined); // the engine dies here
        return ctx.suspend('done', message);
      },
    });
    const store = new MemoryHistoryStore();
    const clock = new ManualClock();
    const open = () => Engine.open({ store, clock, workflows: [catcher], payloadCodecs: [encryptingCodec], logger: silentLogger, scanIntervalMs: 0 });
    const e1 = await open();
    const h = await e1.start(catcher, null, { taskId: 'c1' });
    for (let i = 0; i < 500 && !(await h.history()).some((e) => e.type === 'StepCompleted'); i++) await new Promise((r) => setTimeout(r, 2));
    await e1.shutdown({ graceMs: 0 });
    block = false;
    const e2 = await open();
    try {
      const queued = (await e2.history('c1')).find((e) => e.type === 'InputQueued');
      const r = await e2.turnResult('c1', queued?.type === 'InputQueued' ? queued.inputId : '');
      expect(r).toMatchObject({ status: 'suspended', output: `declined ${SECRET}` });
    } finally {
      await e2.shutdown({ graceMs: 0 });
    }
  });

  it('a worker that dies of an uncaught error: its stderr tail (quoting the secret) is not stored; without encoding it is', async () => {
    const { dir, result, events } = await failOnce(leakyCrash);
    expect(result.status).toBe('failed');
    const crashed = events.find((e) => e.type === 'WorkerCrashed');
    expect(crashed?.type === 'WorkerCrashed' && crashed.message).toContain('stderr not stored');
    expect(await rawStoreText(dir)).not.toContain('SECRET');

    const control = await failOnce(leakyCrash, false);
    const shown = control.events.find((e) => e.type === 'WorkerCrashed');
    expect(shown?.type === 'WorkerCrashed' && shown.message).toContain(`charge declined for ${SECRET}`);
  }, 60_000);

  it('encodeFailureAttributes: false keeps messages readable without the codec (the control: bytes do show it)', async () => {
    const { dir, events } = await failOnce(leaky, false);
    expect(await rawStoreText(dir)).toContain(SECRET);
    const failed = events.find((e) => e.type === 'TurnFailed');
    expect(failed?.type === 'TurnFailed' && failed.failure.message).toBe(`charge declined for ${SECRET}`);
  });

  it('turnlog show: honest without the codec, readable with --codecs', async () => {
    const { dir } = await failOnce(leaky);
    const without = await cli(['--store', dir, 'show', 'pay-1']);
    expect(without.code, without.stderr).toBe(0);
    expect(without.stdout).toContain('Encoded failure (encoded by a payload codec; pass --codecs <module> to read it)');
    expect(without.stdout).not.toContain('SECRET');
    const withCodec = await cli(['--store', dir, '--codecs', SECRETS_JS, 'show', 'pay-1']);
    expect(withCodec.code, withCodec.stderr).toBe(0);
    expect(withCodec.stdout).toContain(`charge declined for ${SECRET}`);
    const json = await cliJSON(['--store', dir, '--codecs', SECRETS_JS, 'events', 'pay-1']);
    expect(JSON.stringify(json.json)).toContain(`charge declined for ${SECRET}`);
  });
});
