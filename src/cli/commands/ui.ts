/**
 * `turnlog ui`: serves the timeline page for the store on a local port until interrupted.
 * LevelDB: the server holds the store's lock, so it shows a store no engine holds.
 * PostgreSQL: it reads while engines run, and the page follows their tasks live.
 */
import { spawn } from 'node:child_process';
import { InvalidArgumentError, type Command } from 'commander';
import { startUiServer } from '../../ui/server.js';
import { printText, withStore } from '../context.js';

interface UiFlags {
  port: number;
  host: string;
  open?: boolean;
}

function port(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError('Expected a port number 0..65535.');
  return n;
}

/** Opens the URL in the desktop's browser, best effort (a headless machine has none). */
function openBrowser(url: string): void {
  const cmd = process.platform === 'darwin' ? 'open' : process.platform === 'win32' ? 'explorer' : 'xdg-open';
  const child = spawn(cmd, [url], { stdio: 'ignore', detached: true });
  child.on('error', () => process.stderr.write(`turnlog ui: could not start ${cmd}; open ${url} yourself.\n`));
  child.unref();
}

/** Registers `ui` on the program. */
export function registerUi(program: Command): void {
  program
    .command('ui')
    .description('serve the timeline page for the store on a local port (Ctrl-C stops it)')
    .option('--port <n>', 'port to listen on (0: a free one)', port, 4480)
    .option('--host <host>', 'address to bind; anyone who can reach it can read the store', '127.0.0.1')
    .option('--open', "open the page in the desktop's browser")
    .action(async (flags: UiFlags, cmd: Command) => {
      await withStore(cmd, {}, async (store, g) => {
        const server = await startUiServer({ store, decodeEvent: g.decodeEvent, converter: g.pipeline.converter, host: flags.host, port: flags.port });
        // The first stdout line is the URL: tests and scripts read it to find a port picked with --port 0.
        await printText(`turnlog ui: ${server.url} (store ${store.location}; Ctrl-C stops)`);
        if (flags.open) openBrowser(server.url);
        await new Promise<void>((resolve) => {
          const stop = (): void => {
            process.off('SIGINT', stop);
            process.off('SIGTERM', stop);
            resolve();
          };
          process.on('SIGINT', stop);
          process.on('SIGTERM', stop);
        });
        await server.close();
      });
    });
}
