/**
 * The replayer is pure (DESIGN.md invariant 8): src/replay imports only src/replay and
 * src/history (plus src/errors.ts, a leaf module with no imports), nothing with I/O, and never
 * reads a clock or randomness. Modules of src/history that replay reaches are checked too.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { importsOf } from '../helpers/imports.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const replayDir = join(root, 'src/replay');

function tsFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? tsFiles(p) : p.endsWith('.ts') ? [p] : [];
  });
}


const BANNED_CALLS: [RegExp, string][] = [
  [/\bDate\.now\b/, 'Date.now'],
  [/\bnew\s+Date\s*\(\s*\)/, 'new Date()'],
  [/\bperformance\.now\b/, 'performance.now'],
  [/\bMath\.random\b/, 'Math.random'],
];
const BANNED_MODULE = /^(node:|fs$|fs\/|level$|classic-level|child_process$|worker_threads$|net$|http)/;

function violations(file: string, allowedDirs: string[]): string[] {
  const src = readFileSync(file, 'utf8');
  // Comments may mention the banned names; code may not.
  const code = src.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:])\/\/.*$/gm, '$1');
  const out: string[] = [];
  for (const [re, name] of BANNED_CALLS) if (re.test(code)) out.push(`${relative(root, file)} uses ${name}`);
  for (const spec of importsOf(code)) {
    if (BANNED_MODULE.test(spec)) {
      out.push(`${relative(root, file)} imports ${spec}`);
      continue;
    }
    if (!spec.startsWith('.')) {
      out.push(`${relative(root, file)} imports package ${spec}`);
      continue;
    }
    const target = resolve(dirname(file), spec).replace(/\.js$/, '.ts');
    if (!allowedDirs.some((d) => target.startsWith(d + '/')) && target !== join(root, 'src/errors.ts')) {
      out.push(`${relative(root, file)} imports ${relative(root, target)}`);
    }
  }
  return out;
}

describe('replay boundary', () => {
  it('src/replay imports only src/replay, src/history and src/errors.ts, and reads no clock or randomness', () => {
    const files = tsFiles(replayDir);
    expect(files.length).toBeGreaterThan(3);
    expect(files.flatMap((f) => violations(f, [replayDir, join(root, 'src/history')]))).toEqual([]);
  });

  it('what replay reaches in src/history and src/errors.ts is pure as well', () => {
    const seen = new Set<string>();
    const queue = tsFiles(replayDir);
    const bad: string[] = [];
    while (queue.length > 0) {
      const f = queue.pop()!;
      if (seen.has(f)) continue;
      seen.add(f);
      const code = readFileSync(f, 'utf8');
      for (const spec of importsOf(code)) {
        if (BANNED_MODULE.test(spec)) bad.push(`${relative(root, f)} imports ${spec}`);
        if (spec.startsWith('.')) queue.push(resolve(dirname(f), spec).replace(/\.js$/, '.ts'));
      }
      if (!f.startsWith(replayDir)) for (const [re, name] of BANNED_CALLS) if (re.test(code)) bad.push(`${relative(root, f)} uses ${name}`);
    }
    expect(seen.has(join(root, 'src/errors.ts'))).toBe(true);
    expect(bad).toEqual([]);
  });

  it('the scanner itself catches what it should', () => {
    const fake = `import { x } from 'node:fs';\nimport type { Y } from '../store/level-store.js';\nconst t = Date.now();\nconst r = Math.random();\nexport { z } from "level";\nawait import('child_process');`;
    expect(importsOf(fake)).toEqual(['node:fs', '../store/level-store.js', 'level', 'child_process']);
    expect(BANNED_CALLS.filter(([re]) => re.test(fake)).map(([, n]) => n)).toEqual(['Date.now', 'Math.random']);
    expect(/\bnew\s+Date\s*\(\s*\)/.test('new Date(ms)')).toBe(false);
  });
});
