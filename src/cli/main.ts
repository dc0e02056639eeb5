#!/usr/bin/env node
/**
 * The `turnlog` command line: inspect, export and import histories in a store (docs/cli.md).
 * Every command takes `--store <dir>` and `--json`; exit codes are {@link EXIT}.
 */
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command, CommanderError } from 'commander';
import { registerEvents } from './commands/events.js';
import { registerExport } from './commands/export.js';
import { registerFork } from './commands/fork.js';
import { registerImport } from './commands/import.js';
import { registerList } from './commands/list.js';
import { registerMigrate } from './commands/migrate.js';
import { registerOperatorActions } from './commands/operate.js';
import { registerReplay } from './commands/replay.js';
import { registerSchedules } from './commands/schedules.js';
import { registerShow } from './commands/show.js';
import { registerStats } from './commands/stats.js';
import { registerUi } from './commands/ui.js';
import { registerWhy } from './commands/why.js';
import { DEFAULT_STORE, EXIT, errorJSON, toCliError, type ExitCode } from './context.js';

/** Builds the program (exported for tests and embedding; `run` parses and exits). */
export function createProgram(): Command {
  const program = new Command('turnlog')
    .description('Inspect, export and import turnlog histories.')
    .version(packageVersion(), '-V, --version', 'print the installed turnlog version')
    .option('--store <dir|url>', `store directory or postgres:// URL (default: $TURNLOG_STORE or ${DEFAULT_STORE})`)
    .option('--json', 'machine-readable output on stdout (one JSON document)')
    .option('--codecs <module>', 'JavaScript module exporting payloadCodecs: decode encoded (encrypted) payloads and failures for display and replay')
    .showHelpAfterError('(run turnlog --help for usage)')
    .exitOverride();
  registerList(program);
  registerShow(program);
  registerSchedules(program);
  registerEvents(program);
  registerWhy(program);
  registerExport(program);
  registerImport(program);
  registerFork(program);
  registerStats(program);
  registerReplay(program);
  registerMigrate(program);
  registerUi(program);
  registerOperatorActions(program);
  // Subcommands inherit the override so usage errors anywhere reach run()'s mapping.
  for (const c of program.commands) c.exitOverride();
  return program;
}

/** Parses `argv`, runs the command and resolves to the exit code; never throws. */
export async function run(argv: readonly string[]): Promise<ExitCode> {
  const program = createProgram();
  const json = argv.includes('--json');
  try {
    await program.parseAsync(argv as string[], { from: 'user' });
    return EXIT.ok;
  } catch (err) {
    if (err instanceof CommanderError) {
      // commander already printed the message (stderr); help and --version end with exit code 0.
      if (err.exitCode === 0) return EXIT.ok;
      // --json promises one document on stdout, usage errors included.
      if (json) {
        // No command: commander prints the help and reports "(outputHelp)".
        const message = err.code === 'commander.help' ? `a command is required: ${program.commands.map((c) => c.name()).join(', ')}. Run turnlog --help.` : err.message;
        process.stdout.write(JSON.stringify({ error: { code: 'USAGE', message, exitCode: EXIT.usage } }, null, 2) + '\n');
      }
      return EXIT.usage;
    }
    const e = toCliError(err);
    if (e.printed) return e.exitCode;
    if (json) {
      process.stdout.write(JSON.stringify({ error: errorJSON(e) }, null, 2) + '\n');
    } else {
      process.stderr.write(`turnlog: ${e.message}\n`);
      if (e.code === 'INTERNAL' && e.cause instanceof Error && e.cause.stack) process.stderr.write(e.cause.stack + '\n');
    }
    return e.exitCode;
  }
}

/**
 * The version in turnlog's own package.json, read at run time: the nearest package.json named
 * `turnlog` above this module (dist/src/cli in a checkout or an install, src/cli under vitest).
 */
export function packageVersion(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const file = join(dir, 'package.json');
    if (existsSync(file)) {
      const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: unknown; version?: unknown };
      if (pkg.name === 'turnlog' && typeof pkg.version === 'string') return pkg.version;
    }
    const up = dirname(dir);
    if (up === dir) return 'unknown';
    dir = up;
  }
}

function isMain(): boolean {
  const arg = process.argv[1];
  if (arg === undefined) return false;
  try {
    return realpathSync(arg) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

if (isMain()) {
  // `turnlog events … | head` closes the pipe early: that is not an error.
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') process.exit(EXIT.ok);
    throw err;
  });
  // exitCode, not exit(): stdout may still be draining into a pipe.
  let finished = false;
  void run(process.argv.slice(2)).then((code) => {
    finished = true;
    process.exitCode = code;
  });
  // The event loop drained with the command still waiting: never report that as success.
  process.once('beforeExit', () => {
    if (finished) return;
    const message =
      'the command did not finish: it waited for something that can never happen (for example a --workflows or --codecs module whose top-level await never settles). Fix that module, or report a bug.';
    if (process.argv.includes('--json')) process.stdout.write(JSON.stringify({ error: { code: 'UNFINISHED', message, exitCode: EXIT.error } }, null, 2) + '\n');
    else process.stderr.write(`turnlog: ${message}\n`);
    process.exitCode = EXIT.error;
  });
}
