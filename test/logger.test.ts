/**
 * JSON logs (docs/observability.md#logs): `jsonLogger` writes one JSON object per line; the
 * default logger follows `logFormat` / `TURNLOG_LOG`; a real engine process with
 * `TURNLOG_LOG=json` logs a failed turn as one JSON line with task id, turn and attempt.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { consoleLogger, defaultLogger, jsonLogger, setLogTraceSource } from '../src/logger.js';
import { isTurnlogError } from '../src/errors.js';
import { makeTmpDir } from './helpers/tmp-dir.js';
import { ensureBuilt, ROOT } from './cli/run-cli.js';

describe('jsonLogger', () => {
  it('writes one JSON object per line with time, level, msg, the fields, errors with their code', () => {
    const lines: string[] = [];
    const log = jsonLogger({ write: (l) => lines.push(l), now: () => Date.UTC(2025, 0, 2, 3, 4, 5) });
    const err = Object.assign(new Error('rate limited'), { code: 'LLM_429' });
    log.error('turn failed', { taskId: 't-1', turn: 2, attempt: 1, error: err });
    log.info('turn cancelled', { taskId: 't-1', turn: 3 });
    expect(lines).toHaveLength(2);
    expect(lines.every((l) => l.endsWith('\n') && !l.slice(0, -1).includes('\n'))).toBe(true);
    expect(JSON.parse(lines[0]!)).toEqual({
      time: '2025-01-02T03:04:05.000Z',
      level: 'error',
      msg: 'turn failed',
      taskId: 't-1',
      turn: 2,
      attempt: 1,
      error: { name: 'Error', message: 'rate limited', code: 'LLM_429' },
    });
    expect(JSON.parse(lines[1]!)).toMatchObject({ level: 'info', msg: 'turn cancelled', turn: 3 });
  });

  it('adds traceId and spanId while a trace source reports an active span', () => {
    const lines: string[] = [];
    const log = jsonLogger({ write: (l) => lines.push(l) });
    setLogTraceSource(() => ({ traceId: 'a'.repeat(32), spanId: 'b'.repeat(16) }));
    try {
      log.warn('worker crashed', { taskId: 't' });
    } finally {
      setLogTraceSource(undefined);
    }
    log.warn('after', {});
    expect(JSON.parse(lines[0]!)).toMatchObject({ traceId: 'a'.repeat(32), spanId: 'b'.repeat(16) });
    expect(JSON.parse(lines[1]!)).not.toHaveProperty('traceId');
  });

  it('debug lines only when asked', () => {
    expect(jsonLogger().debug).toBeUndefined();
    const lines: string[] = [];
    jsonLogger({ write: (l) => lines.push(l), debug: true }).debug!('x');
    expect(JSON.parse(lines[0]!)).toMatchObject({ level: 'debug', msg: 'x' });
  });
});

describe('defaultLogger', () => {
  it('text by default, json by option or TURNLOG_LOG, the option first; a typo is refused', () => {
    expect(defaultLogger(undefined, {})).toBe(consoleLogger);
    expect(defaultLogger(undefined, { TURNLOG_LOG: 'text' })).toBe(consoleLogger);
    expect(defaultLogger(undefined, { TURNLOG_LOG: 'json' })).not.toBe(consoleLogger);
    expect(defaultLogger('text', { TURNLOG_LOG: 'json' })).toBe(consoleLogger);
    expect(defaultLogger('json', {})).not.toBe(consoleLogger);
    let err: unknown;
    try {
      defaultLogger(undefined, { TURNLOG_LOG: 'jsno' });
    } catch (e) {
      err = e;
    }
    expect(isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT')).toBe(true);
    expect((err as Error).message).toContain('TURNLOG_LOG=jsno is not a log format');
  });
});

describe('an engine with TURNLOG_LOG=json', () => {
  beforeAll(() => ensureBuilt());
  it('logs a failed turn as one JSON line with taskId, turn and attempt', async () => {
    const tmp = await makeTmpDir('turnlog-jsonlog-');
    const script = `
      import { Engine, defineWorkflow } from ${JSON.stringify(join(ROOT, 'dist/src/index.js'))};
      const wf = defineWorkflow({ name: 'boom', turn: async () => { throw new Error('model refused'); } });
      const engine = await Engine.open({ store: ${JSON.stringify(join(tmp.path, 's'))}, workflows: [wf], scanIntervalMs: 0 });
      const h = await engine.start(wf, null, { taskId: 'j-1' });
      await h.nextTurn().catch(() => {});
      await engine.shutdown();`;
    const stderr = await new Promise<string>((resolve, reject) =>
      execFile(process.execPath, ['--input-type=module', '-e', script], { env: { ...process.env, TURNLOG_LOG: 'json' } }, (err, _out, e) => (err ? reject(err) : resolve(e))),
    );
    await tmp.remove();
    const lines = stderr.trim().split('\n');
    const records = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    const failed = records.find((r) => r['msg'] === 'turn failed');
    expect(failed).toMatchObject({ level: 'error', taskId: 'j-1', workflow: 'boom', turn: 1, attempt: 1 });
    expect(JSON.stringify(failed)).toContain('model refused');
  });
});
