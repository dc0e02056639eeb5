/**
 * examples/chat-server in headless Chromium against the built server (a child process): send a
 * message, see tokens before the turn ends, reload mid-answer and carry on from the offset, steer
 * mid-turn, SIGKILL the server after the refund is recorded, restart it, and see the recovered
 * turn finish with the refund issued once. TURNLOG_UI_SCREENSHOTS=1 writes docs/chat-server.png.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, expect, it } from 'vitest';
import { describeBrowser, launchBrowser, type TestBrowser } from '../helpers/browser.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const SERVER = fileURLToPath(new URL('../../dist/examples/chat-server/server.js', import.meta.url));
const DOCS = fileURLToPath(new URL('../../docs/', import.meta.url));
const SHOTS = process.env['TURNLOG_UI_SCREENSHOTS'] === '1';
const WAIT = { timeout: 60_000 };

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** Starts the chat server and resolves once it listens. */
function startServer(env: Record<string, string>, children: ChildProcess[]): Promise<ChildProcess> {
  const child = spawn(process.execPath, [SERVER], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      if (line.includes('listening on')) resolve(child);
    });
    child.once('exit', (code) => reject(new Error(`chat server exited (${code}) before listening`)));
  });
}

async function kill(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await exited;
}

describeBrowser('examples/chat-server (headless Chromium)', () => {
  const children: ChildProcess[] = [];
  let browser: TestBrowser | undefined;
  afterEach(async () => {
    await browser?.close();
    browser = undefined;
    for (const c of children.splice(0)) await kill(c);
  });

  it('streams tokens, survives a reload and a SIGKILL of the server, and refunds once', async () => {
    const data = await makeTmpDir('turnlog-chat-');
    const port = await freePort();
    // Slow tokens: the reload, the steering message and the kill must all land mid-answer, also on a loaded machine.
    const env = { CHAT_DATA: data.path, PORT: String(port), CHAT_TOKEN_MS: '300' };
    const first = await startServer(env, children);
    browser = await launchBrowser();
    const page = await browser.context.newPage();
    await page.goto(`http://127.0.0.1:${port}/?task=chat-e2e`);
    await page.fill('#text', 'My order 1042 arrived broken, can I get a refund?');
    await page.click('#send');

    // Tokens arrive while the turn runs: the assistant bubble grows, no turn has ended.
    await page.waitForFunction("(document.querySelector('.assistant.streaming')?.textContent ?? '').length > 10", undefined, WAIT);
    expect(await page.locator('.note.ended').count()).toBe(0);

    // Reload mid-answer: the transcript comes back and the answer carries on from the offset.
    const before = (await page.locator('.assistant').first().textContent()) ?? '';
    await page.reload();
    await page.waitForFunction(`(document.querySelector('.assistant')?.textContent ?? '').length > ${before.length + 5}`, undefined, WAIT);
    expect(((await page.locator('.assistant').first().textContent()) ?? '').startsWith(before)).toBe(true);

    // A steering message while the turn runs.
    await page.fill('#text', 'also the box was wet');
    await page.click('#send');
    await page.waitForSelector('.msg.user.steer', WAIT);

    // The refund is recorded; kill the server while the rest of the answer streams.
    await page.waitForSelector('.note.tool-done', WAIT);
    expect(await page.locator('.note.ended').count()).toBe(0);
    await kill(first);
    await startServer(env, children);

    // The page reconnects, shows the restart, and the recovered turn finishes.
    await page.waitForSelector('.note.restart', WAIT);
    await page.waitForSelector('.note.ended', WAIT);
    expect(await page.locator('.note.ended').textContent()).toBe('turn 1 suspended');
    const answer = (await page.locator('.assistant').last().textContent()) ?? '';
    expect(answer).toContain('I refunded $42 for order 1042');
    expect(answer).toContain('You also said "also the box was wet"');
    // The refund ran once: one tool start, one result, one ledger line.
    expect(await page.locator('.note.tool').count()).toBe(1);
    expect(await page.locator('.note.tool-done').count()).toBe(1);
    const ledger = (await (await fetch(`http://127.0.0.1:${port}/api/refunds`)).json()) as unknown[];
    expect(ledger).toHaveLength(1);
    if (SHOTS) await page.screenshot({ path: join(DOCS, 'chat-server.png'), fullPage: true });
    await data.remove();
  }, 240_000); // a limit, not an expectation: two server starts and a browser on a loaded machine
});
