// The bundled worker runtime (scripts/bundle-worker.mjs, run by `npm run build`): which entry a
// process executor starts, the fallback to the unbundled child-main.js, and what crosses between
// the bundle and the workflows module. Real workers on the compiled fixtures: build first.
import { mkdirSync, readFileSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { ProcessExecutor, WORKER_ENTRY, WORKER_RUNTIME, pickChildEntry } from '../../src/executor/process-executor.js';
import { silentLogger } from '../../src/logger.js';
import { echo } from '../fixtures/workflows/echo.js';
import { realms } from '../fixtures/workflows/realms.js';
import { until } from '../helpers/processes.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const EXECUTOR_DIST = fileURLToPath(new URL('../../dist/src/executor/', import.meta.url));
const FIXTURES = fileURLToPath(new URL('../../dist/test/fixtures/workflows/', import.meta.url));

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** An engine whose process executor runs realms.js's workflows on `childEntry`. */
async function realmsEngine(childEntry: string): Promise<Engine> {
  const exec = new ProcessExecutor({ workflowsModule: join(FIXTURES, 'realms.js'), execArgv: [], logger: silentLogger, childEntry });
  const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [realms], executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0 });
  cleanups.push(() => engine.shutdown());
  return engine;
}

describe('pickChildEntry', () => {
  it('takes the bundle, unless it is missing or older than child-main.js; then the next directory', async () => {
    const tmp = await makeTmpDir('turnlog-entry-');
    cleanups.push(() => tmp.remove());
    const dir = (name: string, files: Record<string, number>) => {
      const d = join(tmp.path, name);
      mkdirSync(d);
      for (const [f, at] of Object.entries(files)) {
        writeFileSync(join(d, f), '');
        utimesSync(join(d, f), at, at);
      }
      return d;
    };
    const both = dir('both', { [WORKER_ENTRY]: 1000, [WORKER_RUNTIME]: 1001 });
    const stale = dir('stale', { [WORKER_ENTRY]: 1001, [WORKER_RUNTIME]: 1000 });
    const plain = dir('plain', { [WORKER_ENTRY]: 1000 });
    const bundleOnly = dir('bundle-only', { [WORKER_RUNTIME]: 1000 });
    const empty = dir('empty', {});
    expect(pickChildEntry([both])).toBe(join(both, WORKER_RUNTIME));
    expect(pickChildEntry([stale])).toBe(join(stale, WORKER_ENTRY));
    expect(pickChildEntry([plain])).toBe(join(plain, WORKER_ENTRY));
    expect(pickChildEntry([bundleOnly])).toBe(join(bundleOnly, WORKER_RUNTIME));
    expect(pickChildEntry([empty, both])).toBe(join(both, WORKER_RUNTIME));
    expect(pickChildEntry([empty])).toBeUndefined();
  });
});

describe('the built worker runtime', () => {
  it('imports only node: built-ins and the modules it shares with workflows modules', () => {
    const src = readFileSync(join(EXECUTOR_DIST, WORKER_RUNTIME), 'utf8');
    const specs = [...src.matchAll(/^import\b[^;]*?from\s*"([^"]+)"/gm)].map((m) => m[1]!);
    expect(specs.filter((s) => !s.startsWith('node:')).sort()).toEqual(['../errors.js', '../history/failure.js']);
    // node:crypto (nineteen internal modules) loads at the first ctx.idempotencyKey(), not at start.
    expect(specs).not.toContain('node:crypto');
  });

  // /proc/<pid>/cmdline names the entry a worker runs (Linux only).
  it.runIf(process.platform === 'linux')('is what a default executor starts, and a turn runs on it', async () => {
    const exec = new ProcessExecutor({ workflowsModule: join(FIXTURES, 'index.js'), execArgv: [], warmPool: 1, logger: silentLogger });
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [echo], executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0 });
    cleanups.push(() => engine.shutdown());
    await until(() => exec.readyWarmCount === 1, 'a warm worker');
    const argv = readFileSync(`/proc/${exec.workerPids[0]}/cmdline`, 'utf8').split('\0');
    expect(argv).toContain(join(EXECUTOR_DIST, WORKER_RUNTIME));
    const pid = exec.workerPids[0];
    const out = (await (await engine.start(echo, 'bundled')).result()) as { echo: string; pid: number };
    expect(out).toEqual({ echo: 'bundled', pid });
  });

  for (const entry of [WORKER_RUNTIME, WORKER_ENTRY]) {
    it(`${entry}: the handler meets its own turnlog's error classes, and a second copy's RetryAfterError is honoured`, async () => {
      const engine = await realmsEngine(join(EXECUTOR_DIST, entry));
      const h = await engine.start(realms, null);
      const out = (await h.result()) as { retriedAfterMs: number; invalidArgument: boolean; replayedFailure: boolean; secondCopy: boolean };
      expect(out).toMatchObject({ invalidArgument: true, replayedFailure: true, secondCopy: true });
      // The suggested 1 ms, not the 40 s backoff (a loose bound: the machine is shared).
      expect(out.retriedAfterMs).toBeLessThan(20_000);
      expect((await h.history()).filter((e) => e.type === 'WorkerCrashed')).toHaveLength(1);
    });
  }
});
