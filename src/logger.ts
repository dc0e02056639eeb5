/**
 * Structured logging hook (`EngineOptions.logger`). The default writes warnings and errors to
 * stderr. Fields carry ids (`taskId`, `turn`, `attempt`) and a `code`; see docs/workflows.md#logging.
 * `TURNLOG_LOG=json` (or `logFormat: 'json'`) makes the default one JSON object per line
 * (docs/observability.md#logs).
 */
import { invalidArgument } from './errors.js';

export interface Logger {
  debug?(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

/** The default logger's format: readable text, or one JSON object per line. */
export type LogFormat = 'text' | 'json';

function line(level: string, message: string, fields?: Record<string, unknown>): string {
  const parts = Object.entries(fields ?? {}).map(([k, v]) => `${k}=${v instanceof Error ? v.message : typeof v === 'string' ? v : JSON.stringify(v)}`);
  return `[turnlog] ${level} ${message}${parts.length ? ' ' + parts.join(' ') : ''}`;
}

export const consoleLogger: Logger = {
  info: () => {},
  warn: (m, f) => console.error(line('warn', m, f)),
  error: (m, f) => console.error(line('error', m, f)),
};

/** Discards everything (tests, benchmarks). */
export const silentLogger: Logger = { info: () => {}, warn: () => {}, error: () => {} };

/** The active span's ids for log lines; set by the tracing integration (docs/observability.md). */
let traceSource: (() => { traceId: string; spanId: string } | undefined) | undefined;

/** Installs (or, with undefined, removes) the source of `traceId`/`spanId` for JSON log lines. */
export function setLogTraceSource(source: typeof traceSource): void {
  traceSource = source;
}

/** An error as JSON: name, message, and the turnlog `code` when it has one. */
function errorJSON(err: Error): Record<string, unknown> {
  const code = (err as { code?: unknown }).code;
  return { name: err.name, message: err.message, ...(typeof code === 'string' ? { code } : {}) };
}

function jsonValue(_key: string, v: unknown): unknown {
  if (v instanceof Error) return errorJSON(v);
  if (typeof v === 'bigint') return v.toString();
  return v;
}

/**
 * One JSON object per line: `time` (ISO), `level`, `msg`, then the fields (`taskId`, `turn`,
 * `attempt`, `code`, …; errors as `{ name, message, code }`), and `traceId`/`spanId` while a
 * span is active. Writes info and above (debug too with `debug: true`) to `write`, default stderr.
 */
export function jsonLogger(options: { write?: (line: string) => void; debug?: boolean; now?: () => number } = {}): Logger {
  const write = options.write ?? ((l: string) => void process.stderr.write(l));
  const now = options.now ?? Date.now;
  const emit = (level: string) => (msg: string, fields?: Record<string, unknown>) => {
    const trace = traceSource?.();
    const record = { time: new Date(now()).toISOString(), level, msg, ...fields, ...trace };
    write(JSON.stringify(record, jsonValue) + '\n');
  };
  const logger: Logger = { info: emit('info'), warn: emit('warn'), error: emit('error') };
  if (options.debug) logger.debug = emit('debug');
  return logger;
}

/**
 * The engine's default logger: `format`, else `$TURNLOG_LOG` (`json` or `text`), else text
 * ({@link consoleLogger}). Any other value is refused, naming it (a typo would hide the logs).
 */
export function defaultLogger(format?: LogFormat, env: NodeJS.ProcessEnv = process.env): Logger {
  const chosen = format ?? (env['TURNLOG_LOG'] || undefined);
  if (chosen === undefined || chosen === 'text') return consoleLogger;
  if (chosen === 'json') return jsonLogger();
  const where = format === undefined ? `TURNLOG_LOG=${chosen}` : `logFormat: ${JSON.stringify(chosen)}`;
  throw invalidArgument(`${where} is not a log format. Use json (one JSON object per line) or text (the default).`);
}
