/**
 * Finds the TypeScript code blocks of README.md and docs/*.md (issue #10 item 14). The fence's
 * info string says what the doc snippets test does with a block:
 *   ```ts           a complete program: type-checked under --strict and run
 *   ```ts check     type-checked only
 *   ```ts fragment  skipped (counted and printed)
 * A block whose first line is `// file: <path>` is saved at that path in a directory shared by the
 * blocks of its page; those run in page order with that directory as cwd (a reader following the
 * page), so later blocks can import earlier ones and read what they wrote.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export type BlockMode = 'run' | 'check' | 'fragment';

export interface DocBlock {
  /** Page path relative to the repo, e.g. `docs/testing.md`. */
  page: string;
  /** 1-based line of the opening fence. */
  line: number;
  mode: BlockMode;
  code: string;
  /** From a `// file: <path>` first line; else undefined. */
  file: string | undefined;
  /** The block imports 'vitest': it runs under vitest, not node. */
  vitest: boolean;
}

const MODES: Record<string, BlockMode> = { '': 'run', check: 'check', fragment: 'fragment' };

/** Parses one page; throws on an unknown `ts …` info string or an unclosed fence. */
export function extractBlocks(page: string, text: string): DocBlock[] {
  const lines = text.split('\n');
  const blocks: DocBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(`{3,}|~{3,})\s*(\S*)\s*(.*)$/.exec(lines[i]!);
    // CommonMark: a backtick fence's info string has no backtick (else it is inline code).
    if (!open || (open[1]!.startsWith('`') && `${open[2]}${open[3]}`.includes('`'))) continue;
    const fence = open[1]!;
    const lang = open[2]!;
    const start = i;
    let end = i + 1;
    while (end < lines.length && !(lines[end]!.startsWith(fence) && lines[end]!.slice(fence.length).trim() === '')) end++;
    if (end >= lines.length) throw new Error(`${page}:${start + 1}: code fence is never closed.`);
    i = end;
    if (lang !== 'ts' && lang !== 'typescript') continue;
    const info = open[3]!.trim();
    const mode = MODES[info];
    if (mode === undefined) {
      throw new Error(`${page}:${start + 1}: unknown code block info "${lang} ${info}". Use \`\`\`ts (type-checked and run), \`\`\`ts check or \`\`\`ts fragment.`);
    }
    const code = lines.slice(start + 1, end).join('\n') + '\n';
    const named = /^\/\/ file: (\S+)\s*$/.exec(lines[start + 1] ?? '');
    blocks.push({
      page,
      line: start + 1,
      mode,
      code,
      file: named?.[1],
      vitest: /from\s+['"]vitest['"]/.test(code),
    });
  }
  return blocks;
}

/** Every TypeScript block of README.md and docs/*.md under `root`, in page order. */
export function docBlocks(root: string): DocBlock[] {
  const pages = ['README.md', ...readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md')).sort().map((f) => `docs/${f}`)];
  return pages.flatMap((p) => extractBlocks(p, readFileSync(join(root, p), 'utf8')));
}
