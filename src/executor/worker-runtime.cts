/**
 * A process worker's entry when the build bundled its runtime (scripts/bundle-worker.mjs): a
 * CommonJS script that compiles the bundle (worker-runtime-bundle.cjs, child-main.js and its
 * modules) with the V8 code cache the build made, and runs it. Node 20 caches no compiled code
 * for ES modules; a `vm.Script` takes `cachedData` (docs/decisions.md, "Cold process workers").
 *
 * The cache is used only if it embeds exactly the bytes compiled here: V8 itself checks the
 * text's length, not its bytes, so a same-length edit would otherwise run the old bytecode.
 * A missing, stale or rejected cache (another Node or V8 flags) compiles from the text.
 */
import fs = require('node:fs');
import path = require('node:path');
import vm = require('node:vm');

const BUNDLE = path.join(__dirname, 'worker-runtime-bundle.cjs');
const CACHE = path.join(__dirname, 'worker-runtime-bundle.cache');
/** `--code-cache-out=<file>`: write the cache at exit (the build's own run, never the engine's). */
const CACHE_OUT = '--code-cache-out=';
/** Cache file: this tag, the compiled text's byte length (u32 LE), the text, then V8's data. */
const TAG = 'TLC1';

type Bundle = (require: (id: string) => unknown, importModule: (specifier: string) => Promise<unknown>) => void;

// The two modules the bundle shares with the workflows module (errors.js, history/failure.js)
// load through the ES module loader, so a handler's `instanceof` meets the same classes.
const shared = Promise.all([import('../errors.js'), import('../history/failure.js')]);
const HEAD = '(function (require, __import) {\n';
const TAIL = '\n})';
const bundle = fs.readFileSync(BUNDLE);
// The bytes compiled, as bytes: encoding the text (non-ASCII, so two-byte in V8) cost ~2.5 M instructions.
const compiled = Buffer.concat([Buffer.from(HEAD), bundle, Buffer.from(TAIL)]);
const script = new vm.Script(HEAD + bundle.toString('utf8') + TAIL, { filename: BUNDLE, lineOffset: -1, cachedData: cachedDataFor(compiled) });

/** V8's data from the cache file, if the file was made from exactly the bytes `compiled`. */
function cachedDataFor(bytes: Buffer): Buffer | undefined {
  let file: Buffer;
  try {
    file = fs.readFileSync(CACHE);
  } catch {
    return undefined;
  }
  if (file.length < 8 || file.toString('latin1', 0, 4) !== TAG || file.readUInt32LE(4) !== bytes.length) return undefined;
  const end = 8 + bytes.length;
  return file.length > end && file.subarray(8, end).equals(bytes) ? file.subarray(end) : undefined;
}

const out = process.argv.find((a) => a.startsWith(CACHE_OUT))?.slice(CACHE_OUT.length);
if (out) {
  // After the run, so the functions it compiled lazily are in the cache too. Renamed into place:
  // a worker starting meanwhile reads the old file or the new one, never half of one.
  process.once('exit', () => {
    const head = Buffer.alloc(8);
    head.write(TAG, 0, 'latin1');
    head.writeUInt32LE(compiled.length, 4);
    fs.writeFileSync(`${out}.tmp`, Buffer.concat([head, compiled, script.createCachedData()]));
    fs.renameSync(`${out}.tmp`, out);
  });
}

void shared.then(([errors, failure]) => {
  const modules: Record<string, unknown> = { '../errors.js': errors, '../history/failure.js': failure };
  (script.runInThisContext() as Bundle)((id) => modules[id] ?? require(id), (specifier) => import(specifier));
});
