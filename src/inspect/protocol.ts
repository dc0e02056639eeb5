/**
 * The live-inspection socket's protocol (docs/cli.md#live-inspection): newline-delimited JSON
 * over a Unix domain socket in the store directory. A request is `{ id, op, args }`; the answer
 * is `{ id, result }` or `{ id, error: { code, message } }`. Events travel as their stored
 * protobuf bytes in base64, so the CLI decodes exactly what the store holds.
 */
import { join } from 'node:path';
import { TurnlogError, isTurnlogError, type ErrorCode } from '../errors.js';
import { decodeEvent, encodeEvent } from '../history/codec.js';
import type { HistoryEvent } from '../history/events.js';

/** The socket's file name inside a LevelDB store directory. */
export const SOCKET_NAME = 'turnlog.sock';

/** Longest path `connect`/`listen` accept for a Unix socket on Linux (108 bytes with the NUL). */
export const MAX_SOCKET_PATH = 107;

export function socketPath(storeDir: string): string {
  return join(storeDir, SOCKET_NAME);
}

/** Read operations every live engine answers (the read side of `HistoryStore`). */
export type ReadOp = 'readEvents' | 'getSummary' | 'listTasks' | 'getLease' | 'getSnapshot' | 'listCorrupt' | 'now' | 'hello';
/** Operator actions (docs/cli.md#operator-actions); each is recorded in the history with `by`. */
export type ActionOp = 'cancel' | 'withdraw' | 'resend' | 'resume' | 'signal';
export type Op = ReadOp | ActionOp;

export interface Request {
  id: number;
  op: Op;
  args: Record<string, unknown>;
}

export type Response = { id: number; result: unknown } | { id: number; error: { code: string; message: string } };

export function encodeEvents(events: readonly HistoryEvent[]): string[] {
  return events.map((e) => Buffer.from(encodeEvent(e)).toString('base64'));
}

export function decodeEvents(taskId: string, lines: readonly string[]): HistoryEvent[] {
  return lines.map((b) => decodeEvent(Buffer.from(b, 'base64'), taskId));
}

/** An error as it crosses the socket: turnlog codes survive, anything else is the server's bug. */
export function errorToWire(err: unknown): { code: string; message: string } {
  if (isTurnlogError(err)) return { code: err.code, message: err.message };
  return { code: 'TURNLOG_INSPECT_SOCKET', message: `The engine failed to answer: ${err instanceof Error ? err.message : String(err)}` };
}

export function errorFromWire(e: { code: string; message: string }): TurnlogError {
  const code = (e.code.startsWith('TURNLOG_') ? e.code : 'TURNLOG_INSPECT_SOCKET') as ErrorCode;
  return new TurnlogError(code, e.message);
}

/** Splits a byte stream into lines, calling `onLine` for each complete one. */
export function lineReader(onLine: (line: string) => void): (chunk: Buffer) => void {
  let buf = '';
  return (chunk) => {
    buf += chunk.toString('utf8');
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.length > 0) onLine(line);
    }
  };
}
