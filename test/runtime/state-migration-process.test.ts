/**
 * A state migration with the process executor: the hook runs in the engine, the worker gets the
 * migrated state (docs/versioning.md#state-migrations). Workers import the compiled fixtures:
 * run `npx tsc -p tsconfig.json` first.
 */
import { fileURLToPath } from 'node:url';
import { afterEach, expect, it } from 'vitest';
import { ProcessExecutor } from '../../src/executor/process-executor.js';
import { silentLogger } from '../../src/logger.js';
import { Engine } from '../../src/runtime/engine.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { chatV2 } from '../fixtures/workflows/migrating-chat.js';

const MODULE = fileURLToPath(new URL('../../dist/test/fixtures/workflows/migrating-chat-v2.js', import.meta.url));
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

it('the engine migrates, the process worker runs the turn on the migrated state', async () => {
  // Two turns of version 1, recorded for a task that runs in process workers.
  const b = historyBuilder('chat', { tick: 10 }).created({ workflow: 'migrating-chat', kind: 'multi-turn', formatVersion: 2, policy: { executor: 'process' } });
  b.input('hello').turnStarted({ workflowVersion: 1 }).step('model', 'v1: hello').suspended('waiting', { output: 'v1: hello', state: { messages: ['hello', 'v1: hello'] } });
  const store = new MemoryHistoryStore();
  await store.open();
  await store.append('chat', b.build(), { expectedLastEventId: 0, generation: 1 });
  const exec = new ProcessExecutor({ workflowsModule: MODULE, execArgv: [], logger: silentLogger });
  const engine = await Engine.open({ store, workflows: [chatV2], executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0, inspect: false });
  cleanups.push(async () => {
    await engine.shutdown({ graceMs: 100 });
    await exec.close();
  });
  const r = await engine.turnResult('chat', await engine.sendInput('chat', 'to Paris'));
  expect(r.output).toBe('v2: to Paris (2 before)');
  const events = await engine.history('chat');
  const started = events.find((e) => e.type === 'TurnStarted' && e.turn === 2);
  expect(started).toMatchObject({ executor: 'process', workflowVersion: 2 });
  expect(events[events.indexOf(started!) - 1]).toMatchObject({ type: 'StateMigrated', fromVersion: 1, toVersion: 2 });
});
