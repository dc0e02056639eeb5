/**
 * docs/versioning.md#state-migrations: a migrateState hook whose result is over the state limit
 * fails the turn with TURNLOG_STATE_MIGRATION_FAILED, its cause the TURNLOG_PAYLOAD_TOO_LARGE of
 * the result, before the handler runs; the turn's TurnStarted and TurnFailed are written, no
 * StateMigrated, and the stored state keeps its shape and version.
 */
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/logger.js';
import { Engine } from '../../src/runtime/engine.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';

const v1 = defineWorkflow({
  name: 'chat',
  kind: 'multi-turn',
  version: 1,
  initialState: () => ({ n: 0 }),
  turn: async (ctx, _text: string) => ++ctx.state.n,
});

let handlerRuns = 0;
const v2 = defineWorkflow({
  name: 'chat',
  kind: 'multi-turn',
  version: 2,
  initialState: () => ({ n: 0, pad: '' }),
  migrateState: (s) => ({ ...(s as { n: number }), pad: 'x'.repeat(10_000) }),
  turn: async (ctx, _text: string) => {
    handlerRuns++;
    return ++ctx.state.n;
  },
});

describe('a migrateState result over the state limit', () => {
  it('fails the turn (TURNLOG_STATE_MIGRATION_FAILED, cause TURNLOG_PAYLOAD_TOO_LARGE), writes TurnStarted and TurnFailed only, keeps the state', async () => {
    const store = new MemoryHistoryStore();
    const before = await Engine.open({ store, workflows: [v1], logger: silentLogger, scanIntervalMs: 0 });
    await (await before.start(v1, 'hello', { taskId: 'c' })).nextTurn();
    await before.shutdown();

    const after = await Engine.open({ store, workflows: [v2], logger: silentLogger, scanIntervalMs: 0, limits: { stateBytes: 4096 } });
    const n = (await after.history('c')).length;
    const r = await after.turnResult('c', await after.sendInput('c', 'again'));
    expect(r.status).toBe('failed');
    expect(r.failure).toMatchObject({ code: 'TURNLOG_STATE_MIGRATION_FAILED', cause: { code: 'TURNLOG_PAYLOAD_TOO_LARGE' } });
    // The hook is named once, and the message reads as one sentence per part.
    const m = r.failure!.message;
    expect(m.split('the migrateState hook').length).toBe(2);
    expect(m).toMatch(/^Task c: the migrateState hook of workflow chat \(version 1 → 2\) failed: its result: state is \d+ bytes, over the 4096-byte limit/);
    expect(m).not.toContain('..');
    expect(handlerRuns).toBe(0);
    const written = (await after.history('c')).slice(n).map((e) => e.type);
    expect(written).toEqual(['InputQueued', 'LeaseClaimed', 'TurnStarted', 'TurnFailed']);
    expect((await after.describe('c')).state).toEqual({ n: 1 });
    await after.shutdown();
  });
});
