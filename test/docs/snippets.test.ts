/**
 * The docs run as written (issue #10 item 14): every ```ts block of README.md and docs/*.md is
 * type-checked under --strict in one tsc run, and the runnable ones are run (see ./blocks.ts for
 * the fence convention). Blocks import 'turnlog', 'turnlog/workflow' and 'turnlog/testing':
 * they are written into .doc-snippets/ inside the repo, so the package's self-reference resolves
 * those to the built dist/.
 */
import { execFile, execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt, ROOT } from '../cli/run-cli.js';
import { docBlocks, extractBlocks, type DocBlock } from './blocks.js';

const RUN_TIMEOUT_MS = 60_000;
const blocks = docBlocks(ROOT);
const checked = blocks.filter((b) => b.mode !== 'fragment');
const runnable = blocks.filter((b) => b.mode === 'run');
const where = (b: DocBlock) => `${b.page}:${b.line}`;
const slug = (page: string) => page.replace(/\.md$/, '').replace(/[^A-Za-z0-9]+/g, '-');

let work: string;
/** Where each block's source is written (absolute). */
const sourceOf = new Map<DocBlock, string>();
/** tsc diagnostics by block, and those of no block (a bad tsconfig, a missing dist/). */
const diagnostics = new Map<DocBlock, string[]>();
const unplaced: string[] = [];

function pageDir(b: DocBlock): string {
  return join(work, 'pages', slug(b.page));
}

beforeAll(() => {
  ensureBuilt();
  const base = join(ROOT, '.doc-snippets');
  mkdirSync(base, { recursive: true });
  work = mkdtempSync(join(base, 'run-'));
  for (const b of checked) {
    const name = b.file ?? `L${b.line}${b.vitest ? '.test' : ''}.ts`;
    const path = join(pageDir(b), name);
    if ([...sourceOf.values()].includes(path)) throw new Error(`${where(b)}: a block of this page is already saved as ${name}.`);
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, b.code);
    sourceOf.set(b, path);
  }
  // The repo's strictness, minus noUnused* (a doc may show a value without using it).
  writeFileSync(
    join(work, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        lib: ['ES2023'],
        types: ['node'],
        strict: true,
        noUncheckedIndexedAccess: true,
        exactOptionalPropertyTypes: true,
        noImplicitOverride: true,
        skipLibCheck: true,
        isolatedModules: true,
        verbatimModuleSyntax: true,
        rootDir: '.',
      },
      include: ['pages'],
    }),
  );
  writeFileSync(join(work, 'vitest.config.mjs'), "export default { test: { include: ['**/*.test.ts'], testTimeout: 30000 } };\n");
  let out = '';
  try {
    // Emits JavaScript next to each block (node runs that); type errors do not stop the emit.
    execFileSync(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', work], { cwd: work, encoding: 'utf8', stdio: 'pipe' });
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string };
    out = `${e.stdout ?? ''}${e.stderr ?? ''}`;
  }
  // tsc prints `path(line,col): error TSnnnn: message` (continuation lines indented).
  let current: string[] | undefined;
  for (const line of out.split('\n')) {
    const m = /^(.+?)\((\d+),(\d+)\): (error .*)$/.exec(line);
    if (m) {
      const file = join(work, m[1]!);
      const block = [...sourceOf].find(([, p]) => p === file || relative(work, p) === m[1])?.[0];
      const text = block ? `${where(block)} (page line ${block.line + Number(m[2])}): ${m[4]}` : line;
      if (block) diagnostics.set(block, [...(diagnostics.get(block) ?? []), text]);
      else unplaced.push(`tsc: ${line}`);
      current = block ? diagnostics.get(block) : unplaced;
    } else if (line.startsWith(' ') && current) {
      current[current.length - 1] += `\n${line}`;
    } else if (line.trim() !== '') {
      unplaced.push(`tsc: ${line}`);
      current = unplaced;
    }
  }
  // The count the issue asks for: fragments are skipped on purpose, not forgotten.
  console.log(
    `doc code blocks: ${blocks.length} (${runnable.length} type-checked and run, ${checked.length - runnable.length} type-checked only, ${blocks.length - checked.length} fragments skipped)`,
  );
}, 300_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

function runBlock(b: DocBlock, cwd: string): Promise<{ code: number | null; out: string }> {
  const source = sourceOf.get(b)!;
  const args = b.vitest
    ? [join(ROOT, 'node_modules/vitest/vitest.mjs'), 'run', '--config', join(work, 'vitest.config.mjs'), '--root', dirname(source), source]
    : [source.replace(/\.ts$/, '.js')];
  return new Promise((resolve) => {
    execFile(process.execPath, args, { cwd, timeout: RUN_TIMEOUT_MS, encoding: 'utf8', maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : null) : 0;
      resolve({ code, out: `${stdout}${stderr}${err?.killed ? `\n(killed after ${RUN_TIMEOUT_MS} ms)` : ''}` });
    });
  });
}

describe('the block convention', () => {
  it('reads ts / ts check / ts fragment, names files from // file:, and rejects other info strings', () => {
    const page = ['```ts', "// file: agent.ts", "import { it } from 'vitest';", '```', '```ts check', 'x', '```', '```ts fragment', 'y', '```', '```sh', 'ls', '```'].join('\n');
    expect(extractBlocks('p.md', page).map((b) => [b.line, b.mode, b.file, b.vitest])).toEqual([
      [1, 'run', 'agent.ts', true],
      [5, 'check', undefined, false],
      [8, 'fragment', undefined, false],
    ]);
    expect(() => extractBlocks('p.md', '```ts run\nx\n```\n')).toThrow('p.md:1: unknown code block info "ts run"');
    expect(extractBlocks('p.md', '```` ```ts ```` is inline code, not a fence\n')).toEqual([]);
  });
});

describe('README.md and docs/*.md code blocks', () => {
  it('type-check under --strict (noUncheckedIndexedAccess, exactOptionalPropertyTypes)', () => {
    const errors = [...unplaced, ...[...diagnostics.values()].flat()];
    expect(errors, `Fix these doc blocks (or mark a partial one \`\`\`ts fragment):\n${errors.join('\n')}`).toEqual([]);
  });

  // Unnamed blocks run alone in a fresh cwd (vitest's root is the block's dir, the cwd stays); `// file:` blocks of a page run in order in the page's dir.
  for (const b of runnable) {
    it(`${where(b)} runs${b.file ? ` (${b.file})` : ''}${b.vitest ? ' under vitest' : ''}`, async () => {
      expect(diagnostics.get(b) ?? [], `${where(b)} does not type-check`).toEqual([]);
      let cwd = pageDir(b);
      if (!b.file) {
        cwd = join(work, 'cwd', `${slug(b.page)}-L${b.line}`);
        mkdirSync(cwd, { recursive: true });
      }
      const r = await runBlock(b, cwd);
      expect(r.code, `${where(b)} exited ${String(r.code)}:\n${r.out}`).toBe(0);
    }, RUN_TIMEOUT_MS + 30_000);
  }
});
