/** Read ranges and list cursors shared by the stores. */
import { invalidArgument } from '../errors.js';
import type { HistoryEvent } from '../history/events.js';
import type { ReadOptions } from './history-store.js';

export const DEFAULT_PAGE = 100;
/** Largest event id: event ids are uint32 in the proto and in keys. */
export const MAX_EVENT_ID = 0xffffffff;

export function readBounds(options: ReadOptions): { from: number; to: number; limit: number } {
  const from = Math.max(1, options.fromEventId ?? 1);
  const to = Math.min(MAX_EVENT_ID, options.toEventId ?? MAX_EVENT_ID);
  const limit = options.limit ?? Number.POSITIVE_INFINITY;
  if (!(limit >= 0)) throw invalidArgument(`Read limit ${String(limit)} must be ≥ 0.`);
  return { from, to, limit };
}

export function pageLimit(limit: number | undefined): number {
  const n = limit ?? DEFAULT_PAGE;
  if (!Number.isInteger(n) || n < 1) throw invalidArgument(`Page size ${String(limit)} must be a positive integer.`);
  return n;
}

/** Cursors are opaque base64url strings of a store-specific position. */
export function encodeCursor(position: string | Uint8Array): string {
  return Buffer.from(typeof position === 'string' ? Buffer.from(position, 'utf8') : position).toString('base64url');
}

export function decodeCursor(cursor: string): string {
  return Buffer.from(cursor, 'base64url').toString('utf8');
}

export function decodeCursorBytes(cursor: string): Buffer {
  return Buffer.from(cursor, 'base64url');
}

/** Events per page when a store streams a long history (`iterateEvents`). */
export const READ_PAGE = 256;

/** Streams `[from, to]` in pages of `readEvents`, so a long history is never loaded whole. */
export async function* iterateInPages(
  readEvents: (options: ReadOptions) => Promise<HistoryEvent[]>,
  options: ReadOptions,
): AsyncIterable<HistoryEvent> {
  const { from, to, limit } = readBounds(options);
  let next = from;
  let left = limit;
  while (left > 0 && next <= to) {
    const page = await readEvents({ fromEventId: next, toEventId: to, limit: Math.min(READ_PAGE, left) });
    if (page.length === 0) return;
    for (const e of page) yield e;
    next = page[page.length - 1]!.eventId + 1;
    left -= page.length;
  }
}
