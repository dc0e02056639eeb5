/**
 * The install path (issue #10 item 13): pack the package from a checkout that has no dist/
 * (prepack must build it), install the tarball into a fresh app, import every entry point and
 * run the bin. Slow (npm pack + npm install): one file, generous timeout, no timing asserts.
 */
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const run = promisify(execFile);
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };

async function sh(cmd: string, args: string[], cwd: string): Promise<{ stdout: string; stderr: string }> {
  try {
    return await run(cmd, args, { cwd, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, env: { ...process.env, npm_config_update_notifier: 'false' } });
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; message: string };
    throw new Error(`${cmd} ${args.join(' ')} failed in ${cwd}: ${e.message}\n${e.stdout ?? ''}\n${e.stderr ?? ''}`);
  }
}

function walk(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : [join(dir, e.name)]));
}

describe('npm pack → npm install → import and run', () => {
  let tmp: { path: string; remove: () => Promise<void> };
  let app: string;
  let installed: string;

  beforeAll(async () => {
    tmp = await makeTmpDir('turnlog-pack-');
    // A "fresh clone": the files git would check out (tracked, or new and not ignored), no dist/.
    const checkout = join(tmp.path, 'checkout');
    const { stdout } = await sh('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], ROOT);
    for (const f of stdout.split('\0').filter(Boolean)) {
      if (!existsSync(join(ROOT, f))) continue; // deleted in the worktree, not yet committed
      mkdirSync(dirname(join(checkout, f)), { recursive: true });
      cpSync(join(ROOT, f), join(checkout, f));
    }
    expect(existsSync(join(checkout, 'dist'))).toBe(false);
    symlinkSync(join(ROOT, 'node_modules'), join(checkout, 'node_modules'), 'dir');
    await sh('npm', ['pack', '--pack-destination', tmp.path], checkout);
    const tarball = join(tmp.path, `turnlog-${pkg.version}.tgz`);
    expect(existsSync(tarball)).toBe(true);

    app = join(tmp.path, 'app');
    mkdirSync(app);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
    // Dependencies come from npm's cache (npm ci in the repo filled it); the registry is a fallback.
    await sh('npm', ['install', tarball, '--prefer-offline', '--no-audit', '--no-fund'], app);
    installed = join(app, 'node_modules', 'turnlog');
  }, 300_000);

  afterAll(async () => {
    await tmp?.remove();
  });

  it('ships the built entry points, LICENSE and the sources the source maps name', () => {
    for (const f of ['LICENSE', 'dist/src/index.js', 'dist/src/index.d.ts', 'dist/src/workflow/index.js', 'dist/src/testing/index.js', 'dist/src/cli/main.js', 'dist/src/executor/worker-runtime.cjs', 'dist/src/executor/worker-runtime-bundle.cjs', 'dist/src/executor/worker-runtime-bundle.cache', 'dist/src/executor/worker-runtime.inputs.json']) {
      expect(existsSync(join(installed, f)), f).toBe(true);
    }
    const maps = walk(join(installed, 'dist')).filter((f) => f.endsWith('.map'));
    expect(maps.length).toBeGreaterThan(10);
    const missing: string[] = [];
    for (const m of maps) {
      const map = JSON.parse(readFileSync(m, 'utf8')) as { sources: string[]; sourceRoot?: string; sourcesContent?: unknown[] };
      map.sources.forEach((s, i) => {
        if (map.sourcesContent?.[i] != null) return;
        const p = resolve(dirname(m), map.sourceRoot ?? '', s);
        if (!existsSync(p)) missing.push(`${relative(installed, m)} → ${relative(installed, p)}`);
      });
    }
    expect(missing).toEqual([]);
  });

  it('imports turnlog, turnlog/workflow and turnlog/testing, and loads the LevelDB binding', async () => {
    writeFileSync(
      join(app, 'check.mjs'),
      [
        "import * as main from 'turnlog';",
        "import * as workflow from 'turnlog/workflow';",
        "import * as testing from 'turnlog/testing';",
        "const store = await main.createLevelStore('./db');",
        'await store.open();',
        'await store.close();',
        'console.log(JSON.stringify([typeof main.Engine, typeof workflow.defineWorkflow, typeof testing.replayHistory, "level ok"]));',
      ].join('\n'),
    );
    const { stdout } = await sh(process.execPath, ['check.mjs'], app);
    expect(JSON.parse(stdout)).toEqual(['function', 'function', 'function', 'level ok']);
  });

  it('runs the bin: npx turnlog --version and turnlog list on an empty store', async () => {
    expect((await sh('npx', ['--no-install', 'turnlog', '--version'], app)).stdout.trim()).toBe(pkg.version);
    if (!existsSync(join(app, 'db'))) await sh(process.execPath, ['--input-type=module', '-e', "const s = await (await import('turnlog')).createLevelStore('./db'); await s.open(); await s.close();"], app);
    const list = await sh('npx', ['--no-install', 'turnlog', 'list', '--store', 'db', '--json'], app);
    expect(JSON.parse(list.stdout)).toEqual({ tasks: [], next: null });
  });
});
