/**
 * What every command shares: global options, exit codes, errors that carry an exit code,
 * opening the store (with the locked-store decision of docs/cli.md) and writing output.
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { InvalidArgumentError, type Command } from 'commander';
import { TurnlogError, isHistoryUnreadable, isTurnlogError } from '../errors.js';
import type { HistoryEvent } from '../history/events.js';
import type { PayloadCodec, PayloadConverter } from '../history/payload.js';
import { moduleConverter, payloadPipeline, type PayloadPipeline } from '../history/pipeline.js';
import type { HistoryStore, ReadOptions } from '../store/history-store.js';
import { LevelHistoryStore } from '../store/index.js';
import { inspectStoreDir } from '../store/store-dir.js';
import { isPostgresUrl, type PostgresHistoryStore } from '../store/postgres-store.js';
import { InspectClient, RemoteHistoryStore } from '../inspect/client.js';

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
  /** `--codecs <module>`: a module exporting the engine's payload codecs. */
  codecs?: string;
}

/** The default store directory when neither `--store` nor `TURNLOG_STORE` is given. */
export const DEFAULT_STORE = '.turnlog';

/** An error the CLI reports with a stable `code` and a documented exit code. */
export class CliError extends Error {
  override readonly name = 'CliError';
  /**
   * The command already printed its one `--json` document, with this error inside it
   * (`events`, `show`): `run()` prints nothing more and only exits with `exitCode`.
   */
  readonly printed: boolean;
  constructor(
    readonly code: string,
    message: string,
    readonly exitCode: ExitCode,
    options: { cause?: unknown; printed?: boolean } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.printed = options.printed ?? false;
  }
}

/** The `error` object of a `--json` document. */
export function errorJSON(e: CliError): { code: string; message: string; exitCode: ExitCode } {
  return { code: e.code, message: e.message, exitCode: e.exitCode };
}

/** `err` as a CliError marked as already printed (its document holds the error). */
export function printedError(err: unknown): CliError {
  const e = toCliError(err);
  return new CliError(e.code, e.message, e.exitCode, { cause: err, printed: true });
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
      err.code === 'TURNLOG_TASK_NOT_FOUND' || err.code === 'TURNLOG_STORE_NOT_FOUND'
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
  const o = cmd.optsWithGlobals<{ store?: string; json?: boolean; codecs?: string }>();
  const g: GlobalOptions = { store: o.store ?? process.env['TURNLOG_STORE'] ?? DEFAULT_STORE, json: o.json === true };
  if (o.codecs !== undefined) g.codecs = o.codecs;
  return g;
}

function isCodec(v: unknown): v is PayloadCodec {
  return typeof v === 'object' && v !== null && typeof (v as PayloadCodec).encode === 'function' && typeof (v as PayloadCodec).decode === 'function';
}

/** The codecs a `--codecs` module exports: `payloadCodecs` (an array), or a default array. */
export async function loadCodecs(path: string): Promise<PayloadCodec[]> {
  return (await loadCodecsModule(path)).codecs;
}

/**
 * A `--codecs` module: its codecs, and its `payloadConverter` export if any (the engine's, for
 * `payloads: 'custom'` workflows). A module with a converter and no codecs is fine.
 */
export async function loadCodecsModule(path: string): Promise<{ codecs: PayloadCodec[]; converter: PayloadConverter | undefined }> {
  const abs = resolve(path);
  let mod: Record<string, unknown>;
  try {
    mod = (await import(pathToFileURL(abs).href)) as Record<string, unknown>;
  } catch (err) {
    throw new CliError('TURNLOG_CODECS_MODULE', `Cannot load codecs module ${abs}: ${(err as Error).message}. Pass the compiled JavaScript module that exports payloadCodecs.`, EXIT.error, { cause: err });
  }
  const converter = moduleConverter(mod);
  const list = mod['payloadCodecs'] ?? mod['default'];
  if (converter && list === undefined) return { codecs: [], converter };
  if (!Array.isArray(list) || list.length === 0 || !list.every(isCodec)) {
    throw usageError(`Module ${abs} exports no payload codecs. Export them as \`export const payloadCodecs = [codec]\` (the array the engine gets as payloadCodecs), or as a default array; or export only the engine's payloadConverter.`);
  }
  return { codecs: list, converter };
}

/** What a command body gets: the global options, and `decodeEvent` undoing `--codecs` (identity without). */
export interface StoreContext extends GlobalOptions {
  decodeEvent: (e: HistoryEvent) => HistoryEvent;
  /** The `--codecs` module's codecs and converter (JSON without), for display. */
  pipeline: PayloadPipeline;
  payloadCodecs: readonly PayloadCodec[];
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
 * (`default_transaction_read_only`) and never migrate; `create` (import, migrate) migrates;
 * `write` (operator actions) connects read-write without migrating.
 */
export async function openPostgresCliStore(url: string, options: { create: boolean; write?: boolean }): Promise<PostgresHistoryStore> {
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
    // Operator actions write (an append under fencing) but never migrate a schema.
    readOnly: !options.create && options.write !== true,
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
export async function openCliStore(dir: string, options: { create: boolean; write?: boolean }): Promise<HistoryStore> {
  if (isPostgresUrl(dir)) return openPostgresCliStore(dir, options);
  const abs = resolve(dir);
  // The store refuses these too (store-dir.ts, shared); here they get the CLI's wording.
  const state = await inspectStoreDir(abs);
  const hint = `Pass the engine's store directory with --store <dir> or set TURNLOG_STORE (default ${DEFAULT_STORE}).`;
  if (state === 'not-directory' || (!options.create && state === 'missing')) {
    const what = state === 'missing' ? 'does not exist' : 'is not a directory';
    throw new CliError('TURNLOG_STORE_NOT_FOUND', `Store ${abs} ${what}. ${hint}`, EXIT.notFound);
  }
  // A directory that holds no LevelDB is not a store either: opening it would write a new,
  // empty LevelDB into it (`--store .`, `--store src`). Only `import` may start an empty one.
  if (state === 'foreign' || (!options.create && state === 'empty')) {
    throw new CliError('TURNLOG_STORE_NOT_FOUND', `Directory ${abs} is not a turnlog store (it holds no LevelDB). ${hint}`, EXIT.notFound);
  }
  const store = new LevelHistoryStore(abs, { sync: true, create: options.create });
  try {
    await store.open();
  } catch (err) {
    if (isTurnlogError(err, 'TURNLOG_STORE_LOCKED')) {
      // A live engine holds it: reading commands ask that engine over its socket
      // (docs/cli.md#live-inspection); the engine stays the only writer.
      // A writing command (import, fork) would be a second writer: exit 4, never the socket.
      const writes = options.create || options.write === true;
      const live = writes ? undefined : await InspectClient.connect(abs);
      if (live) return new RemoteHistoryStore(live, abs);
      throw new CliError(
        'TURNLOG_STORE_LOCKED',
        `Store ${abs} is locked by another process, most likely a running turnlog engine${writes ? '' : ' that serves no inspection socket (Engine.open({ inspect: false }), or an older turnlog)'}. LevelDB allows one process per directory, so the CLI cannot open it beside that process. Stop the engine and run this command again, or export from inside the running process with engine.exportHistory().`,
        EXIT.locked,
        { cause: err },
      );
    }
    throw err;
  }
  return store;
}

/**
 * A live engine's connection for an operator action on a LevelDB store: the store is held
 * (connected over its socket), or free (undefined: no engine runs; the caller decides).
 */
export async function connectLiveEngine(dir: string): Promise<InspectClient | undefined> {
  return InspectClient.connect(resolve(dir));
}

/**
 * A task's events in order, like `store.iterateEvents`, except that a page with an unreadable
 * event is read again one event at a time: every event before the unreadable one is yielded,
 * then its error is thrown (`show` and `events` print what is readable of a corrupt task).
 */
export async function* readableEvents(store: HistoryStore, taskId: string, options: ReadOptions = {}): AsyncIterable<HistoryEvent> {
  let next = options.fromEventId ?? 1;
  let left = options.limit ?? Infinity;
  try {
    for await (const e of store.iterateEvents(taskId, options)) {
      yield e;
      next = e.eventId + 1;
      left--;
    }
  } catch (err) {
    if (!isHistoryUnreadable(err)) throw err;
    for (; left > 0; next++, left--) {
      const [e] = await store.readEvents(taskId, { fromEventId: next, toEventId: next });
      if (!e) break;
      yield e;
    }
    throw err;
  }
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
  options: { create?: boolean; write?: boolean },
  body: (store: HistoryStore, g: StoreContext) => Promise<T>,
): Promise<T> {
  const g0 = globals(cmd);
  const loaded = g0.codecs === undefined ? { codecs: [], converter: undefined } : await loadCodecsModule(g0.codecs);
  const payloadCodecs = loaded.codecs;
  const pipeline = payloadPipeline({ codecs: payloadCodecs, converter: loaded.converter });
  const g: StoreContext = { ...g0, payloadCodecs, pipeline, decodeEvent: pipeline.decodeEvent };
  const store = await openCliStore(g.store, { create: options.create ?? false, ...(options.write ? { write: true } : {}) });
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
