// src/internal/wire/fields.ts is generated from the .proto files: the hand-written codecs (worker
// protocol, history fast paths) take every tag and enum table from it. These tests fail when a
// .proto changes without `npm run gen:proto`, or when the generator drifts from protobufjs' reading.
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import protobuf from 'protobufjs';
import * as fields from '../../../src/internal/wire/fields.js';
import { root } from '../../../src/internal/proto/root.js';

const WIRE: Record<string, number> = { double: 1, fixed64: 1, sfixed64: 1, float: 5, fixed32: 5, sfixed32: 5, string: 2, bytes: 2 };

function wireTypeOf(f: protobuf.Field): number {
  if (f.map || (f.repeated && f.resolvedType === null && f.type !== 'string' && f.type !== 'bytes')) return 2;
  if (f.resolvedType instanceof protobuf.Type) return 2;
  return WIRE[f.type] ?? 0;
}

describe('generated fields.ts', () => {
  it('is what scripts/gen-proto.mjs generates from the current .proto files (--check)', () => {
    // Throws (exit 1, naming the stale file) when a generated file differs.
    execFileSync(process.execPath, ['scripts/gen-proto.mjs', '--check'], { encoding: 'utf8', stdio: 'pipe' });
  });

  it('the check fails on a stale copy, naming it (control)', () => {
    // A copy of the generator and its inputs in a scratch dir under the repo (node_modules resolve).
    const dir = mkdtempSync(join(process.cwd(), '.turnlog-gen-check-'));
    try {
      for (const f of ['scripts/gen-proto.mjs', 'src/internal/proto/descriptor.ts', 'src/internal/wire/fields.ts']) {
        mkdirSync(dirname(join(dir, f)), { recursive: true });
        cpSync(f, join(dir, f));
      }
      cpSync('proto', join(dir, 'proto'), { recursive: true });
      const stale = join(dir, 'src/internal/wire/fields.ts');
      writeFileSync(stale, readFileSync(stale, 'utf8').replace('StepCompleted = { turn: 8', 'StepCompleted = { turn: 9'));
      let err: { status?: number; stderr?: string } | undefined;
      try {
        execFileSync(process.execPath, [join(dir, 'scripts/gen-proto.mjs'), '--check'], { encoding: 'utf8', stdio: 'pipe' });
      } catch (e) {
        err = e as { status?: number; stderr?: string };
      }
      expect(err?.status).toBe(1);
      expect(err?.stderr).toContain('fields.ts');
      expect(err?.stderr).not.toContain('descriptor.ts');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('every message tag equals (field id << 3) | wire type from the protobufjs descriptor', () => {
    root.resolveAll();
    let checked = 0;
    for (const [name, tags] of Object.entries(fields)) {
      if (Array.isArray(tags) || name === 'MapEntry') continue;
      const full = name.startsWith('Payload') || name === 'Payloads' ? `temporal.api.common.v1.${name}` : name === 'Failure' || name === 'ApplicationFailureInfo' ? `temporal.api.failure.v1.${name}` : `turnlog.v1.${name.replaceAll('_', '.')}`;
      const type = root.lookupType(full);
      const expected: Record<string, number> = {};
      for (const f of type.fieldsArray) expected[f.name] = (f.id << 3) | wireTypeOf(f);
      expect(tags, full).toEqual(expected);
      checked++;
    }
    expect(checked).toBeGreaterThan(40);
  });

  it('every enum table has one entry per non-zero proto value, at its number', () => {
    const tables: [readonly unknown[], string][] = [
      [fields.WORKFLOW_KINDS, 'WorkflowKind'],
      [fields.ENTRY_MODES, 'EntryMode'],
      [fields.EXECUTOR_KINDS, 'ExecutorKind'],
      [fields.TASK_OUTCOMES, 'TaskOutcome'],
      [fields.TIMEOUT_CAUSES, 'TimeoutCause'],
      [fields.CANCEL_SCOPES, 'CancelScope'],
      [fields.TASK_STATUSES, 'TaskStatus'],
      [fields.TURN_TERMINALS, 'TurnTerminalType'],
      [fields.WORKER_CANCEL_KINDS, 'WorkerCancelKind'],
    ];
    for (const [table, name] of tables) {
      const e = root.lookupEnum(`turnlog.v1.${name}`);
      const numbers = Object.values(e.values).sort((a, b) => a - b);
      expect(table.length, name).toBe(numbers[numbers.length - 1]! + 1);
      expect(table[0], name).toBeUndefined();
      for (const n of numbers.slice(1)) expect(typeof table[n], `${name} ${n}`).toBe('string');
    }
    // The TS spellings (events.ts) for a few known values.
    expect(fields.TASK_OUTCOMES[4]).toBe('timed_out');
    expect(fields.WORKFLOW_KINDS[2]).toBe('multi-turn');
    expect(fields.TURN_TERMINALS[5]).toBe('TurnTimedOut');
  });
});
