/**
 * The real `turnlog` binary against a real LevelDB store populated through the store API.
 * Each check reads both the human output (key substrings) and `--json` (exact fields).
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeEvent } from '../../src/history/codec.js';
import type { HistoryEvent, TaskSummary } from '../../src/history/events.js';
import { LevelHistoryStore } from '../../src/store/index.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { longHistory, oneShotHistory, openTurnHistory, richHistory } from './helpers.js';
import { appendHistory, cli, cliBytes, cliJSON, ensureBuilt, withLevel } from './run-cli.js';

let tmp: { path: string; remove: () => Promise<void> };
let store: string;
let n = 0;
const fresh = (): string => join(tmp.path, `store-${++n}`);
const file = (name: string): string => join(tmp.path, name);

async function snapshot(dir: string): Promise<Map<string, { summary: TaskSummary; events: HistoryEvent[] }>> {
  return withLevel(dir, async (s) => {
    const out = new Map<string, { summary: TaskSummary; events: HistoryEvent[] }>();
    for (const t of (await s.listTasks({ limit: 1000 })).tasks) out.set(t.taskId, { summary: t, events: await s.readEvents(t.taskId) });
    return out;
  });
}

function expectSameStores(a: Awaited<ReturnType<typeof snapshot>>, b: Awaited<ReturnType<typeof snapshot>>): void {
  expect([...b.keys()].sort()).toEqual([...a.keys()].sort());
  for (const [id, x] of a) {
    const y = b.get(id)!;
    expect(y.events).toEqual(x.events);
    expect(y.events.map((e) => Buffer.from(encodeEvent(e)))).toEqual(x.events.map((e) => Buffer.from(encodeEvent(e))));
    expect(y.summary).toEqual(x.summary);
  }
}

beforeAll(async () => {
  ensureBuilt();
  tmp = await makeTmpDir('turnlog-cli-');
  store = join(tmp.path, 'main');
  await withLevel(store, async (s) => {
    await appendHistory(s, 't-rich', richHistory());
    await appendHistory(s, 'one', oneShotHistory('summarize', 'succeeded'));
    await appendHistory(s, 'fail', oneShotHistory('summarize', 'failed'));
    await appendHistory(s, 'cancel', oneShotHistory('classify', 'cancelled'));
    await appendHistory(s, 'open', openTurnHistory());
    // A lease that looks live: `why` must still decide as the next engine would (lock held = no engine).
    await s.claimLease('open', { owner: 'engine-a', instance: 'inst-9', durationMs: 10 * 365 * 86_400_000, now: Date.now() });
  });
});

afterAll(async () => {
  await tmp?.remove();
});

describe('turnlog list', () => {
  it('prints a table of tasks', async () => {
    const r = await cli(['--store', store, 'list']);
    expect(r.code).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^TASK\s+WORKFLOW\s+KIND\s+STATUS\s+TURN\s+QUEUED\s+EVENTS\s+UPDATED$/);
    expect(lines).toHaveLength(6);
    expect(r.stdout).toMatch(/t-rich\s+support-agent\s+multi-turn\s+suspended\s+2\s+1\s+22\s+2025-01-02 03:04:05.210Z/);
    expect(r.stdout).toMatch(/fail\s+summarize\s+one-shot\s+completed \(failed\)/);
  });

  it('--json gives the summaries and the next cursor', async () => {
    const { code, json } = await cliJSON(['list', '--store', store]);
    expect(code).toBe(0);
    expect(json.next).toBeNull();
    expect(json.tasks.map((t: TaskSummary) => t.taskId).sort()).toEqual(['cancel', 'fail', 'one', 'open', 't-rich']);
    expect(json.tasks.find((t: TaskSummary) => t.taskId === 't-rich')).toEqual({
      taskId: 't-rich',
      workflow: 'support-agent',
      kind: 'multi-turn',
      status: 'suspended',
      lastEventId: 22,
      turn: 2,
      queued: 1,
      lastInputId: 'in-5',
      createdAt: Date.UTC(2025, 0, 2, 3, 4, 5),
      updatedAt: Date.UTC(2025, 0, 2, 3, 4, 5) + 210,
    });
  });

  it('filters by status and workflow and pages with --cursor', async () => {
    const completed = await cliJSON(['list', '--store', store, '--status', 'completed']);
    expect(completed.json.tasks.map((t: TaskSummary) => t.taskId).sort()).toEqual(['cancel', 'fail', 'one']);
    const wf = await cliJSON(['list', '--store', store, '--workflow', 'summarize', '--status', 'completed']);
    expect(wf.json.tasks.map((t: TaskSummary) => t.taskId).sort()).toEqual(['fail', 'one']);
    const seen: string[] = [];
    let cursor: string | null = null;
    for (let i = 0; i < 10; i++) {
      const page: { json: { tasks: TaskSummary[]; next: string | null } } = await cliJSON(['list', '--store', store, '--limit', '2', ...(cursor ? ['--cursor', cursor] : [])]);
      expect(page.json.tasks.length).toBeLessThanOrEqual(2);
      seen.push(...page.json.tasks.map((t) => t.taskId));
      cursor = page.json.next;
      if (cursor === null) break;
    }
    expect(seen.sort()).toEqual(['cancel', 'fail', 'one', 'open', 't-rich']);
    const human = await cli(['list', '--store', store, '--limit', '2']);
    expect(human.stdout).toMatch(/more tasks: turnlog list --cursor \S+ --limit 2/);
  });

  it('reads the store from TURNLOG_STORE', async () => {
    const r = await cliJSON(['list'], { TURNLOG_STORE: store });
    expect(r.json.tasks).toHaveLength(5);
  });
});

describe('turnlog show', () => {
  it('prints turns, attempts, steps, markers, kills, crashes, outcomes and queued inputs', async () => {
    const r = await cli(['--store', store, 'show', 't-rich']);
    expect(r.code).toBe(0);
    const o = r.stdout;
    expect(o).toContain('workflow  support-agent (multi-turn)');
    expect(o).toContain('status    suspended');
    expect(o).toMatch(/TURN\s+ATTEMPTS\s+INPUT\s+STARTED\s+DURATION\s+STEPS\s+OUTCOME/);
    expect(o).toMatch(/\n1\s+3\s+in-1\s+\+100ms\s+30ms\s+2 \(1 failed\)\s+suspended: awaiting-user\n/);
    expect(o).toMatch(/\n2\s+1\s+in-3\s+.*timed out: hard_cap \[marker, killed\]/);
    expect(o).toContain('queued inputs (1)\n  in-5  +210ms  <3 bytes>');
    expect(o).toContain('step 1 lookup-order ok in 42ms → {"order":123,"status":"shipped"}');
    expect(o).toContain('step 4 call-llm failed after 1.50s: RateLimitError: rate limited [LLM_429]');
    expect(o).toContain('attempt 1 of turn 1 exited for recovery: engine shutdown');
    expect(o).toContain('worker crashed: attempt 2, pid 4242, signal SIGSEGV: worker died');
    expect(o).toContain('call 3: checkpoint {"draft":"Hello"}');
    expect(o).toContain('timeout marker: turn 2 timed out');
    expect(o).toContain('worker killed: pid 4242 SIGKILL (hard cap)');
    expect(o).toContain('input in-4 withdrawn: duplicate');
    // Previews are truncated to --width (60 by default) with an ellipsis.
    expect(o).toContain('input in-1 queued: {"text":"my order #123 never arrived, please help me find i…');
    const full = await cli(['--store', store, 'show', 't-rich', '--full']);
    expect(full.stdout).toContain('please help me find it"}');
  });

  it('--json gives turns, attempts, steps, queue and the timeline', async () => {
    const { code, json } = await cliJSON(['show', 't-rich', '--store', store]);
    expect(code).toBe(0);
    expect(json.task.taskId).toBe('t-rich');
    expect(json.turns).toHaveLength(2);
    const [t1, t2] = json.turns;
    expect(t1.attempts.map((a: { attempt: number; entryMode: string; ended: unknown }) => [a.attempt, a.entryMode, a.ended])).toEqual([
      [1, 'fresh', { kind: 'exited-for-recovery', eventId: 5, detail: 'engine shutdown' }],
      [2, 'recovered', { kind: 'worker-crashed', eventId: 8, detail: 'worker died' }],
      [3, 'recovered', null],
    ]);
    expect(t1.steps).toEqual([
      { seq: 1, name: 'lookup-order', attempt: 1, eventId: 4, durationMs: 42, ok: true, result: { encoding: 'json/plain', value: { order: 123, status: 'shipped' } }, error: null },
      { seq: 4, name: 'call-llm', attempt: 3, eventId: 13, durationMs: 1500, ok: false, result: null, error: 'RateLimitError: rate limited [LLM_429]' },
    ]);
    expect(t1.checkpoints).toBe(1);
    expect(t1.crashes).toBe(1);
    expect(t1.outcome).toMatchObject({ type: 'TurnSuspended', eventId: 14, detail: 'awaiting-user' });
    expect(t2).toMatchObject({ turn: 2, markerEventId: 17, kills: 1, outcome: { type: 'TurnTimedOut', eventId: 19, detail: 'hard_cap' } });
    expect(json.queued).toEqual([
      { inputId: 'in-5', eventId: 22, time: Date.UTC(2025, 0, 2, 3, 4, 5) + 210, steering: false, input: { encoding: 'binary/plain', base64: 'AQID' } },
    ]);
    expect(json.timeline).toHaveLength(22);
    expect(json.timeline[3]).toMatchObject({ eventId: 4, type: 'StepCompleted', turn: 1 });
    expect(json.timeline[14]).toMatchObject({ eventId: 15, type: 'InputQueued', turn: null });
  });

  it('shows failed and cancelled one-shot tasks', async () => {
    const failed = await cli(['--store', store, 'show', 'fail']);
    expect(failed.stdout).toContain('status    completed (failed)');
    expect(failed.stdout).toMatch(/1\s+1\s+i1\s+.*failed: Error: boom/);
    const cancelled = await cli(['--store', store, 'show', 'cancel']);
    expect(cancelled.stdout).toContain('cancel requested (task, turn 1): user asked');
    expect(cancelled.stdout).toContain('task completed: cancelled');
  });
});

describe('turnlog events', () => {
  it('prints every event, decoded, one per line', async () => {
    const r = await cli(['--store', store, 'events', 't-rich']);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trimEnd().split('\n');
    expect(lines).toHaveLength(23);
    expect(lines[0]).toMatch(/^ 1  2025-01-02 03:04:05.000Z  g1  TaskCreated\s+task created: workflow support-agent/);
    expect(lines[5]).toMatch(/^ 6 .* g2  LeaseClaimed\s+lease claimed by engine-a\/inst-2, generation 1 → 2 \(recovery\)$/);
    expect(lines.at(-1)).toBe('(22 events in task t-rich)');
  });

  it('--json gives the events with payloads decoded; --from and --limit page', async () => {
    const { json } = await cliJSON(['events', 't-rich', '--store', store]);
    expect(json.taskId).toBe('t-rich');
    expect(json.lastEventId).toBe(22);
    expect(json.events).toHaveLength(22);
    expect(json.events[3]).toEqual({
      type: 'StepCompleted',
      eventId: 4,
      time: Date.UTC(2025, 0, 2, 3, 4, 5) + 30,
      generation: 1,
      turn: 1,
      attempt: 1,
      seq: 1,
      name: 'lookup-order',
      durationMs: 42,
      result: { encoding: 'json/plain', value: { order: 123, status: 'shipped' } },
    });
    expect(json.events[7]).toMatchObject({ type: 'WorkerCrashed', exitCode: null, signal: 'SIGSEGV' });
    const page = await cliJSON(['events', 't-rich', '--store', store, '--from', '10', '--limit', '3']);
    expect(page.json.events.map((e: HistoryEvent) => e.eventId)).toEqual([10, 11, 12]);
  });
});

describe('turnlog why', () => {
  it('decides as the next engine would, ignoring the void lease', async () => {
    const r = await cli(['--store', store, 'why', 'open']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('decision: rerun turn 1 as attempt 2 (entry recovered)');
    expect(r.stdout).toContain('rule:     recover');
    expect(r.stdout).toMatch(/lease:\s+engine-a\/inst-9 generation \d+, left by an earlier process \(void: this CLI holds the store lock, so no engine runs\)/);
    const { json } = await cliJSON(['why', 'open', '--store', store]);
    expect(json.decision).toMatchObject({ kind: 'rerun', rule: 'recover', turn: 1, attempt: 2 });
    expect(json.leaseConsidered).toBe(false);
    expect(json.lease).toMatchObject({ owner: 'engine-a', instance: 'inst-9' });
    expect(json.status).toBe('in_progress');
    expect(typeof json.now).toBe('number');
    expect(json.explanation).toContain('rule:     recover');
  });

  it('names the rule for queued input and completed tasks', async () => {
    const rich = await cliJSON(['why', 't-rich', '--store', store]);
    expect(rich.json.decision).toMatchObject({ kind: 'start-turn', rule: 'queued-input', turn: 3, inputIds: ['in-5'], entryMode: 'resumed' });
    const done = await cli(['--store', store, 'why', 'one']);
    expect(done.stdout).toContain('rule:     completed');
    expect(done.stdout).toContain('lease:    none stored');
  });
});

describe('turnlog stats', () => {
  it('counts tasks by status, outcome and workflow, events, and size on disk', async () => {
    const { code, json } = await cliJSON(['stats', '--store', store]);
    expect(code).toBe(0);
    expect(json).toMatchObject({
      tasks: 5,
      events: 22 + 6 + 6 + 7 + 3,
      byStatus: { pending: 0, in_progress: 1, suspended: 1, completed: 3 },
      byOutcome: { succeeded: 1, failed: 1, cancelled: 1 },
      byWorkflow: {
        'support-agent': { tasks: 1, events: 22, byStatus: { pending: 0, in_progress: 0, suspended: 1, completed: 0 } },
        summarize: { tasks: 3, events: 15, byStatus: { pending: 0, in_progress: 1, suspended: 0, completed: 2 } },
        classify: { tasks: 1, events: 7, byStatus: { pending: 0, in_progress: 0, suspended: 0, completed: 1 } },
      },
    });
    expect(json.sizeBytes).toBeGreaterThan(0);
    expect(json.store).toBe(store);
    const human = await cli(['--store', store, 'stats']);
    expect(human.stdout).toMatch(/tasks\s+5\nevents\s+44\nsize\s+[\d.]+ (B|KiB|MiB) on disk/);
    expect(human.stdout).toMatch(/support-agent\s+1\s+22\s+0\s+0\s+1\s+0/);
  });
});

describe('export and import', () => {
  for (const format of ['json', 'binary'] as const) {
    it(`round-trips --all through ${format} into a fresh store with exact events`, async () => {
      const out = file(`all.${format}`);
      const exp = await cliJSON(['export', '--all', '-o', out, '--format', format, '--store', store]);
      expect(exp.code).toBe(0);
      expect(exp.json).toMatchObject({ file: out, format, events: 44 });
      expect(exp.json.tasks.sort()).toEqual(['cancel', 'fail', 'one', 'open', 't-rich']);
      const target = fresh();
      const imp = await cliJSON(['import', out, '--store', target]);
      expect(imp.code).toBe(0);
      expect(imp.json).toMatchObject({ file: out, format, formatVersion: 2, events: 44 });
      expect(imp.json.tasks.find((t: { taskId: string }) => t.taskId === 't-rich')).toEqual({
        taskId: 't-rich',
        events: 22,
        replaced: false,
        status: 'suspended',
        outcome: null,
      });
      const a = await snapshot(store);
      const b = await snapshot(target);
      expectSameStores(a, b);
    });

    it(`round-trips one task through ${format} on stdout`, async () => {
      const exp = await cliBytes(['--store', store, 'export', 't-rich', '--format', format]);
      expect(exp.code).toBe(0);
      const out = file(`stdout-rich.${format}`);
      await writeFile(out, exp.stdout);
      if (format === 'json') expect(JSON.parse(exp.stdout.toString('utf8'))).toMatchObject({ format: 'turnlog-history', formatVersion: 2, taskId: 't-rich' });
      const target = fresh();
      const imp = await cli(['--store', target, 'import', out]);
      expect(imp.code).toBe(0);
      expect(imp.stdout).toContain('imported t-rich: 22 events, status suspended');
      const a = await snapshot(store);
      const b = await snapshot(target);
      expect(b.get('t-rich')!.events).toEqual(a.get('t-rich')!.events);
      expect(b.get('t-rich')!.summary).toEqual(a.get('t-rich')!.summary);
    });
  }

  it('exports a long history to binary and JSON with identical events', async () => {
    const dir = fresh();
    await withLevel(dir, (s) => appendHistory(s, 'long', longHistory(3000)));
    const bin = file('long.bin');
    const r = await cli(['--store', dir, 'export', 'long', '-o', bin]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/exported 1 task\(s\), 3000 events \(.*, binary\) to .*long\.bin/);
    const target = fresh();
    expect((await cli(['--store', target, 'import', bin])).code).toBe(0);
    expectSameStores(await snapshot(dir), await snapshot(target));
  });

  it('refuses to overwrite an existing task; --force replaces it', async () => {
    const out = file('one.json');
    expect((await cli(['--store', store, 'export', 'one', '-o', out])).code).toBe(0);
    const target = fresh();
    await withLevel(target, (s) => appendHistory(s, 'one', oneShotHistory('other', 'failed').slice(0, 3)));
    const refused = await cli(['--store', target, 'import', out]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('Task one (3 events) already exists in store');
    expect(refused.stderr).toContain('nothing was imported. Pass --force to replace');
    const refusedJSON = await cliJSON(['import', out, '--store', target]);
    expect(refusedJSON.json.error).toMatchObject({ code: 'TURNLOG_TASK_CONFLICT', exitCode: 1 });
    const forced = await cliJSON(['import', out, '--force', '--store', target]);
    expect(forced.code).toBe(0);
    expect(forced.json.tasks).toEqual([{ taskId: 'one', events: 6, replaced: true, status: 'completed', outcome: 'succeeded' }]);
    expect((await snapshot(target)).get('one')!.events).toEqual((await snapshot(store)).get('one')!.events);
  });

  it('rejects bad files naming the file, and changes nothing', async () => {
    const target = fresh();
    const garbage = file('garbage.json');
    await writeFile(garbage, '{"format":"turnlog-history","formatVersion":1,"taskId":"x","events":[{"eventId":1');
    const r = await cli(['--store', target, 'import', garbage]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`History file ${garbage}: it is not valid UTF-8 JSON`);
    const newer = file('newer.json');
    await writeFile(newer, JSON.stringify({ format: 'turnlog-history', formatVersion: 9, taskId: 'x', events: [] }));
    const j = await cliJSON(['import', newer, '--store', target]);
    expect(j.code).toBe(1);
    expect(j.json.error.code).toBe('TURNLOG_HISTORY_FILE');
    expect(j.json.error.message).toContain('history format version 9, newer than this turnlog reads (up to 2). Upgrade turnlog');
    const truncated = file('cut.bin');
    const full = await readFile(file('all.binary'));
    await writeFile(truncated, full.subarray(0, full.length - 7));
    const t = await cli(['--store', target, 'import', truncated]);
    expect(t.code).toBe(1);
    expect(t.stderr).toMatch(/cut\.bin: it ends inside event \d+ of task \S+ at byte \d+, so it is truncated/);
    const missing = await cli(['--store', target, 'import', file('nope.json')]);
    expect(missing.code).toBe(3);
    expect(missing.stderr).toContain('nope.json does not exist');
    // Nothing was written: the store was never even created by the failed imports.
    expect((await cli(['--store', target, 'list'])).code).toBe(3);
  });
});

describe('errors and exit codes', () => {
  it('exit 4 with a clear message when an engine holds the store', async () => {
    const holder = new LevelHistoryStore(store);
    await holder.open();
    try {
      const r = await cli(['--store', store, 'list']);
      expect(r.code).toBe(4);
      expect(r.stderr).toContain(`Store ${store} is locked by another process, most likely a running turnlog engine`);
      expect(r.stderr).toContain('engine.exportHistory()');
      const j = await cliJSON(['show', 't-rich', '--store', store]);
      expect(j.code).toBe(4);
      expect(j.json.error).toMatchObject({ code: 'TURNLOG_STORE_LOCKED', exitCode: 4 });
    } finally {
      await holder.close();
    }
    expect((await cli(['--store', store, 'list'])).code).toBe(0);
  });

  it('exit 3 for an unknown task or a missing store', async () => {
    for (const cmd of ['show', 'events', 'why', 'export']) {
      const r = await cli(['--store', store, cmd, 'nope']);
      expect(r.code, cmd + ': ' + r.stderr).toBe(3);
      expect(r.stderr).toContain(`Task nope is not in store ${store}`);
    }
    const j = await cliJSON(['show', 'nope', '--store', store]);
    expect(j.json).toEqual({ error: { code: 'TURNLOG_TASK_NOT_FOUND', message: expect.stringContaining('Task nope'), exitCode: 3 } });
    const missing = await cli(['--store', join(tmp.path, 'no-such-store'), 'list']);
    expect(missing.code).toBe(3);
    expect(missing.stderr).toContain('no-such-store does not exist. Pass the engine\'s store directory with --store');
  });

  it('exit 2 for usage errors', async () => {
    expect((await cli(['--store', store, 'frobnicate'])).code).toBe(2);
    expect((await cli(['--store', store, 'list', '--limit', '0'])).code).toBe(2);
    expect((await cli(['--store', store, 'list', '--status', 'sleeping'])).code).toBe(2);
    const both = await cli(['--store', store, 'export']);
    expect(both.code).toBe(2);
    expect(both.stderr).toContain('Pass a task id or --all (not both).');
    expect((await cli(['--store', store, 'export', 'one', '--all'])).code).toBe(2);
    expect((await cli(['--store', store, 'export', 'one', '--format', 'xml'])).code).toBe(2);
  });

  it('exit 0 for --help, listing every command', async () => {
    const r = await cli(['--help']);
    expect(r.code).toBe(0);
    for (const c of ['list', 'show', 'events', 'why', 'export', 'import', 'fork', 'stats', 'replay']) expect(r.stdout).toContain(c);
  });
});
