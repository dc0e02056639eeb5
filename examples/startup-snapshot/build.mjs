// Builds the startup snapshot: bundle app.ts into one CommonJS file (the snapshot builder runs a
// single script and can require only built-in modules), then run it under --build-snapshot.
//   node examples/startup-snapshot/build.mjs <outDir> [storeDir]
// Writes <outDir>/app.cjs and <outDir>/app.blob. Exported as build() for the test and measure.mjs.
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const root = resolve(here, '../..');

/**
 * `level` (and its native classic-level binding) cannot be in a snapshot. The bundle gets a
 * stand-in whose constructor requires the real package from the project at first use, which is
 * activation time, after the snapshot was deserialized.
 */
function lazyLevel() {
  return {
    name: 'turnlog-lazy-level',
    resolveId(id) {
      if (id === 'level') return '\0lazy-level';
      return null;
    },
    load(id) {
      if (id !== '\0lazy-level') return null;
      return `
const from = ${JSON.stringify(join(root, 'package.json'))};
let real;
export class Level {
  constructor(...args) {
    // The builder's require loads built-ins only; createRequire reaches node_modules at run time.
    real ??= require('node:module').createRequire(from)('level');
    return new real.Level(...args);
  }
}`;
    },
  };
}

/** Bundles app.ts (TypeScript sources, resolved by rolldown) into `<outDir>/app.cjs`. */
export async function bundle(outDir) {
  // rolldown: a pinned devDependency (the same version vite 8 bundles with); see README.md.
  const { rolldown } = await import('rolldown');
  const b = await rolldown({ input: join(here, 'app.ts'), platform: 'node', plugins: [lazyLevel()], logLevel: 'warn' });
  const file = join(outDir, 'app.cjs');
  await b.write({ file, format: 'cjs', codeSplitting: false });
  await b.close();
  return file;
}

/** Bundles, then builds `<outDir>/app.blob` in capture mode with the store directory baked in. */
export async function build(outDir, storeDir) {
  mkdirSync(outDir, { recursive: true });
  const entry = await bundle(outDir);
  const blob = join(outDir, 'app.blob');
  const env = { ...process.env, TURNLOG_SNAPSHOT_CAPTURE: 'true', DEMO_STORE: storeDir };
  const r = spawnSync(process.execPath, ['--snapshot-blob', blob, '--build-snapshot', entry], { cwd: outDir, env, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`--build-snapshot failed (${r.status ?? r.signal}):\n${r.stderr}`);
  return { entry, blob, stderr: r.stderr };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const outDir = resolve(process.argv[2] ?? join(here, 'out'));
  const storeDir = resolve(process.argv[3] ?? join(outDir, 'store'));
  const { entry, blob } = await build(outDir, storeDir);
  console.log(`bundle ${entry}\nsnapshot ${blob}\nstore ${storeDir}`);
}
