// docs/isolation.md#limits promises what a cold worker loads: "the entry and N small modules, no
// protobufjs". Walks the static imports of the worker entry and checks both against the doc.
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
  it('is the entry and the number of turnlog modules docs/isolation.md states, without protobufjs', () => {
    const { files, packages } = graph('src/executor/child-main.ts');
    expect([...packages].filter((p) => !p.startsWith('node:'))).toEqual([]);
    expect([...files].some((f) => f.startsWith('src/internal/proto'))).toBe(false);
    const doc = readFileSync(join(ROOT, 'docs/isolation.md'), 'utf8');
    const stated = /the entry and (\w+) small modules, no protobufjs/.exec(doc)?.[1];
    expect(stated, 'docs/isolation.md states the worker module count').toBeDefined();
    expect(WORDS.indexOf(stated!), [...files].join('\n')).toBe(files.size - 1);
  });
});
