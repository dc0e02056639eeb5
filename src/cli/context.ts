/**
 * What every command shares: global options, exit codes, errors that carry an exit code,
 * opening the store (with the locked-store decision of docs/cli.md) and writing output.
 */
import { stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { InvalidArgumentError, type Command } from 'commander';
import { TurnlogError, isTurnlogError } from '../errors.js';
import type { HistoryStore } from '../store/history-store.js';
import { LevelHistoryStore } from '../store/index.js';
import { isPostgresUrl, type PostgresHistoryStore } from '../store/postgres-store.js';

/** Documented exit codes (docs/cli.md#exit-codes). */
export const EXIT = {
  ok: 0,
  error: 1,
  usage: 2,
  notFound: 3,
  locked: 4,
} as const;
export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

/** Options every command accepts. */
export interface GlobalOptions {
  store: string;
  json: boolean;
}

/** The default store directory when neither `--store` nor `TURNLOG_STORE` is given. */
export const DEFAULT_STORE = '.turnlog';

/** An error the CLI reports with a stable `code` and a documented exit code. */
export class CliError extends Error {
  override readonly name = 'CliError';
  constructor(
    readonly code: string,
    message: string,
    readonly exitCode: ExitCode,
    options: { cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
  }
}

/** A usage error (exit 2): bad option values, conflicting options. */
export function usageError(message: string): CliError {
  return new CliError('USAGE', message, EXIT.usage);
}

/** Maps any thrown value to what the CLI prints and exits with. */
export function toCliError(err: unknown): CliError {
  if (err instanceof CliError) return err;
  if (isTurnlogError(err)) {
    const exit =
      err.code === 'TURNLOG_TASK_NOT_FOUND'
        ? EXIT.notFound
        : err.code === 'TURNLOG_STORE_LOCKED'
          ? EXIT.locked
          : err.code === 'TURNLOG_INVALID_ARGUMENT'
            ? EXIT.usage
            : EXIT.error;
    return new CliError(err.code, err.message, exit, { cause: err });
  }
  const message = err instanceof Error ? err.message : String(err);
  return new CliError('INTERNAL', message, EXIT.error, { cause: err });
}

/** Reads the global options wherever they were given (before or after the command name). */
export function globals(cmd: Command): GlobalOptions {
  const o = cmd.optsWithGlobals<{ store?: string; json?: boolean }>();
  return { store: o.store ?? process.env['TURNLOG_STORE'] ?? DEFAULT_STORE, json: o.json === true };
}

/** commander parser for positive integers (`--limit`). */
export function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('Expected a positive integer.');
  return n;
}

/**
 * Opens a PostgreSQL store for one command. `?schema=` in the URL (else `TURNLOG_PG_SCHEMA`,
 * else `turnlog`) names the schema. Reading commands connect read-only
 * (`default_transaction_read_only`) and never migrate; `create` (import, migrate) migrates.
 */
export async function openPostgresCliStore(url: string, options: { create: boolean }): Promise<PostgresHistoryStore> {
  const { createPostgresStore, parsePostgresUrl } = await import('../store/postgres-store.js');
  let parsed: ReturnType<typeof parsePostgresUrl>;
  try {
    parsed = parsePostgresUrl(url);
  } catch (err) {
    throw usageError((err as Error).message);
  }
  const { connectionString } = parsed;
  const schema = parsed.schema ?? (process.env['TURNLOG_PG_SCHEMA'] || undefined);
  const store = createPostgresStore({
    connectionString,
    ...(schema === undefined ? {} : { schema }),
    max: 2,
    migrate: options.create,
    readOnly: !options.create,
  });
  try {
    await store.open();
  } catch (err) {
    if (isTurnlogError(err, 'TURNLOG_STORE_NOT_FOUND')) throw new CliError(err.code, err.message, EXIT.notFound, { cause: err });
    throw err;
  }
  return store;
}

/**
 * Opens the store for one command. Reading commands never create a store (a typo in
 * `--store` would otherwise leave an empty LevelDB behind); `import` does.
 * A store held by a running engine is exit 4 (docs/cli.md#locked-store).
 */
export async function openCliStore(dir: string, options: { create: boolean }): Promise<HistoryStore> {
  if (isPostgresUrl(dir)) return openPostgresCliStore(dir, options);
  const abs = resolve(dir);
  if (!options.create) {
    const st = await stat(abs).catch(() => undefined);
    if (!st?.isDirectory()) {
      throw new CliError(
        'TURNLOG_STORE_NOT_FOUND',
        `Store ${abs} does not exist. Pass the engine's store directory with --store <dir> or set TURNLOG_STORE (default ${DEFAULT_STORE}).`,
        EXIT.notFound,
      );
    }
    // An existing directory that holds no LevelDB (no CURRENT file) is not a store either:
    // opening it would write a new, empty LevelDB into it (`--store .`, `--store src`).
    const current = await stat(join(abs, 'CURRENT')).catch(() => undefined);
    if (!current?.isFile()) {
      throw new CliError(
        'TURNLOG_STORE_NOT_FOUND',
        `Directory ${abs} is not a turnlog store (it holds no LevelDB). Pass the engine's store directory with --store <dir> or set TURNLOG_STORE (default ${DEFAULT_STORE}).`,
        EXIT.notFound,
      );
    }
  }
  const store = new LevelHistoryStore(abs, { sync: true });
  try {
    await store.open();
  } catch (err) {
    if (isTurnlogError(err, 'TURNLOG_STORE_LOCKED')) {
      throw new CliError(
        'TURNLOG_STORE_LOCKED',
        `Store ${abs} is locked by another process, most likely a running turnlog engine. LevelDB allows one process per directory, so the CLI cannot attach even read-only. Stop the engine and run this command again, or export from inside the running process with engine.exportHistory().`,
        EXIT.locked,
        { cause: err },
      );
    }
    throw err;
  }
  return store;
}

/** The task's summary, or exit 3 naming the task and the store. */
export async function requireTask(store: HistoryStore, taskId: string) {
  const summary = await store.getSummary(taskId);
  if (!summary) {
    throw new TurnlogError(
      'TURNLOG_TASK_NOT_FOUND',
      `Task ${taskId} is not in store ${store.location}. List the tasks with \`turnlog list\`, or check --store.`,
    );
  }
  return summary;
}

/**
 * Runs a command body with the store open, and always closes it: LevelDB's lock is released
 * on close, so an engine started right after the command can open the store.
 */
export async function withStore<T>(
  cmd: Command,
  options: { create?: boolean },
  body: (store: HistoryStore, g: GlobalOptions) => Promise<T>,
): Promise<T> {
  const g = globals(cmd);
  const store = await openCliStore(g.store, { create: options.create ?? false });
  try {
    return await body(store, g);
  } finally {
    await store.close();
  }
}

/** Writes to stdout, waiting for 'drain' when the pipe is full (large `events` or exports). */
export function writeOut(text: string | Uint8Array): Promise<void> | void {
  if (process.stdout.write(text)) return;
  return new Promise((res) => process.stdout.once('drain', res));
}

/** Prints a JSON document on stdout (the `--json` contract: one document per run). */
export function printJSON(value: unknown): Promise<void> | void {
  return writeOut(JSON.stringify(value, null, 2) + '\n');
}

/** Prints text plus a newline on stdout. */
export function printText(text: string): Promise<void> | void {
  return writeOut(text.endsWith('\n') ? text : text + '\n');
}
