/**
 * engine.stream() across the engine's lifecycle (runtime/streams.ts): the hub is replaced at every
 * quiesce, and a reader is bound to a hub when its generator body first runs, at its first next().
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import type { StreamItem } from '../../src/stream/items.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';

const engines: Engine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
});

const multi = defineWorkflow({ name: 'multi', kind: 'multi-turn', turn: async (ctx, x: string) => ctx.suspend('waiting', x) });

async function readUntil(it: AsyncIterable<StreamItem>, stop: (i: StreamItem) => boolean): Promise<string[]> {
  const out: string[] = [];
  for await (const item of it) {
    out.push(item.kind);
    if (stop(item)) break;
  }
  return out;
}

describe('engine.stream() and re-activation', () => {
  it('a reader made before deactivate() and first read after activate() reads the task (it did before 782ba62), not an empty stream', async () => {
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [multi], logger: silentLogger, scanIntervalMs: 0 });
    engines.push(engine);
    const h = await engine.start(multi, 'hi', { taskId: 'r1' });
    await h.nextTurn();
    const reader = engine.stream('r1');
    await engine.deactivate({ graceMs: 0 });
    await engine.activate();
    expect(await readUntil(reader, (i) => i.kind === 'turn-ended')).toEqual(['input-queued', 'turn-started', 'turn-ended']);
  });

  it('a reader reading when the engine deactivates ends (without throwing); one made afterwards reads on', async () => {
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [multi], logger: silentLogger, scanIntervalMs: 0 });
    engines.push(engine);
    const h = await engine.start(multi, 'hi', { taskId: 'r2' });
    await h.nextTurn();
    const seen: string[] = [];
    let ended!: () => void;
    const sawEnd = new Promise<void>((r) => (ended = r));
    const reading = (async () => {
      for await (const item of engine.stream('r2')) {
        seen.push(item.kind);
        if (item.kind === 'turn-ended') ended();
      }
    })();
    await sawEnd;
    await engine.deactivate({ graceMs: 0 });
    await engine.activate();
    await reading;
    expect(seen).toEqual(['input-queued', 'turn-started', 'turn-ended']);
    // After the re-activation a new turn streams to a new reader, live.
    let turns = 0;
    const later = readUntil(engine.stream('r2'), (i) => i.kind === 'turn-ended' && ++turns === 2);
    await h.send('again');
    expect(await later).toEqual(['input-queued', 'turn-started', 'turn-ended', 'input-queued', 'turn-started', 'turn-ended']);
  });

  it('a reader made before shutdown() and first read after it fails with TURNLOG_ENGINE_CLOSED, not the capture-mode error', async () => {
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [multi], logger: silentLogger, scanIntervalMs: 0 });
    const h = await engine.start(multi, 'hi', { taskId: 'r3' });
    await h.nextTurn();
    const reader = engine.stream('r3');
    await engine.shutdown({ graceMs: 0 });
    const err = await readUntil(reader, () => false).then(() => undefined, (e: unknown) => e as { code?: string; message?: string });
    expect(err?.code).toBe('TURNLOG_ENGINE_CLOSED');
    expect(err?.message).toContain('closed');
    // A deactivated engine (re-activatable) still says how to activate it.
    const again = await Engine.open({ store: new MemoryHistoryStore(), workflows: [multi], logger: silentLogger, scanIntervalMs: 0 });
    engines.push(again);
    await (await again.start(multi, 'hi', { taskId: 'r4' })).nextTurn();
    const idle = again.stream('r4');
    await again.deactivate({ graceMs: 0 });
    const notActive = await readUntil(idle, () => false).then(() => undefined, (e: unknown) => e as { code?: string });
    expect(notActive?.code).toBe('TURNLOG_ENGINE_NOT_ACTIVATED');
  });
});
