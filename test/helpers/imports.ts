// Parses module specifiers out of TypeScript source (boundary tests).

/** Module specifiers of static imports, re-exports and dynamic imports. */
export function importsOf(source: string): string[] {
  const out: string[] = [];
  const re = /(?:^|\s|;)(?:import|export)\s[^'"]*?from\s*['"]([^'"]+)['"]|(?:^|\s|;)import\s*['"]([^'"]+)['"]|import\s*\(\s*['"]([^'"]+)['"]\s*\)|require\s*\(\s*['"]([^'"]+)['"]\s*\)/g;
  for (const m of source.matchAll(re)) out.push((m[1] ?? m[2] ?? m[3] ?? m[4])!);
  return out;
}
