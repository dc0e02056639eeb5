/**
 * The timeline page in headless Chromium against the built CLI (`turnlog ui` in a child
 * process). PostgreSQL: an engine in another process runs a turn and the page follows it live;
 * a worker SIGKILLed at the hard cap shows the kill; a SIGKILLed engine's turn, recovered by a
 * second engine, shows the recovery with its rule.
 * LevelDB: a store no engine holds shows its list and a timeline with kills and recoveries.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { Page } from 'playwright-core';
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { stepThenStall } from '../fixtures/workflows/pg-recovery.js';
import { appendHistory, ensureBuilt, MAIN, ROOT, withLevel } from '../cli/run-cli.js';
import { richHistory } from '../cli/helpers.js';
import { describeBrowser, launchBrowser, type TestBrowser } from '../helpers/browser.js';
import { PG_URL, dropSchema, pgEnabled, uniqueSchema } from '../helpers/postgres.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const LIVE_HOST = fileURLToPath(new URL('../../dist/test/fixtures/children/ui-live-host.js', import.meta.url));
const PG_HOST = fileURLToPath(new URL('../../dist/test/fixtures/children/pg-engine-host.js', import.meta.url));
// Screenshots go to docs/ only when asked (TURNLOG_UI_SCREENSHOTS=1), so test runs leave the tree clean.
const SHOTS = process.env['TURNLOG_UI_SCREENSHOTS'] === '1' ? join(ROOT, 'docs') : undefined;

async function shot(page: Page, name: string): Promise<void> {
  if (SHOTS) await page.screenshot({ path: join(SHOTS, name) });
}
const WAIT = { timeout: 60_000 };

/** Spawns a child and resolves with its first stdout line (rejecting if it exits first). */
function spawnLine(args: string[], children: ChildProcess[]): Promise<string> {
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  return new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`${args.join(' ')} exited (${code}) before printing`)));
  });
}

/** Starts `turnlog ui --port 0` on a store and returns the URL it prints. */
async function startUi(store: string, children: ChildProcess[]): Promise<string> {
  const line = await spawnLine([MAIN, '--store', store, 'ui', '--port', '0'], children);
  const url = /http:\/\/\S+\//.exec(line)?.[0];
  if (!url) throw new Error(`turnlog ui printed no URL: ${line}`);
  return url;
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await exited;
}

async function until(cond: () => Promise<boolean>, what: string, limitMs = 60_000): Promise<void> {
  const end = Date.now() + limitMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function openTask(page: Page, taskId: string): Promise<void> {
  await page.click(`#tasks li[data-task="${taskId}"]`, WAIT);
  await page.waitForSelector(`#detail h2:text-is("${taskId}")`, WAIT);
}

describeBrowser('turnlog ui (headless Chromium)', () => {
  const children: ChildProcess[] = [];
  const cleanups: (() => Promise<unknown>)[] = [];
  let browser: TestBrowser | undefined;
  afterEach(async () => {
    await browser?.close();
    browser = undefined;
    for (const c of children.splice(0)) await stop(c);
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it.skipIf(!pgEnabled)('PostgreSQL: follows a running turn live, shows a hard-cap kill, and a SIGKILLed engine’s turn recovered with its rule', async () => {
    ensureBuilt();
    const schema = uniqueSchema('turnlog_ui');
    cleanups.push(() => dropSchema(schema));
    const tmp = await makeTmpDir('turnlog-ui-');
    cleanups.push(tmp.remove);
    const dir = tmp.path;
    const gate = join(dir, 'gate');

    // t1: an engine SIGKILLed mid-turn; a second engine recovers it once the lease expires.
    const { pid } = JSON.parse(await spawnLine([PG_HOST, PG_URL, schema, '2000'], children)) as { pid: number };
    const killed = children.at(-1)!;
    await stop(killed);
    expect(pid).toBe(killed.pid);
    const store = createPostgresStore({ connectionString: PG_URL, schema });
    const engine = await Engine.open({ store, workflows: [stepThenStall], logger: silentLogger, owner: 'engine-b', instance: 'host-b', scanIntervalMs: 100 });
    cleanups.push(() => store.close());
    cleanups.push(() => engine.shutdown({ graceMs: 100 }));
    await until(async () => (await engine.history('t1')).some((e) => e.type === 'TaskCompleted'), 'engine-b to recover t1');

    // live-1: a turn in another process that waits on the gate file after its first step.
    await spawnLine([LIVE_HOST, PG_URL, schema, gate], children);
    const url = await startUi(`${PG_URL}?schema=${schema}`, children);
    browser = await launchBrowser();
    const page = await browser.context.newPage();
    await page.goto(url);
    await page.waitForSelector('#tasks li[data-task="live-1"]', WAIT);
    await page.waitForSelector('#tasks li[data-task="t1"]', WAIT);
    await shot(page, 'ui-tasks.png');

    await openTask(page, 'live-1');
    // Live: the first step shows while the turn still runs (the gate is closed).
    await page.waitForSelector('.turn[data-turn="1"] [data-step="plan"]', WAIT);
    expect(await page.locator('.turn[data-turn="1"] .live').textContent()).toBe('running…');
    await shot(page, 'ui-live.png');
    await writeFile(gate, '');
    await page.waitForSelector('.turn[data-turn="1"] .outcome', WAIT);
    expect(await page.locator('.turn[data-turn="1"] .outcome').textContent()).toMatch(/^completed after /);
    expect(await page.locator('.turn[data-turn="1"] [data-step]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-step')))).toEqual(['plan', 'wait-for-gate', 'answer']);
    await shot(page, 'ui-timeline.png');

    // runaway-1: the process worker hung in a busy loop and was SIGKILLed at the hard cap.
    await openTask(page, 'runaway-1');
    await page.waitForSelector('ol.events li.kill[data-type="WorkerKilled"]', WAIT);
    await page.waitForSelector('.turn[data-turn="1"] .outcome', WAIT);
    expect(await page.locator('.turn[data-turn="1"] .outcome').textContent()).toMatch(/^timed out after .*: hard_cap$/);
    expect(await page.locator('.turn[data-turn="1"] .mark.kill').textContent()).toBe('worker killed ×1');
    expect(await page.locator('.turn[data-turn="1"] .mark.timeout').count()).toBe(1);
    // The open task's list entry follows its timeline without waiting for the list refresh.
    await page.waitForSelector('#tasks li[data-task="runaway-1"] .badge.completed', WAIT);
    await shot(page, 'ui-kill.png');

    await openTask(page, 't1');
    await page.waitForSelector('.turn[data-turn="1"] .mark.recovery[data-rule="recover"]', WAIT);
    expect(await page.locator('.turn[data-turn="1"] .attempt').allTextContents()).toEqual([
      expect.stringMatching(/^attempt 1 · fresh · inline pid \d+$/),
      expect.stringMatching(/^attempt 2 · recovered · inline pid \d+$/),
    ]);
    expect(await page.locator('ol.events li.recovery[data-type="TurnStarted"]').count()).toBe(1);
    await shot(page, 'ui-recovery.png');
  });

  it('LevelDB: a store no engine holds shows the list, the filter, and a timeline with kills, timeouts and recoveries', async () => {
    ensureBuilt();
    const tmp = await makeTmpDir('turnlog-ui-level-');
    cleanups.push(tmp.remove);
    const dir = tmp.path;
    const storeDir = join(dir, 'store');
    await mkdir(storeDir);
    await withLevel(storeDir, (s) => appendHistory(s, 't-rich', richHistory()));
    const url = await startUi(storeDir, children);
    browser = await launchBrowser();
    const page = await browser.context.newPage();
    await page.goto(url);
    await page.waitForSelector('#tasks li[data-task="t-rich"]', WAIT);

    // The status filter goes through the API: no completed task here.
    await page.selectOption('#status', 'completed');
    await page.waitForSelector('#tasks li.empty', WAIT);
    expect(await page.locator('#tasks li.empty').textContent()).toBe('No tasks match this filter.');
    await page.selectOption('#status', '');
    await openTask(page, 't-rich');

    await page.waitForSelector('ol.events li.kill[data-type="WorkerKilled"]', WAIT);
    expect(await page.locator('.mark.recovery').evaluateAll((m) => m.map((x) => x.getAttribute('data-rule')))).toContain('recover');
    expect(await page.locator('.mark.kill').count()).toBeGreaterThan(0);
    expect(await page.locator('.mark.timeout').count()).toBeGreaterThan(0);
    await shot(page, 'ui-level.png');
  });
});
