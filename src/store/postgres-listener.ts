/**
 * LISTEN/NOTIFY for the PostgreSQL store: after each committed append the store sends `pg_notify`
 * with the task id and its new last event id (in a transaction of its own, postgres-notifier.ts),
 * and one dedicated connection per store listens, so engines learn other engines' appends without
 * polling. The connection reconnects with backoff; after a reconnect it reports `resync` (notices
 * may have been missed).
 */
import { createHash } from 'node:crypto';
import type { AppendNotice } from './history-store.js';

/** A connection that can LISTEN: a `pg` client taken out of the pool for good. */
interface ListenClient {
  query(text: string): Promise<unknown>;
  on(event: 'notification', fn: (msg: { channel: string; payload?: string }) => void): void;
  on(event: 'error' | 'end', fn: (err?: Error) => void): void;
  release(err?: Error | boolean): void;
}

/** The channel of a schema: short (identifiers stop at 63 bytes) and the same in every engine. */
export function noticeChannel(schema: string): string {
  return `turnlog_${createHash('sha256').update(schema).digest('hex').slice(0, 24)}`;
}

/** `lastEventId:taskId` (task ids may hold ':'; the number never does). */
export function encodeNotice(taskId: string, lastEventId: number): string {
  return `${lastEventId}:${taskId}`;
}

export function decodeNotice(payload: string): AppendNotice | undefined {
  const at = payload.indexOf(':');
  const id = Number(payload.slice(0, at));
  if (at < 1 || !Number.isInteger(id)) return undefined;
  return { taskId: payload.slice(at + 1), lastEventId: id };
}

const BACKOFF_MIN_MS = 100;
const BACKOFF_MAX_MS = 5_000;

export class PgListener {
  readonly #connect: () => Promise<ListenClient>;
  readonly #channel: string;
  readonly #listeners = new Set<(n: AppendNotice) => void>();
  #client: ListenClient | undefined;
  #release: ((err?: Error | boolean) => void) | undefined;
  #connecting: Promise<void> | undefined;
  #retry: NodeJS.Timeout | undefined;
  #backoff = BACKOFF_MIN_MS;
  #connectedOnce = false;
  #stopped = false;
  /** Connections made, for tests of the reconnect. */
  connects = 0;

  constructor(connect: () => Promise<unknown>, channel: string) {
    this.#connect = connect as () => Promise<ListenClient>;
    this.#channel = channel;
  }

  /** Subscribes; the first subscriber opens the connection. Returns the unsubscribe function. */
  subscribe(fn: (n: AppendNotice) => void): () => void {
    this.#listeners.add(fn);
    if (!this.#client && !this.#connecting && !this.#retry) this.#start();
    return () => {
      this.#listeners.delete(fn);
    };
  }

  /** Resolves once listening (or the attempt failed; it then retries in the background). */
  ready(): Promise<void> {
    return this.#connecting ?? Promise.resolve();
  }

  get listening(): boolean {
    return this.#client !== undefined;
  }

  #start(): void {
    if (this.#stopped) return;
    this.#connecting = this.#open().finally(() => (this.#connecting = undefined));
  }

  async #open(): Promise<void> {
    let client: ListenClient | undefined;
    try {
      client = await this.#connect();
      const c = client;
      // Released once, whichever comes first: an error, the end, a failed LISTEN or stop().
      let released = false;
      const release = (err?: Error | boolean) => {
        if (released) return;
        released = true;
        c.release(err ?? true);
      };
      client = { ...c, release } as ListenClient;
      this.#release = release;
      const fail = (err?: Error) => {
        if (released) return;
        if (this.#client === c) this.#client = undefined;
        release(err ?? true);
        this.#schedule();
      };
      c.on('error', fail);
      c.on('end', fail);
      c.on('notification', (msg) => {
        if (msg.channel !== this.#channel || msg.payload === undefined) return;
        const n = decodeNotice(msg.payload);
        if (n) this.#emit(n);
      });
      await c.query(`LISTEN "${this.#channel}"`);
      if (this.#stopped) {
        release(true);
        return;
      }
      this.#client = c;
      this.connects++;
      this.#backoff = BACKOFF_MIN_MS;
      // Appends committed while no connection listened were not heard: subscribers re-read.
      if (this.#connectedOnce) this.#emit({ resync: true });
      this.#connectedOnce = true;
    } catch {
      client?.release(true);
      this.#schedule();
    }
  }

  #schedule(): void {
    if (this.#stopped || this.#retry) return;
    const delay = this.#backoff;
    this.#backoff = Math.min(this.#backoff * 2, BACKOFF_MAX_MS);
    this.#retry = setTimeout(() => {
      this.#retry = undefined;
      // A first connection that never came still owes its subscribers a resync once it does.
      this.#connectedOnce ||= this.#listeners.size > 0;
      this.#start();
    }, delay);
    this.#retry.unref();
  }

  #emit(n: AppendNotice): void {
    for (const fn of this.#listeners) {
      try {
        fn(n);
      } catch {
        // A subscriber's failure is its own; the others still hear the notice.
      }
    }
  }

  /** Stops listening and gives the connection back (closed, not reused). */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#retry) clearTimeout(this.#retry);
    this.#retry = undefined;
    await this.#connecting?.catch(() => undefined);
    const c = this.#client;
    this.#client = undefined;
    this.#listeners.clear();
    if (c) await c.query(`UNLISTEN *`).catch(() => undefined);
    this.#release?.(true);
  }
}
