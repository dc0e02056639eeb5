/**
 * What `task.stream()` yields (docs/streaming.md): the turn lifecycle read from the history
 * (durable) and the output of running attempts (live, in memory), each with an offset. Offsets
 * are `"<eventId>"` for a durable item and `"<eventId>.<n>"` for the n-th live item produced
 * after that event; they sort in stream order. Pure: no I/O.
 */
import { TurnlogError } from '../errors.js';
import type { EntryMode, FailureInfo, TaskOutcome } from '../history/events.js';

interface Base {
  /** Pass the last offset you saw as `stream({ from })` to carry on after it. */
  offset: string;
  taskId: string;
  /** ms since epoch: when the event was appended or the output produced. */
  time: number;
}

/** Durable: read from the history, so every reader on any engine sees them, also after a crash. */
export type DurableStreamItem =
  | (Base & { kind: 'input-queued'; inputId: string; input: unknown; steering: boolean })
  | (Base & { kind: 'turn-started'; turn: number; attempt: 1; inputIds: string[]; entryMode: EntryMode })
  /** A crash, kill, exit for recovery or a dead engine ended the previous attempt; a new one runs the turn again. */
  | (Base & { kind: 'attempt-restarted'; turn: number; attempt: number; reason: string })
  | (Base & { kind: 'step-completed'; turn: number; seq: number; name: string; result?: unknown; failure?: FailureInfo })
  | (Base & { kind: 'inputs-taken'; turn: number; inputIds: string[] })
  | (Base & { kind: 'turn-ended'; turn: number; status: 'completed' | 'suspended' | 'failed' | 'cancelled' | 'timed_out'; output?: unknown; reason?: string; failure?: FailureInfo })
  | (Base & { kind: 'task-completed'; outcome: TaskOutcome });

/** Live: produced by the running attempt on the engine that runs it, kept in memory only. */
export type LiveStreamItem =
  | (Base & { kind: 'chunk'; turn: number; attempt: number; data: unknown })
  | (Base & { kind: 'step-started'; turn: number; attempt: number; seq: number; name: string })
  /** Live items this reader will never get: dropped from a full buffer; `missed` when known. */
  | (Base & { kind: 'gap'; missed?: number; reason: string });

export type StreamItem = DurableStreamItem | LiveStreamItem;

export interface StreamOptions {
  /** Carry on after this offset (exclusive). Default: from the start of the task's history. */
  from?: string;
  /** Ends the iteration (it returns, it does not throw). */
  signal?: AbortSignal;
  /**
   * How often to read the store for a task that another engine may be writing (a shared store
   * such as PostgreSQL, and this engine does not run the turn). Default 250 ms.
   */
  pollMs?: number;
}

/** An offset as numbers: the event it follows and the live item's place after it (0: the event itself). */
export interface Offset {
  e: number;
  n: number;
}

export const START: Offset = { e: 0, n: 0 };

export function formatOffset(o: Offset): string {
  return o.n === 0 ? String(o.e) : `${o.e}.${o.n}`;
}

export function compareOffsets(a: Offset, b: Offset): number {
  return a.e - b.e || a.n - b.n;
}

/** Parses a `from` offset; TURNLOG_STREAM_OFFSET names the task and the fix. */
export function parseOffset(taskId: string, s: unknown): Offset {
  if (s === undefined) return START;
  const m = typeof s === 'string' ? /^(0|[1-9]\d{0,14})(?:\.([1-9]\d{0,14}))?$/.exec(s) : null;
  if (!m) {
    throw new TurnlogError('TURNLOG_STREAM_OFFSET', `Task ${taskId}: stream offset ${JSON.stringify(s)} is not an offset ("<event>" or "<event>.<n>", as items carry it). Pass an item's offset, or no \`from\` to read from the start.`);
  }
  return { e: Number(m[1]), n: m[2] ? Number(m[2]) : 0 };
}

/** A `from` past the task's history (no event at the offset): from another task or another store. */
export function offsetAhead(taskId: string, from: Offset): TurnlogError {
  return new TurnlogError(
    'TURNLOG_STREAM_OFFSET',
    `Task ${taskId}: stream offset ${formatOffset(from)} is past the task's last event (it has no event ${from.e}), so it came from another task or store. Reconnect without \`from\` to read from the start.`,
  );
}
