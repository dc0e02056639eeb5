/**
 * Review probes: SnapshotLifecycle idempotency must never leave open handles behind.
 */
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { SnapshotLifecycle } from '../../src/runtime/lifecycle.js';
import { silentLogger } from '../../src/logger.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';

const wf = defineWorkflow({ name: 'w', kind: 'multi-turn', turn: (_ctx, x: string) => x });

describe('review: beforeSnapshot idempotency', () => {
  it('a beforeSnapshot after a new lifespan start quiesces again (idempotent only while nothing is active)', async () => {
    const engine = Engine.create({ store: new MemoryHistoryStore(), workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    const lifecycle = new SnapshotLifecycle({ engine, capture: false, env: {} });
    try {
      expect(await lifecycle.start()).toBe('active');
      await lifecycle.beforeSnapshot();
      expect(engine.active).toBe(false);
      // A new lifespan in the same process (cold start again), then another snapshot.
      expect(await lifecycle.start()).toBe('active');
      expect(engine.active).toBe(true);
      await lifecycle.beforeSnapshot();
      expect(engine.active).toBe(false);
    } finally {
      await engine.shutdown({ graceMs: 0 });
    }
  });

  it('a repeated beforeSnapshot with nothing active stays a no-op (the baseline is not refreshed)', async () => {
    const env: NodeJS.ProcessEnv = { A: '1' };
    const engine = Engine.create({ store: new MemoryHistoryStore(), workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    const lifecycle = new SnapshotLifecycle({ engine, capture: true, env });
    try {
      await lifecycle.afterRestore({ sessionId: 's', restoreId: 'r1', env: { A: '2' } });
      await lifecycle.beforeSnapshot();
      env['A'] = '3';
      await lifecycle.beforeSnapshot();
      await lifecycle.afterRestore({ sessionId: 's', restoreId: 'r2' });
      expect(env['A']).toBe('2');
    } finally {
      await engine.shutdown({ graceMs: 0 });
    }
  });
});
