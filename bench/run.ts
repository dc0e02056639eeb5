/**
 * Benchmark runner: imports every `*.bench.js` beside it (compiled `dist/bench/`) and runs
 * each module's `run()`. Arguments name sections exactly (the file name without `.bench.js`):
 * `node dist/bench/run.js engine` runs `engine` only, not `postgres-engines`;
 * `node dist/bench/run.js store engine` runs both. No argument runs every section.
 */
import { readdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const sections = readdirSync(here)
  .filter((f) => f.endsWith('.bench.js'))
  .map((f) => f.slice(0, -'.bench.js'.length))
  .sort();
const wanted = process.argv.slice(2);
const unknown = wanted.filter((name) => !sections.includes(name));
if (unknown.length > 0) {
  console.error(`no benchmark section named ${unknown.map((n) => `"${n}"`).join(', ')}; sections: ${sections.join(', ')}`);
  process.exit(2);
}
for (const name of wanted.length === 0 ? sections : sections.filter((s) => wanted.includes(s))) {
  const mod = (await import(pathToFileURL(`${here}/${name}.bench.js`).href)) as { run?: () => Promise<void> };
  if (typeof mod.run !== 'function') throw new Error(`${name}.bench.js does not export run()`);
  console.log(`# ${name}`);
  await mod.run();
}
