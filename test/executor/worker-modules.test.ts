// docs/isolation.md#limits promises what a cold worker loads: "one bundled file and the N modules it
// shares with your workflows module". Checks the built bundle's imports and the sources against it.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '../..');
const WORDS = ['zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine', 'ten', 'eleven', 'twelve', 'thirteen', 'fourteen', 'fifteen'];

/** The worker entry's module graph: repo-relative source files, and the bare packages it imports. */
function graph(entry: string): { files: Set<string>; packages: Set<string> } {
  const files = new Set<string>();
  const packages = new Set<string>();
  const stack = [entry];
  while (stack.length > 0) {
    const file = stack.pop()!;
    if (files.has(file)) continue;
    files.add(file);
    const src = readFileSync(join(ROOT, file), 'utf8');
    // `import type` is erased at build time: the worker never loads those modules.
    for (const m of src.matchAll(/^(?:import|export)\s+(?!type\s)[^;]*?from\s+'([^']+)'|^import\s+'([^']+)'/gm)) {
      const spec = (m[1] ?? m[2])!;
      if (!spec.startsWith('.')) {
        packages.add(spec);
        continue;
      }
      const target = normalize(join(dirname(file), spec.replace(/\.js$/, '.ts')));
      expect(existsSync(join(ROOT, target)), `${file} imports ${spec}`).toBe(true);
      stack.push(relative('.', target));
    }
  }
  return { files, packages };
}

describe('what a cold process worker loads', () => {
  it('child-main and its modules import no package (node: built-ins only) and no protobuf module', () => {
    const { files, packages } = graph('src/executor/child-main.ts');
    expect([...packages].filter((p) => !p.startsWith('node:'))).toEqual([]);
    expect([...files].some((f) => f.startsWith('src/internal/proto'))).toBe(false);
  });

  it('is one bundled file and the shared modules docs/isolation.md states, which import nothing', () => {
    // The built bundle (npm run build): what it requires that is not a built-in is the shared modules,
    // and its entry (worker-runtime.cts) imports exactly those through the ES module loader.
    const bundle = readFileSync(join(ROOT, 'dist/src/executor/worker-runtime-bundle.cjs'), 'utf8');
    const shared = [...bundle.matchAll(/\brequire\("([^"]+)"\)/g)].map((m) => m[1]!).filter((s) => !s.startsWith('node:'));
    const entry = readFileSync(join(ROOT, 'src/executor/worker-runtime.cts'), 'utf8');
    expect([...entry.matchAll(/\bimport\('([^']+)'\)/g)].map((m) => m[1]!).sort()).toEqual([...shared].sort());
    const doc = readFileSync(join(ROOT, 'docs/isolation.md'), 'utf8');
    const stated = /turnlog's worker runtime \(one bundled file and the (\w+) modules it shares with your workflows module/.exec(doc)?.[1];
    expect(stated, 'docs/isolation.md states what a cold worker loads').toBeDefined();
    expect(WORDS.indexOf(stated!), shared.join('\n')).toBe(shared.length);
    for (const s of shared) {
      const file = normalize(join('src/executor', s.replace(/\.js$/, '.ts')));
      expect(doc, `docs/isolation.md names ${file}`).toContain(file.replace(/^src\//, ''));
      expect(graph(file).files.size, `${file} imports no other turnlog module`).toBe(1);
    }
  });
});
