/**
 * A task the recovery pass leaves waiting for a scheduled input, its wake-up armed, keeps its due
 * claim until it expires (docs/scale-out.md: other engines do not load it and arm the same
 * wake-up meanwhile) and is dropped from the task cache (scanner.ts #parked). The load's pin,
 * which lasts until the next immediate, must not stop either.
 */
import { afterEach, expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import { silentLogger } from '../../src/logger.js';
import { Engine } from '../../src/runtime/engine.js';
import type { ReadOptions } from '../../src/store/history-store.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A memory store that says it claims due work, logging the claims released and the event reads. */
class Claiming extends MemoryHistoryStore {
  released: string[] = [];
  reads: string[] = [];
  constructor() {
    super();
    (this as { supports: unknown }).supports = { ...this.supports, claim: true };
  }
  async releaseDueWork(taskIds: readonly string[]): Promise<void> {
    this.released.push(...taskIds);
  }
  override async readEvents(taskId: string, options: ReadOptions = {}): Promise<HistoryEvent[]> {
    this.reads.push(taskId);
    return super.readEvents(taskId, options);
  }
}

const later = defineWorkflow({ name: 'later', kind: 'multi-turn', turn: async (_ctx, text: string) => text });

it('a task left waiting for a scheduled input keeps its due claim and leaves the cache', async () => {
  const store = new Claiming();
  await store.open();
  const at = Date.now() + 3_600_000;
  const first = await Engine.open({ store, workflows: [later], logger: silentLogger, scanIntervalMs: 0 });
  await first.start(later, 'later', { taskId: 'waiting', deliverAt: at });
  await first.start(later, 'now', { taskId: 'ready' });
  await first.task('ready').nextTurn();
  await first.shutdown({ graceMs: 0 });

  await store.open();
  store.released = [];
  const engine = await Engine.open({ store, workflows: [later], logger: silentLogger, scanIntervalMs: 0 });
  cleanups.push(() => engine.shutdown({ graceMs: 0 }));
  await engine.recovered();
  await engine.recover();
  // Its wake-up is armed: its claim stays (it expires on its own), unlike those of tasks that ran.
  expect(store.released).not.toContain('waiting');
  // Dropped from memory: the next use loads it again.
  await new Promise((r) => setImmediate(r));
  store.reads = [];
  await engine.task('waiting').send('sooner');
  expect(store.reads).toContain('waiting');
});
