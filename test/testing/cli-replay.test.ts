/**
 * `turnlog replay` through the real built binary: a golden file, a mutated file, a stored task,
 * human and --json output, exit codes.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeHistoryFile } from '../../src/history/history-file.js';
import { createTestEngine } from '../../src/testing/test-engine.js';
import { mapPrices, payloadConverter } from '../fixtures/custom-payloads/workflows.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { ROOT, appendHistory, cli, cliJSON, ensureBuilt, withLevel } from '../cli/run-cli.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { goldenPath } from './golden.js';
import { loadEvents, mutate } from './mutate.js';

const WORKFLOWS = join(ROOT, 'dist/test/fixtures/workflows/support-agent.js');
const ENDINGS = join(ROOT, 'dist/test/fixtures/workflows/replay-endings.js');
let tmp: { path: string; remove: () => Promise<void> };
let renamed: string;
let stuck: string;

beforeAll(async () => {
  ensureBuilt();
  tmp = await makeTmpDir();
  renamed = join(tmp.path, 'renamed.json');
  const events = mutate(loadEvents(goldenPath('support-conversation')), 7, (e) => ({ ...e, name: 'lookup-orders' }));
  await writeFile(renamed, await encodeHistoryFile({ taskId: 'support-conversation', events }, 'json'));
  // A crash mid-turn of a handler that then awaits a promise nothing resolves.
  stuck = join(tmp.path, 'stuck.json');
  const crashed = historyBuilder('stuck-1').created({ workflow: 'stuck', kind: 'multi-turn' }).input('hi').turnStarted().step('a', 'hi').crashed().build();
  await writeFile(stuck, await encodeHistoryFile({ taskId: 'stuck-1', events: crashed }, 'json'));
});
afterAll(async () => {
  await tmp?.remove();
});

describe('turnlog replay', () => {
  it("uses the module's payloadConverter export for payloads: 'custom' workflows", async () => {
    const t = await createTestEngine({ workflows: [mapPrices], payloadConverter });
    await (await t.engine.start(mapPrices, new Map([['eur', 1]]), { taskId: 'maps' })).result();
    const file = join(tmp.path, 'maps.json');
    await writeFile(file, await t.engine.exportHistory('maps'));
    await t.close();
    const r = await cli(['replay', file, '--workflows', join(ROOT, 'dist/test/fixtures/custom-payloads/workflows.js')]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('ok: 1 turn replayed');
  });

  it('a golden file: one line per turn, exit 0', async () => {
    const r = await cli(['replay', goldenPath('support-timeout'), '--workflows', WORKFLOWS]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('task support-timeout (21 events)');
    expect(r.stdout).toMatch(/turn 1 +ok +TurnCompleted +event \d+ +3 calls/);
    expect(r.stdout).toMatch(/turn 2 +cut off +TurnTimedOut +event \d+ +2 calls \(outcome not compared\)/);
    expect(r.stdout).toContain('ok: 3 turns replayed');
  });

  it('--json: one document with every turn', async () => {
    const r = await cliJSON(['replay', goldenPath('support-conversation'), '--workflows', WORKFLOWS, '--json']);
    expect(r.code).toBe(0);
    expect(r.json.ok).toBe(true);
    expect(r.json.tasks[0]).toMatchObject({ taskId: 'support-conversation', workflow: 'support-agent', turns: 4 });
    expect(r.json.tasks[0].results.map((x: { status: string }) => x.status)).toEqual(['ok', 'ok', 'ok', 'ok']);
  });

  it('a divergence: the DIVERGED line on stdout, the error on stderr, exit 1', async () => {
    const r = await cli(['replay', renamed, '--workflows', WORKFLOWS]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain('turn 1    DIVERGED event 7: expected step "lookup-orders" at position 2, the handler did step "lookup-order"');
    expect(r.stderr).toContain('turnlog: Task support-conversation, turn 1, event 7: the history recorded step "lookup-orders" at position 2 but the handler did step "lookup-order"');
    const j = await cliJSON(['replay', renamed, '--workflows', WORKFLOWS, '--json']);
    expect(j.code).toBe(1);
    expect(j.json.error).toMatchObject({ code: 'TURNLOG_NON_DETERMINISM', exitCode: 1 });
    expect(j.json.error.message).toContain('event 7');
  });

  it('a replay that cannot finish: exit 1 with a STALLED line, --json prints exactly the error document', async () => {
    const r = await cli(['replay', stuck, '--workflows', ENDINGS, '--isolate', 'none']);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain('turn 1    STALLED after step "a" at position 1 (event 4): no verdict');
    expect(r.stderr).toContain('turnlog: Task stuck-1, turn 1: the replay cannot finish');
    const j = await cliJSON(['replay', stuck, '--workflows', ENDINGS, '--json']);
    expect(j.code).toBe(1);
    expect(j.json.error).toMatchObject({ code: 'TURNLOG_REPLAY_STALLED', exitCode: 1 });
  });

  it('a handler that blocks the thread: the worker is terminated at --timeout, exit 1, TURNLOG_REPLAY_TIMEOUT', async () => {
    const spin = join(tmp.path, 'spin.json');
    const events = historyBuilder('spin-1').created({ workflow: 'spinner', kind: 'multi-turn' }).input('hi').turnStarted().step('a', 'hi').build();
    await writeFile(spin, await encodeHistoryFile({ taskId: 'spin-1', events }, 'json'));
    const j = await cliJSON(['replay', spin, '--workflows', ENDINGS, '--timeout', '2000', '--json']);
    expect(j.code).toBe(1);
    expect(j.json.error).toMatchObject({ code: 'TURNLOG_REPLAY_TIMEOUT', exitCode: 1 });
    expect(j.json.error.message).toContain('Task spin-1, turn 1: the replay did not settle within 2000 ms');
  });

  it('a command left waiting forever (a module whose top-level await never settles) exits 1 with UNFINISHED, not 0', async () => {
    const hang = join(tmp.path, 'hang.mjs');
    await writeFile(hang, 'export const x = 1;\nawait new Promise(() => {});\n');
    const j = await cliJSON(['replay', stuck, '--workflows', hang, '--json']);
    expect(j.code).toBe(1);
    expect(j.json.error).toMatchObject({ code: 'UNFINISHED', exitCode: 1 });
  });

  it('a task in a store', async () => {
    const store = join(tmp.path, 'store');
    await withLevel(store, (s) => appendHistory(s, 'support-conversation', loadEvents(goldenPath('support-conversation'))));
    const r = await cli(['--store', store, 'replay', 'support-conversation', '--workflows', WORKFLOWS]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('ok: 4 turns replayed');
    expect((await cli(['--store', store, 'replay', 'nope', '--workflows', WORKFLOWS])).code).toBe(3);
  });

  it('a module that cannot load, or exports no workflows, says what to pass', async () => {
    const missing = await cli(['replay', renamed, '--workflows', join(tmp.path, 'missing.js')]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('Cannot load workflows module');
    const empty = join(tmp.path, 'empty.mjs');
    await writeFile(empty, 'export const x = 1;\n');
    const none = await cli(['replay', renamed, '--workflows', empty]);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('exports no workflows');
  });
});

describe('turnlog replay --workflows: a module that starts work when imported', () => {
  it('warns on stderr naming the module and the store, and still replays', async () => {
    const module = join(ROOT, 'dist/test/fixtures/workflows/starts-work.js');
    const store = join(tmp.path, 'side-effect-store');
    const r = await cli(['replay', goldenPath('support-conversation'), '--workflows', module], { STARTS_WORK_STORE: store });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('ok: 4 turns replayed');
    expect(r.stderr).toContain(`turnlog: warning: importing ${module} started work: it opened 1 engine (store ${store})`);
    expect(r.stderr).toContain('A workflows module must have no side effects');
  });

  it('a module without side effects gets no warning (control)', async () => {
    const r = await cli(['replay', goldenPath('support-conversation'), '--workflows', WORKFLOWS]);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
  });

  it('--help says the module must have no side effects', async () => {
    const r = await cli(['replay', '--help']);
    const help = r.stdout.replace(/\s+/g, ' ');
    expect(help).toContain('it is imported, so it must have no side effects');
    expect(help).toContain('Keep workflows in a module without side effects');
  });
});
