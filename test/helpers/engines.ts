/**
 * Engines for a test file: `open()` starts one on a memory store (silent, no periodic scan) and
 * the file's afterEach shuts every one of them down.
 */
import { afterEach } from 'vitest';
import { Engine, type EngineOptions } from '../../src/runtime/engine.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { silentLogger } from '../../src/logger.js';

export function engineOpener(graceMs = 0): (options: Partial<EngineOptions> & Pick<EngineOptions, 'workflows'>) => Promise<Engine> {
  const engines: Engine[] = [];
  afterEach(async () => {
    for (const e of engines.splice(0)) await e.shutdown({ graceMs });
  });
  return async (options) => {
    const engine = await Engine.open({ store: new MemoryHistoryStore(), logger: silentLogger, scanIntervalMs: 0, ...options });
    engines.push(engine);
    return engine;
  };
}
