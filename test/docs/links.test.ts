/**
 * Every relative link of README.md and docs/*.md resolves: `[text](path)` names a file that
 * exists, and `#anchor` (alone or after a .md path) names a heading of that page under GitHub's
 * slug rules, or an `<a id="…">`. Prose references such as `docs/workflows.md#shutdown` are
 * checked the same way, since readers follow them too.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../cli/run-cli.js';

const pages = ['README.md', ...readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).sort().map((f) => `docs/${f}`)];

/** GitHub's heading slug: markup stripped, lower-cased, punctuation dropped, spaces to hyphens. */
export function slugify(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // links and images keep their text
    .replace(/<[^>]+>/g, '') // inline HTML
    .replace(/[`*~]/g, '') // code and emphasis markers (underscores are kept: they stay in slugs)
    .trim()
    .toLowerCase();
  return text.replace(/[^\p{L}\p{N}\p{M}\s_-]/gu, '').replace(/\s/g, '-');
}

/** The page's lines outside fenced code blocks (a `#` line inside a fence is no heading). */
function proseLines(text: string): { line: string; n: number; inFence: boolean }[] {
  const out: { line: string; n: number; inFence: boolean }[] = [];
  let fence: string | undefined;
  text.split('\n').forEach((line, i) => {
    const m = /^\s*(`{3,}|~{3,})/.exec(line);
    if (fence === undefined && m) {
      fence = m[1]!;
      out.push({ line, n: i + 1, inFence: true });
    } else if (fence !== undefined) {
      if (line.trim().startsWith(fence) && line.trim().slice(fence.length).trim() === '') fence = undefined;
      out.push({ line, n: i + 1, inFence: true });
    } else out.push({ line, n: i + 1, inFence: false });
  });
  return out;
}

/** Every anchor a page defines: heading slugs (duplicates get -1, -2, …) and `<a id>`/`name`. */
export function anchorsOf(text: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const { line, inFence } of proseLines(text)) {
    if (inFence) continue;
    const h = /^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (h) {
      const base = slugify(h[1]!);
      const count = seen.get(base) ?? 0;
      seen.set(base, count + 1);
      anchors.add(count === 0 ? base : `${base}-${count}`);
    }
    for (const a of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(a[1]!);
  }
  return anchors;
}

interface Link {
  page: string;
  line: number;
  target: string;
  /** A prose reference (`docs/x.md#y` in text or a code comment) rather than a markdown link. */
  prose: boolean;
}

function linksOf(page: string, text: string): Link[] {
  const links: Link[] = [];
  for (const { line, n, inFence } of proseLines(text)) {
    if (!inFence) {
      const withoutCode = line.replace(/`[^`]*`/g, '');
      for (const m of withoutCode.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
        const target = m[1]!;
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:
        links.push({ page, line: n, target, prose: false });
      }
    }
    // Prose references: `docs/recovery.md#snapshots`, `testing.md#cli` (not inside a markdown link).
    for (const m of line.replace(/\]\([^)]*\)/g, ']').matchAll(/(?<![\w/.-])((?:docs\/)?[a-z][a-z0-9-]*\.md)(#[\w-]+)?/g)) {
      links.push({ page, line: n, target: `${m[1]!}${m[2] ?? ''}`, prose: true });
    }
  }
  return links;
}

/** Resolves a link to a repo-relative file, or undefined when nothing exists there. */
function resolveFile(link: Link, path: string): string | undefined {
  const candidates = [normalize(join(dirname(link.page), path))];
  // Prose names a doc either from the page's directory or from the repo root (`docs/x.md`).
  if (link.prose) candidates.push(normalize(path), normalize(join('docs', path)));
  return candidates.find((c) => !c.startsWith('..') && existsSync(join(ROOT, c)));
}

function check(link: Link): string | undefined {
  const hash = link.target.indexOf('#');
  const path = hash === -1 ? link.target : link.target.slice(0, hash);
  const anchor = hash === -1 ? undefined : decodeURIComponent(link.target.slice(hash + 1));
  const file = path === '' ? link.page : resolveFile(link, decodeURIComponent(path));
  const where = `${link.page}:${link.line} ${link.target}`;
  if (file === undefined) return `${where}: no file ${path}`;
  if (anchor === undefined) return undefined;
  if (!file.endsWith('.md')) return `${where}: an anchor into a file that is not markdown`;
  if (!anchorsOf(readFileSync(join(ROOT, file), 'utf8')).has(anchor)) return `${where}: ${relative('.', file)} has no heading or <a id> "${anchor}"`;
  return undefined;
}

describe('the slug rules', () => {
  it('follows GitHub: lower case, code and punctuation dropped, underscores kept, duplicates numbered', () => {
    expect(slugify('Strings: ids are refused, free text is made well-formed')).toBe('strings-ids-are-refused-free-text-is-made-well-formed');
    expect(slugify('TURNLOG_DRIVER_MISSING')).toBe('turnlog_driver_missing');
    expect(slugify('`ctx.step(name, fn)` and [links](x.md)')).toBe('ctxstepname-fn-and-links');
    expect([...anchorsOf('# A\n## A\n```\n# not a heading\n```\n<a id="x"></a>\n')]).toEqual(['a', 'a-1', 'x']);
  });
});

describe('README.md and docs/*.md links', () => {
  const links = pages.flatMap((p) => linksOf(p, readFileSync(join(ROOT, p), 'utf8')));

  it('finds the links it checks', () => {
    expect(links.filter((l) => !l.prose).length).toBeGreaterThan(50);
    expect(links.some((l) => l.target.includes('#'))).toBe(true);
  });

  it('every relative link and #anchor resolves to a file and a heading', () => {
    const broken = links.map(check).filter((e): e is string => e !== undefined);
    expect(broken, `Broken links:\n${broken.join('\n')}`).toEqual([]);
  });

  // A file path in prose (`src/history/codec.ts`, `test/store/contract.ts`) is a promise too.
  it('every repository path named in backticks exists', () => {
    const missing: string[] = [];
    for (const page of pages) {
      for (const { line, n, inFence } of proseLines(readFileSync(join(ROOT, page), 'utf8'))) {
        if (inFence) continue;
        for (const m of line.matchAll(/`((?:src|test|bench|examples|proto|scripts)\/[^`\s]+)`/g)) {
          const path = m[1]!.replace(/[.,:;]$/, '');
          if (/[<>*]/.test(path)) continue; // a pattern (`test/fixtures/histories/<scenario>.json`), not a file
          if (!existsSync(join(ROOT, path))) missing.push(`${page}:${n} ${path}`);
        }
      }
    }
    expect(missing, 'paths the docs name that do not exist').toEqual([]);
  });

  it('the README links every page of docs/', () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const missing = pages.filter((p) => p !== 'README.md' && !readme.includes(`](${p})`));
    expect(missing, 'docs pages the README does not link').toEqual([]);
  });
});
