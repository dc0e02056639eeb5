// `turnlog/workflow` is what workflows modules import (process workers load them on every cold
// start): it must give the authoring API without loading the engine, the store or protobufjs.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { expect, it } from 'vitest';

it('the turnlog/workflow export loads the authoring API without protobufjs, the engine or the store', () => {
  const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { exports: Record<string, { import: string }> };
  const entry = resolve(pkg.exports['./workflow']!.import);
  const script = `
    const m = await import(${JSON.stringify(entry)});
    const { createRequire } = await import('node:module');
    const loaded = Object.keys(createRequire(import.meta.url).cache);
    console.log(JSON.stringify({ exports: Object.keys(m).sort(), heavy: loaded.filter((k) => /protobufjs|classic-level|[\\\\/]level[\\\\/]/.test(k)) }));`;
  const out = JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' })) as { exports: string[]; heavy: string[] };
  expect(out.exports).toEqual(expect.arrayContaining(['defineWorkflow', 'TerminalError', 'isTurnlogError', 'DEFAULT_RETRY']));
  expect(out.heavy).toEqual([]);
  // The control: the full entry does load protobufjs, so the check above can fail.
  const full = execFileSync(process.execPath, ['--input-type=module', '-e', script.replace(JSON.stringify(entry), JSON.stringify(resolve(pkg.exports['.']!.import)))], { encoding: 'utf8' });
  expect((JSON.parse(full) as { heavy: string[] }).heavy.length).toBeGreaterThan(0);
});
