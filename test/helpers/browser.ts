/**
 * Headless Chromium for the page tests, driven by playwright-core (which never downloads a
 * browser). The browser is Debian's `chromium` (`/usr/bin/chromium`, or `TURNLOG_CHROMIUM`).
 * Without it the suite is skipped with one line, unless TURNLOG_REQUIRE_BROWSER=1 (CI).
 */
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';
import { describe } from 'vitest';

/** The Chromium executable the tests launch. */
export const CHROMIUM_PATH = process.env['TURNLOG_CHROMIUM'] || '/usr/bin/chromium';

const required = process.env['TURNLOG_REQUIRE_BROWSER'] === '1';

/** Whether the browser suites run here (a required browser that is missing runs and fails). */
export const browserEnabled = existsSync(CHROMIUM_PATH) || required;

/** `describe` for browser suites: skipped with one visible line when Chromium is absent. */
export function describeBrowser(name: string, body: () => void): void {
  if (!browserEnabled) console.warn(`[turnlog] skipping browser suite "${name}": no Chromium at ${CHROMIUM_PATH} (install Debian's chromium or set TURNLOG_CHROMIUM)`);
  describe.skipIf(!browserEnabled)(name, body);
}

/** A launched browser and the way to close it (the browser, then its profile dir). */
export interface TestBrowser {
  /** A persistent context on the fresh profile (playwright takes the profile dir this way). */
  context: BrowserContext;
  close(): Promise<void>;
}

/** Launches headless Chromium with a fresh profile and no background network traffic. */
export async function launchBrowser(): Promise<TestBrowser> {
  if (!existsSync(CHROMIUM_PATH)) throw new Error(`No Chromium at ${CHROMIUM_PATH}: install Debian's chromium (apt-get install -y chromium) or set TURNLOG_CHROMIUM.`);
  const profile = await mkdtemp(join(tmpdir(), 'turnlog-chromium-'));
  // playwright adds --user-data-dir=<profile> itself; it refuses the flag in args.
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM_PATH,
    headless: true,
    viewport: { width: 1280, height: 800 },
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-quic',
    ],
  });
  return {
    context,
    close: async () => {
      await context.close();
      await rm(profile, { recursive: true, force: true });
    },
  };
}
