// defineWorkflow({ version }) is recorded on every TurnStarted (docs/versioning.md#workflow-versions):
// a history says which code ran each attempt; a workflow without one records nothing new.
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { decodeEvent, encodeEvent } from '../../src/history/codec.js';
import { isTurnlogError } from '../../src/errors.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

describe('workflow version', () => {
  it('is recorded on TurnStarted, and absent for a workflow without one', async () => {
    const v2 = defineWorkflow({ name: 'v2', version: 2, turn: async () => 'ok' });
    const plain = defineWorkflow({ name: 'plain', turn: async () => 'ok' });
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [v2, plain], logger: silentLogger, scanIntervalMs: 0 });
    cleanups.push(() => engine.shutdown({ graceMs: 100 }));
    const a = await engine.start(v2, null);
    await a.result();
    const started = (await a.history()).find((e) => e.type === 'TurnStarted');
    expect(started).toMatchObject({ workflowVersion: 2 });
    // It survives the history codec (field 12 of TurnStarted).
    expect(decodeEvent(encodeEvent(started!), 't')).toEqual(started);
    const b = await engine.start(plain, null);
    await b.result();
    expect((await b.history()).find((e) => e.type === 'TurnStarted')).not.toHaveProperty('workflowVersion');
  });

  it('must be a positive integer', () => {
    for (const version of [0, -1, 1.5, Number.NaN]) {
      let err: unknown;
      try {
        defineWorkflow({ name: 'bad', version, turn: async () => null });
      } catch (e) {
        err = e;
      }
      expect(isTurnlogError(err, 'TURNLOG_WORKFLOW_INVALID'), String(version)).toBe(true);
    }
  });
});
