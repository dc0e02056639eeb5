// Every error code is documented (docs/errors.md has a `## CODE` anchor), and codes are unique.
import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { isTurnlogError, TaskConflictError, TurnlogError } from '../src/errors.js';

const source = readFileSync('src/errors.ts', 'utf8');
const union = source.slice(source.indexOf('export type ErrorCode'), source.indexOf('export interface TurnlogErrorOptions'));
const codes = [...union.matchAll(/'(TURNLOG_[A-Z_]+)'/g)].map((m) => m[1]!);
const docs = readFileSync('docs/errors.md', 'utf8');

describe('error codes', () => {
  it('has a stable, unique list of TURNLOG_* codes', () => {
    expect(codes.length).toBeGreaterThan(30);
    expect(new Set(codes).size).toBe(codes.length);
  });

  it.each(codes)('%s is documented in docs/errors.md', (code) => {
    expect(docs).toContain(`## ${code}\n`);
  });

  // The CLI's --json error document promises a code of docs/errors.md, or one cli.md describes.
  it('every code the CLI reports is documented (TURNLOG_* in errors.md, the others in cli.md#errors)', () => {
    const cli = ['src/cli/context.ts', 'src/cli/main.ts', ...readdirSync('src/cli/commands').map((f) => `src/cli/commands/${f}`)]
      .map((f) => readFileSync(f, 'utf8'))
      .join('\n');
    const reported = new Set([
      ...[...cli.matchAll(/new CliError\(\s*'([A-Z_]+)'/g)].map((m) => m[1]!),
      ...[...cli.matchAll(/code: '([A-Z_]+)'/g)].map((m) => m[1]!),
    ]);
    expect([...reported]).toEqual(expect.arrayContaining(['TURNLOG_CODECS_MODULE', 'TURNLOG_WORKFLOWS_MODULE', 'USAGE', 'INTERNAL', 'UNFINISHED']));
    const cliDoc = readFileSync('docs/cli.md', 'utf8');
    const errorsSection = cliDoc.slice(cliDoc.indexOf('<a id="errors"></a>'), cliDoc.indexOf('## Commands'));
    for (const code of reported) {
      if (code.startsWith('TURNLOG_')) expect(docs, code).toContain(`## ${code}\n`);
      else expect(errorsSection, code).toContain(`\`${code}\``);
    }
  });

  it('isTurnlogError recognises errors by brand, also across realms, and filters by code', () => {
    const err = new TaskConflictError('t1', 'completed', 'it ended');
    expect(isTurnlogError(err)).toBe(true);
    expect(isTurnlogError(err, 'TURNLOG_TASK_CONFLICT')).toBe(true);
    expect(isTurnlogError(err, 'TURNLOG_FENCED')).toBe(false);
    expect(isTurnlogError(new Error('x'))).toBe(false);
    const foreign = Object.assign(Object.create(null), { code: 'TURNLOG_FENCED', [Symbol.for('turnlog.error')]: true });
    expect(isTurnlogError(foreign, 'TURNLOG_FENCED')).toBe(true);
    expect(err).toBeInstanceOf(TurnlogError);
    expect(err.message).toMatch(/^Task t1 is completed/);
  });
});
