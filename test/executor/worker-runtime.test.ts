// The bundled worker runtime (scripts/bundle-worker.mjs, run by `npm run build`): which entry a
// process executor starts, the fallback to the unbundled child-main.js, and what crosses between
// the bundle and the workflows module. Real workers on the compiled fixtures: build first.
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { ProcessExecutor } from '../../src/executor/process-executor.js';
import { WORKER_ENTRY, WORKER_RUNTIME, WORKER_RUNTIME_INPUTS, pickChildEntry } from '../../src/executor/worker-entry.js';
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
  it('takes the bundle while every module its stamp names has the bytes it was built from; else child-main.js; then the next directory', async () => {
    const tmp = await makeTmpDir('turnlog-entry-');
    cleanups.push(() => tmp.remove());
    const sha = (text: string) => createHash('sha256').update(text).digest('hex');
    /** A directory with `files`; `stamp` names the modules (and their text) the bundle was built from. */
    const dir = (name: string, files: Record<string, string>, stamp?: Record<string, string>) => {
      const d = join(tmp.path, name);
      mkdirSync(d);
      for (const [f, text] of Object.entries(files)) writeFileSync(join(d, f), text);
      if (stamp) writeFileSync(join(d, WORKER_RUNTIME_INPUTS), JSON.stringify({ inputs: Object.fromEntries(Object.entries(stamp).map(([f, t]) => [f, sha(t)])) }));
      return d;
    };
    const built = { [WORKER_ENTRY]: 'main v1', 'protocol.js': 'protocol v1' };
    const both = dir('both', { ...built, [WORKER_RUNTIME]: 'bundle' }, built);
    // tsc ran again without the bundling step: child-main.js changed.
    const stale = dir('stale', { ...built, [WORKER_ENTRY]: 'main v2', [WORKER_RUNTIME]: 'bundle' }, built);
    // A module the bundle carries was patched after the build (patch-package, a hand edit).
    const patched = dir('patched', { ...built, 'protocol.js': 'protocol v1, patched', [WORKER_RUNTIME]: 'bundle' }, built);
    const unstamped = dir('unstamped', { ...built, [WORKER_RUNTIME]: 'bundle' });
    const plain = dir('plain', built);
    const bundleOnly = dir('bundle-only', { [WORKER_RUNTIME]: 'bundle' });
    const empty = dir('empty', {});
    expect(pickChildEntry([both])).toBe(join(both, WORKER_RUNTIME));
    expect(pickChildEntry([stale])).toBe(join(stale, WORKER_ENTRY));
    expect(pickChildEntry([patched])).toBe(join(patched, WORKER_ENTRY));
    expect(pickChildEntry([unstamped])).toBe(join(unstamped, WORKER_ENTRY));
    expect(pickChildEntry([plain])).toBe(join(plain, WORKER_ENTRY));
    expect(pickChildEntry([bundleOnly])).toBe(join(bundleOnly, WORKER_RUNTIME));
    expect(pickChildEntry([empty, both])).toBe(join(both, WORKER_RUNTIME));
    expect(pickChildEntry([empty])).toBeUndefined();
  });

  it('the build stamps the bundle with every module it carries (the built dist/ picks its bundle)', () => {
    const stamp = JSON.parse(readFileSync(join(EXECUTOR_DIST, WORKER_RUNTIME_INPUTS), 'utf8')) as { inputs: Record<string, string> };
    expect(Object.keys(stamp.inputs)).toContain(WORKER_ENTRY);
    expect(Object.keys(stamp.inputs)).toContain('protocol.js');
    // The modules shared with the workflows module are not carried, so not stamped.
    expect(Object.keys(stamp.inputs).some((f) => f.endsWith('errors.js') || f.endsWith('failure.js'))).toBe(false);
    expect(pickChildEntry([EXECUTOR_DIST])).toBe(join(EXECUTOR_DIST, WORKER_RUNTIME));
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
