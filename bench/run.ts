/**
 * Benchmark runner: imports every `*.bench.js` beside it (compiled `dist/bench/`) and runs
 * each module's `run()`. `node dist/bench/run.js store` runs only names containing "store".
 */
import { readdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const filter = process.argv[2] ?? '';
const files = readdirSync(here)
  .filter((f) => f.endsWith('.bench.js') && f.includes(filter))
  .sort();
if (files.length === 0) console.log(`no benchmark matches "${filter}"`);
for (const f of files) {
  const mod = (await import(pathToFileURL(`${here}/${f}`).href)) as { run?: () => Promise<void> };
  if (typeof mod.run !== 'function') throw new Error(`${f} does not export run()`);
  console.log(`# ${f.replace('.bench.js', '')}`);
  await mod.run();
}
