/**
 * Structured logging hook (`EngineOptions.logger`). The default writes warnings and errors to
 * stderr. Fields carry ids (`taskId`, `turn`, `attempt`) and a `code`; see docs/workflows.md#logging.
 */
export interface Logger {
  debug?(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

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
