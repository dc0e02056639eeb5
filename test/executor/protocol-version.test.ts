// Mixed installs are refused (docs/isolation.md#protocol): protocol 2 (one Record/Ack frame pair
// for every recorded call kind) cannot talk to a protocol 1 worker, whose per-kind frames it no
// longer reads. The worker's first frame names its version; the engine kills it and fails the turn.
// Workers import the compiled fixtures (dist/test/fixtures/peers): run `npx tsc -p tsconfig.json` first.
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { ProcessExecutor } from '../../src/executor/process-executor.js';
import { PROTOCOL_VERSION } from '../../src/executor/protocol.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { silentLogger } from '../../src/logger.js';

const V1_MODULE = fileURLToPath(new URL('../../dist/test/fixtures/peers/protocol-v1.js', import.meta.url));
const v1Peer = defineWorkflow({ name: 'v1-peer', executor: 'process', turn: async () => 'ran on a v1 peer' });

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe('worker protocol version', () => {
  it('is 3: one Record/Ack frame pair for every recorded call kind, and Signals pushed to a waiting worker', () => {
    expect(PROTOCOL_VERSION).toBe(3);
  });

  it('refuses a protocol 1 worker with TURNLOG_WORKER_PROTOCOL; nothing of the turn runs there', async () => {
    const exec = new ProcessExecutor({ workflowsModule: V1_MODULE, execArgv: [], logger: silentLogger });
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [v1Peer], executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0 });
    cleanups.push(() => exec.close(), () => engine.shutdown({ graceMs: 100 }));
    const h = await engine.start(v1Peer, null);
    await expect(h.result()).rejects.toMatchObject({ code: 'TURNLOG_TURN_FAILED' });
    const history = await h.history();
    const failed = history.find((e) => e.type === 'TurnFailed');
    expect(failed?.type === 'TurnFailed' && failed.failure.code).toBe('TURNLOG_WORKER_PROTOCOL');
    expect(failed?.type === 'TurnFailed' && failed.failure.message).toMatch(/worker speaks protocol 1, the engine 3 \(mixed installs\?\)/);
    expect(history.some((e) => e.type === 'TurnCompleted')).toBe(false);
  });
});
