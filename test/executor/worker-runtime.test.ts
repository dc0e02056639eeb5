// The bundled worker runtime (scripts/bundle-worker.mjs, run by `npm run build`): which entry a
// process executor starts, the fallback to the unbundled child-main.js, its code cache, and what
// crosses between the bundle and the workflows module. Real workers on the compiled fixtures: build first.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Script } from 'node:vm';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { ProcessExecutor } from '../../src/executor/process-executor.js';
import { WORKER_ENTRY, WORKER_RUNTIME, WORKER_RUNTIME_BUNDLE, WORKER_RUNTIME_INPUTS, pickChildEntry } from '../../src/executor/worker-entry.js';
import { silentLogger } from '../../src/logger.js';
import { echo } from '../fixtures/workflows/echo.js';
import { realms } from '../fixtures/workflows/realms.js';
import type { Workflow } from '../../src/workflow/define-workflow.js';
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
    const bundled = { [WORKER_RUNTIME]: 'entry', [WORKER_RUNTIME_BUNDLE]: 'bundle' };
    const both = dir('both', { ...built, ...bundled }, built);
    // tsc ran again without the bundling step: child-main.js changed.
    const stale = dir('stale', { ...built, [WORKER_ENTRY]: 'main v2', ...bundled }, built);
    // A module the bundle carries was patched after the build (patch-package, a hand edit).
    const patched = dir('patched', { ...built, 'protocol.js': 'protocol v1, patched', ...bundled }, built);
    const unstamped = dir('unstamped', { ...built, ...bundled });
    // tsc emits the entry (worker-runtime.cts); the bundling step never ran.
    const entryOnly = dir('entry-only', { ...built, [WORKER_RUNTIME]: 'entry' }, built);
    const plain = dir('plain', built);
    const bundleOnly = dir('bundle-only', bundled);
    const empty = dir('empty', {});
    expect(pickChildEntry([both])).toBe(join(both, WORKER_RUNTIME));
    expect(pickChildEntry([stale])).toBe(join(stale, WORKER_ENTRY));
    expect(pickChildEntry([patched])).toBe(join(patched, WORKER_ENTRY));
    expect(pickChildEntry([unstamped])).toBe(join(unstamped, WORKER_ENTRY));
    expect(pickChildEntry([entryOnly])).toBe(join(entryOnly, WORKER_ENTRY));
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
  it('requires only node: built-ins and the modules it shares with workflows modules', () => {
    const src = readFileSync(join(EXECUTOR_DIST, WORKER_RUNTIME_BUNDLE), 'utf8');
    const specs = [...src.matchAll(/\brequire\("([^"]+)"\)/g)].map((m) => m[1]!);
    expect(specs.filter((s) => !s.startsWith('node:')).sort()).toEqual(['../errors.js', '../history/failure.js']);
    // node:crypto (nineteen internal modules) loads at the first ctx.idempotencyKey(), not at start.
    expect(specs).not.toContain('node:crypto');
    // The bundle is a function body run by the entry: import() is the entry's, passed in.
    expect(src).not.toMatch(/(?<![\w$])import\(/);
  });

  it('is strict code, as the ES modules it was bundled from were (the entry compiles it as a function body)', () => {
    const src = readFileSync(join(EXECUTOR_DIST, WORKER_RUNTIME_BUNDLE), 'utf8');
    // Compiled as the entry compiles it (worker-runtime.cts), not run: the script's value is the function.
    const body = new Script(`(function (require, __import) {\n${src}\n})`).runInThisContext() as () => void;
    // Only a strict function refuses to give its caller; a sloppy one gives null (and its code
    // would fail silently where the modules it came from throw: a write to a frozen object).
    expect(() => (body as unknown as { caller: unknown }).caller).toThrow(TypeError);
  });

  it('starts from the code cache the build made for this Node', () => {
    // In a plain node (vitest's own flags could change V8's flag hash, which the cache checks).
    const check = `const fs = require('node:fs'), vm = require('node:vm');
      const cache = fs.readFileSync(process.argv[1]), n = cache.readUInt32LE(4);
      const s = new vm.Script(cache.subarray(8, 8 + n).toString('utf8'), { cachedData: cache.subarray(8 + n) });
      process.stdout.write(String(s.cachedDataRejected) + ' ' + (cache.toString('latin1', 8, 8 + n) === Buffer.concat([Buffer.from('(function (require, __import) {\\n'), fs.readFileSync(process.argv[2]), Buffer.from('\\n})')]).toString('latin1')));`;
    const out = execFileSync(process.execPath, ['-e', check, join(EXECUTOR_DIST, 'worker-runtime-bundle.cache'), join(EXECUTOR_DIST, WORKER_RUNTIME_BUNDLE)], { encoding: 'utf8' });
    expect(out).toBe('false true');
  });

  it('never runs a cache made from other bytes, even of the same length (V8 checks only the length)', async () => {
    const tmp = await makeTmpDir('turnlog-cache-');
    cleanups.push(() => tmp.remove());
    // The built entry beside a bundle of our own; the shared modules are empty ES modules.
    const dir = join(tmp.path, 'executor');
    mkdirSync(dir);
    mkdirSync(join(tmp.path, 'history'));
    writeFileSync(join(tmp.path, 'package.json'), '{"type":"module"}');
    writeFileSync(join(tmp.path, 'errors.js'), 'export {};');
    writeFileSync(join(tmp.path, 'history/failure.js'), 'export {};');
    copyFileSync(join(EXECUTOR_DIST, WORKER_RUNTIME), join(dir, WORKER_RUNTIME));
    const cache = join(dir, 'worker-runtime-bundle.cache');
    const run = (body: string, ...args: string[]) => {
      writeFileSync(join(dir, WORKER_RUNTIME_BUNDLE), `require('node:fs').writeSync(1, '${body}');`);
      return execFileSync(process.execPath, [join(dir, WORKER_RUNTIME), ...args], { encoding: 'utf8' });
    };
    expect(run('body A', `--code-cache-out=${cache}`)).toBe('body A');
    expect(existsSync(cache)).toBe(true);
    expect(run('body A')).toBe('body A');
    expect(run('body B')).toBe('body B');
    writeFileSync(cache, 'not a cache');
    expect(run('corrupt cache')).toBe('corrupt cache');
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

  // require() of an ES module (the package) needs Node 20.19+ (process.features.require_module).
  it.runIf((process.features as { require_module?: boolean }).require_module === true)('runs a CommonJS workflows module (require of the built package): its instanceof meets the classes the runtime throws', async () => {
    const tmp = await makeTmpDir('turnlog-cjs-');
    cleanups.push(() => tmp.remove());
    const file = join(tmp.path, 'workflows.cjs');
    const dist = fileURLToPath(new URL('../../dist/src/', import.meta.url));
    writeFileSync(
      file,
      `const { defineWorkflow, TurnlogError } = require(${JSON.stringify(join(dist, 'index.js'))});
      exports.cjsWorkflow = defineWorkflow({
        name: 'cjs-module',
        executor: 'process',
        turn: async (ctx, input) => {
          const doubled = await ctx.step('double', () => input * 2);
          let invalidArgument = false;
          try {
            await ctx.step('bad-timeout', () => 1, { timeoutMs: -1 });
          } catch (err) {
            invalidArgument = err instanceof TurnlogError;
          }
          return { doubled, invalidArgument, pid: process.pid };
        },
      });\n`,
    );
    const mod = (await import(pathToFileURL(file).href)) as { cjsWorkflow: Workflow };
    const exec = new ProcessExecutor({ workflowsModule: file, execArgv: [], logger: silentLogger, childEntry: join(EXECUTOR_DIST, WORKER_RUNTIME) });
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [mod.cjsWorkflow], executors: { process: exec }, logger: silentLogger, scanIntervalMs: 0 });
    cleanups.push(() => engine.shutdown());
    const out = (await (await engine.start(mod.cjsWorkflow, 21)).result()) as { doubled: number; invalidArgument: boolean; pid: number };
    expect(out).toMatchObject({ doubled: 42, invalidArgument: true });
    expect(out.pid).not.toBe(process.pid);
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
