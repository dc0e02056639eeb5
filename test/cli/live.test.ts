/**
 * Live inspection (docs/cli.md#live-inspection): a real engine process holds a LevelDB store and
 * the CLI's reading commands are answered by it over `<store>/turnlog.sock`; writing commands
 * still exit 4, and no second writer ever opens the store.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, statSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { parseHistoryFile } from '../../src/history/history-file.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { until } from '../helpers/processes.js';
import { cli, cliJSON, ensureBuilt, MAIN } from './run-cli.js';

const HOST = fileURLToPath(new URL('../../dist/test/fixtures/children/live-engine-host.js', import.meta.url));

let tmp: Awaited<ReturnType<typeof makeTmpDir>>;
let store: string;
const children: ChildProcess[] = [];

/** Spawns the engine host and waits for its first line (its tasks are in place). */
export async function startHost(dir: string, mode?: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, [HOST, dir, ...(mode ? [mode] : [])], { stdio: ['pipe', 'pipe', 'inherit'] });
  children.push(child);
  await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`engine host exited (${code}) before it was ready`)));
  });
  return child;
}

async function stopHost(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.stdin!.end();
  await exited;
}

beforeAll(() => ensureBuilt());
beforeEach(async () => {
  tmp = await makeTmpDir('turnlog-live-');
  store = join(tmp.path, 'store');
});
afterEach(async () => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await tmp.remove();
});

describe('live inspection of a LevelDB store an engine holds', () => {
  it('answers list, show, events, why, stats and export from the running engine', async () => {
    const host = await startHost(store);
    const sock = join(store, 'turnlog.sock');
    expect(statSync(sock).mode & 0o777).toBe(0o600);

    const list = await cliJSON(['--store', store, 'list']);
    expect(list.code, list.stderr).toBe(0);
    const byId = Object.fromEntries(list.json.tasks.map((t: { taskId: string }) => [t.taskId, t]));
    expect(byId['live-1']).toMatchObject({ status: 'in_progress', turn: 1 });
    expect(byId['done-1']).toMatchObject({ status: 'suspended' });

    const show = await cliJSON(['--store', store, 'show', 'live-1']);
    expect(show.code, show.stderr).toBe(0);
    expect(show.json.turns[0].steps.map((s: { name: string }) => s.name)).toEqual(['plan']);
    expect(show.json.turns[0].outcome).toBeNull();

    const events = await cli(['--store', store, 'events', 'failed-1']);
    expect(events.code, events.stderr).toBe(0);
    expect(events.stdout).toContain('model refused');

    // The engine's lease is live: why weighs it (the turn is owned), unlike on a free store.
    const why = await cliJSON(['--store', store, 'why', 'live-1']);
    expect(why.code, why.stderr).toBe(0);
    expect(why.json.leaseConsidered).toBe(true);
    expect(why.json.decision.kind).toBe('none');

    const stats = await cliJSON(['--store', store, 'stats']);
    expect(stats.code, stats.stderr).toBe(0);
    expect(stats.json.tasks).toBe(3);

    const out = join(tmp.path, 'live.json');
    const exp = await cli(['--store', store, 'export', 'done-1', '-o', out]);
    expect(exp.code, exp.stderr).toBe(0);
    const file = parseHistoryFile(await readFile(out), out);
    expect(file.tasks[0]!.events.at(-1)!.type).toBe('TurnCompleted');

    // The live turn ends; the next read sees it.
    writeFileSync(`${store}.gate`, '');
    await until(async () => (await cliJSON(['--store', store, 'show', 'live-1'])).json.turns[0]?.outcome !== null, 'live-1 to end');

    // Writing commands would make a second writer: still exit 4.
    const imp = await cli(['--store', store, 'import', out, '--force']);
    expect(imp.code).toBe(4);
    expect(imp.stderr).toContain('is locked by another process');
    // fork appends too: exit 4 like import, not a write refused by the read-only socket (exit 1).
    const fork = await cliJSON(['--store', store, 'fork', 'done-1', '--at-turn', '1']);
    expect(fork.code, fork.stderr).toBe(4);
    expect(fork.json.error.code).toBe('TURNLOG_STORE_LOCKED');
    expect((await cliJSON(['--store', store, 'list'])).json.tasks.map((t: { taskId: string }) => t.taskId)).not.toContain('done-1-fork-1');

    await stopHost(host);
    expect(existsSync(sock)).toBe(false);
    // The store is free again: the CLI opens it itself.
    expect((await cli(['--store', store, 'list'])).code).toBe(0);
  });

  it('the page works live too: turnlog ui lists the engine’s tasks', async () => {
    await startHost(store);
    const ui = spawn(process.execPath, [MAIN, '--store', store, 'ui', '--port', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(ui);
    const line = await new Promise<string>((resolve) => createInterface({ input: ui.stdout! }).once('line', resolve));
    const url = /http:\/\/\S+\//.exec(line)![0];
    const tasks = (await (await fetch(`${url}api/tasks`)).json()) as { tasks: { taskId: string }[] };
    expect(tasks.tasks.map((t) => t.taskId).sort()).toEqual(['done-1', 'failed-1', 'live-1']);
    const task = (await (await fetch(`${url}api/tasks/live-1`)).json()) as Record<string, unknown>;
    expect(JSON.stringify(task)).toContain('plan');
  });

  it('exit 4 when the engine serves no socket (inspect: false)', async () => {
    await startHost(store, 'no-inspect');
    expect(existsSync(join(store, 'turnlog.sock'))).toBe(false);
    const r = await cli(['--store', store, 'list']);
    expect(r.code).toBe(4);
    expect(r.stderr).toContain('serves no inspection socket');
  });

  it('a socket left by a killed engine is harmless: the CLI opens the free store, the next engine serves again', async () => {
    const first = await startHost(store);
    first.kill('SIGKILL');
    await new Promise((r) => first.once('exit', r));
    expect(existsSync(join(store, 'turnlog.sock'))).toBe(true);
    const free = await cliJSON(['--store', store, 'list']);
    expect(free.code, free.stderr).toBe(0);
    await startHost(store);
    const live = await cliJSON(['--store', store, 'show', 'done-1']);
    expect(live.code, live.stderr).toBe(0);
  });
});

describe('operator actions through the running engine', () => {
  type Ev = { type: string; [k: string]: unknown };
  const events = async (taskId: string): Promise<Ev[]> => {
    const r = await cliJSON(['--store', store, 'events', taskId]);
    expect(r.code, r.stderr).toBe(0);
    return r.json.events as Ev[];
  };

  it('refuse without a terminal unless --yes, and change nothing', async () => {
    await startHost(store);
    const r = await cli(['--store', store, 'cancel', 'live-1']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('Pass --yes');
    expect((await events('live-1')).some((e) => e.type === 'CancelRequested' || e.type === 'OperatorAction')).toBe(false);
  });

  // util-linux `script` gives the CLI a real terminal; stdin is typed into it.
  const SCRIPT = existsSync('/usr/bin/script');
  if (!SCRIPT) console.log('skipped: the confirmation prompt test needs /usr/bin/script (util-linux)');
  it.skipIf(!SCRIPT)('ask on a terminal: "n" does nothing, "y" acts', async () => {
    await startHost(store);
    const onTty = (args: string, answer: string) =>
      new Promise<{ code: number; out: string }>((resolve) => {
        const child = spawn('/usr/bin/script', ['-qec', `${process.execPath} ${MAIN} --store ${store} ${args}`, '/dev/null'], { stdio: ['pipe', 'pipe', 'inherit'] });
        let out = '';
        child.stdout!.on('data', (b: Buffer) => (out += b.toString()));
        child.stdin!.end(answer);
        child.on('exit', (code) => resolve({ code: code ?? 1, out }));
      });
    const no = await onTty('cancel live-1 --by carol', 'n\n');
    expect(no.out).toContain('Cancel task live-1? It will never run again. [y/N]');
    expect(no.out).toContain('Not confirmed; nothing was done.');
    expect(no.code).toBe(1);
    expect((await events('live-1')).some((e) => e.type === 'OperatorAction')).toBe(false);
    const yes = await onTty('cancel live-1 --turn --by carol', 'y\n');
    expect(yes.code, yes.out).toBe(0);
    expect((await events('live-1')).find((e) => e.type === 'OperatorAction')).toMatchObject({ action: 'cancel-turn', by: 'carol' });
  });

  it('cancel a turn, withdraw a queued input, re-send and resume a failed turn, each recorded with who did it', async () => {
    await startHost(store);
    // withdraw q-1 (queued behind the open turn), recorded in the same history
    const w = await cliJSON(['--store', store, 'withdraw', 'live-1', 'q-1', '--yes', '--by', 'alice', '--reason', 'sent by mistake']);
    expect(w.code, w.stderr).toBe(0);
    expect(w.json).toMatchObject({ action: 'withdraw', done: true });
    // cancel the open turn: the multi-turn task stays open (suspended), the handler was stopped
    const c = await cli(['--store', store, 'cancel', 'live-1', '--turn', '--yes', '--by', 'alice']);
    expect(c.code, c.stderr).toBe(0);
    await until(async () => (await events('live-1')).some((e) => e.type === 'TurnCancelled'), 'the turn to be cancelled');
    const live = await events('live-1');
    const ops = live.filter((e) => e.type === 'OperatorAction');
    expect(ops).toEqual([
      expect.objectContaining({ action: 'withdraw', by: 'alice', reason: 'sent by mistake', inputId: 'q-1' }),
      expect.objectContaining({ action: 'cancel-turn', by: 'alice', turn: 1 }),
    ]);
    // Each record is in the same append as its effect, right before it.
    const at = (type: string) => live.findIndex((e) => e.type === type);
    expect(at('InputWithdrawn')).toBe(live.indexOf(ops[0]!) + 1);
    expect(at('CancelRequested')).toBe(live.indexOf(ops[1]!) + 1);
    expect((await cliJSON(['--store', store, 'show', 'live-1'])).json.task.status).toBe('suspended');

    // resend failed-1's turn 1: a new input with the same payload runs as turn 2
    const rs = await cliJSON(['--store', store, 'resend', 'failed-1', '1', '--yes', '--by', 'bob']);
    expect(rs.code, rs.stderr).toBe(0);
    expect(rs.json).toMatchObject({ action: 'resend', turn: 1, inputIds: [expect.any(String)] });
    const newId = rs.json.inputIds[0] as string;
    await until(async () => (await events('failed-1')).filter((e) => e.type === 'TurnFailed').length === 2, 'turn 2 to fail again');
    const failed = await events('failed-1');
    const queued = failed.filter((e) => e.type === 'InputQueued');
    expect(queued.map((q) => q.input)).toEqual([queued[0]!.input, queued[0]!.input]);
    expect(failed.find((e) => e.type === 'TurnStarted' && e.turn === 2)).toMatchObject({ inputIds: [newId] });
    expect(failed.find((e) => e.type === 'OperatorAction')).toMatchObject({ action: 'resend', by: 'bob', turn: 1, inputId: queued[0]!.inputId, newInputId: newId });

    // resume: the last failed turn (2) runs again; --by defaults to the OS user
    const rm = await cliJSON(['--store', store, 'resume', 'failed-1', '--yes']);
    expect(rm.code, rm.stderr).toBe(0);
    expect(rm.json).toMatchObject({ action: 'resume', turn: 2 });
    const resumed = (await events('failed-1')).filter((e) => e.type === 'OperatorAction');
    expect(resumed[1]).toMatchObject({ action: 'resume', by: userInfo().username, turn: 2 });

    // show and the timeline name the operator
    const text = await cli(['--store', store, 'show', 'live-1']);
    expect(text.stdout).toContain('operator alice: cancel-turn turn 1');
  });

  it('signal sends a named signal through the engine (buffered until a wait takes it), JSON value or null', async () => {
    await startHost(store);
    const s = await cliJSON(['--store', store, 'signal', 'failed-1', 'approval', '{"approved":true}']);
    expect(s.code, s.stderr).toBe(0);
    expect(s.json).toMatchObject({ action: 'signal', done: true, signalId: expect.stringMatching(/^sig-/) });
    const got = (await events('failed-1')).filter((e) => e.type === 'SignalReceived');
    expect(got).toEqual([expect.objectContaining({ name: 'approval', signalId: s.json.signalId })]);
    expect((await cli(['--store', store, 'show', 'failed-1'])).stdout).toContain('signal "approval" received');
    const bad = await cli(['--store', store, 'signal', 'failed-1', 'approval', '{nope']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('must be JSON');
    const ended = await cli(['--store', store, 'signal', 'nope-task', 'approval']);
    expect(ended.code).not.toBe(0);
    expect(ended.stderr).toContain('Task nope-task does not exist');
  });

  it('refuse what cannot be done, naming why', async () => {
    await startHost(store);
    const done = await cli(['--store', store, 'resend', 'done-1', '1', '--yes']);
    expect(done.code).toBe(2);
    expect(done.stderr).toContain('turn 1 ended with TurnCompleted, not a failure');
    const missing = await cli(['--store', store, 'withdraw', 'live-1', 'nope', '--yes']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('has no queued input nope');
    const unknown = await cli(['--store', store, 'cancel', 'no-such-task', '--yes']);
    expect(unknown.code).toBe(3);
  });

  it('need a running engine: a free store is refused, nothing is written', async () => {
    const host = await startHost(store);
    await stopHost(host);
    const r = await cli(['--store', store, 'cancel', 'live-1', '--yes']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('No running engine answers on store');
  });
});
