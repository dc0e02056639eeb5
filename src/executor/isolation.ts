/**
 * The isolation boundary flag. A worker process sets it before it loads any user code;
 * engine and client entry points call {@link assertOutsideWorker} so a handler that reaches
 * for them gets a clear IsolationBoundaryError instead of a second store owner (invariant 2).
 */
import { IsolationBoundaryError } from '../errors.js';

const FLAG = Symbol.for('turnlog.isolated-worker');

/** Marks this process as an isolated worker. Called once by child-main. */
export function markIsolatedWorker(): void {
  (globalThis as Record<symbol, unknown>)[FLAG] = true;
}

/** True inside an isolated worker process. */
export function isIsolatedWorker(): boolean {
  return (globalThis as Record<symbol, unknown>)[FLAG] === true;
}

/** Throws IsolationBoundaryError naming `api` when called inside an isolated worker. */
export function assertOutsideWorker(api: string): void {
  if (isIsolatedWorker()) throw new IsolationBoundaryError(api);
}
