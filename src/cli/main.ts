#!/usr/bin/env node
/**
 * The `turnlog` command line: inspect, export and import histories in a store (docs/cli.md).
 * Every command takes `--store <dir>` and `--json`; exit codes are {@link EXIT}.
 */
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Command, CommanderError } from 'commander';
import { registerEvents } from './commands/events.js';
import { registerExport } from './commands/export.js';
import { registerImport } from './commands/import.js';
import { registerList } from './commands/list.js';
import { registerMigrate } from './commands/migrate.js';
import { registerReplay } from './commands/replay.js';
import { registerShow } from './commands/show.js';
import { registerStats } from './commands/stats.js';
import { registerWhy } from './commands/why.js';
import { DEFAULT_STORE, EXIT, toCliError, type ExitCode } from './context.js';

/** Builds the program (exported for tests and embedding; `run` parses and exits). */
export function createProgram(): Command {
  const program = new Command('turnlog')
    .description('Inspect, export and import turnlog histories.')
    .option('--store <dir|url>', `store directory or postgres:// URL (default: $TURNLOG_STORE or ${DEFAULT_STORE})`)
    .option('--json', 'machine-readable output on stdout (one JSON document)')
    .showHelpAfterError('(run turnlog --help for usage)')
    .exitOverride();
  registerList(program);
  registerShow(program);
  registerEvents(program);
  registerWhy(program);
  registerExport(program);
  registerImport(program);
  registerStats(program);
  registerReplay(program);
  registerMigrate(program);
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
      // commander already printed the message; help and --version end with exit code 0.
      return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
    }
    const e = toCliError(err);
    if (json) {
      process.stdout.write(JSON.stringify({ error: { code: e.code, message: e.message, exitCode: e.exitCode } }, null, 2) + '\n');
    } else {
      process.stderr.write(`turnlog: ${e.message}\n`);
      if (e.code === 'INTERNAL' && e.cause instanceof Error && e.cause.stack) process.stderr.write(e.cause.stack + '\n');
    }
    return e.exitCode;
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
  void run(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
