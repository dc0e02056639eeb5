/**
 * A process-wide count of engines activated, so `turnlog replay --workflows` can tell that
 * importing a workflows module started work (issue #10 item 17). Kept on globalThis under a
 * Symbol.for key: a global CLI and the app's own copy of turnlog share one count.
 */
const KEY = Symbol.for('turnlog.engine-activations');
const KEEP = 20;

/** One engine activation: where its store is. */
export interface EngineActivation {
  store: string;
}

interface WorkLog {
  total: number;
  recent: EngineActivation[];
}

function workLog(): WorkLog {
  const g = globalThis as unknown as Record<symbol, WorkLog | undefined>;
  return (g[KEY] ??= { total: 0, recent: [] });
}

/** Called by Engine.activate(), synchronously, before any I/O. */
export function noteEngineActivation(a: EngineActivation): void {
  const log = workLog();
  log.total++;
  log.recent.push(a);
  if (log.recent.length > KEEP) log.recent.shift();
}

/** A mark to pass to {@link engineActivationsSince}. */
export function engineActivationMark(): number {
  return workLog().total;
}

/** How many engines were activated since `mark`, and the latest of them (up to 20). */
export function engineActivationsSince(mark: number): { count: number; latest: EngineActivation[] } {
  const log = workLog();
  const count = log.total - mark;
  return { count, latest: count <= 0 ? [] : log.recent.slice(-Math.min(count, KEEP)) };
}
