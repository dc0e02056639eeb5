/**
 * The NOTIFY side of the PostgreSQL store's notices (postgres-listener.ts listens): each committed
 * append's `lastEventId:taskId`, sent after the writer has its result, in a transaction of its
 * own with `synchronous_commit off` (PostgreSQL serializes the commits of notifying transactions
 * database-wide: inside the write's transaction they would serialize every engine's durable
 * commits; docs/decisions.md). One notifying transaction at a time per store, and at most one per
 * `intervalMs` (the store's `noticeIntervalMs`): appends that commit meanwhile go together in the
 * next, and a task appended to twice meanwhile is notified once with its latest id (a listener
 * re-reads up to the head either way). The first notice after a quiet spell goes at once. A
 * routine notice (an append of a running turn's own records, which no other engine acts on)
 * waits up to ROUTINE_FACTOR intervals, unless another notice or a drain sends it sooner: a turn's
 * steps cost one transaction per ten intervals, not one per step. A notice is a hint: one lost
 * with its connection is not retried, the engines' poll is the net.
 */
import { encodeNotice } from './postgres-listener.js';
import { quoteLiteral } from './postgres-rows.js';

interface NotifyClient {
  query(text: string): Promise<unknown>;
  release(err?: Error | boolean): void;
}

/** How many intervals a routine notice may wait for company. */
export const ROUTINE_FACTOR = 10;

export class Notifier {
  readonly #connect: () => Promise<NotifyClient>;
  readonly #channel: string;
  /** Task id → the latest committed last event id not yet notified. */
  #pending = new Map<string, number>();
  #sending: Promise<void> | undefined;
  readonly #intervalMs: number;
  /** When the last notifying transaction went out (performance.now()). */
  #lastSent = -Infinity;
  /** Whether a pending notice is not routine (or a drain waits): the next goes one interval after the last. */
  #urgent = false;
  /** Ends the current wait early (an urgent notice arrived). */
  #wake: (() => void) | undefined;
  /** Notifying transactions sent, for the benchmark and tests. */
  sent = 0;

  constructor(connect: () => Promise<NotifyClient>, channel: string, intervalMs = 0) {
    this.#connect = connect;
    this.#channel = channel;
    this.#intervalMs = intervalMs;
  }

  /** Queues the notice of a committed append (`routine`: only a running turn's own records). */
  add(taskId: string, lastEventId: number, routine = false): void {
    const prev = this.#pending.get(taskId);
    if (prev === undefined || prev < lastEventId) this.#pending.set(taskId, lastEventId);
    if (!routine) this.#hurry();
    this.#sending ??= this.#send();
  }

  /** Resolves once every queued notice has been sent (or dropped with its connection), routine ones within an interval. */
  async drain(): Promise<void> {
    while (this.#sending) {
      this.#hurry();
      await this.#sending;
    }
  }

  #hurry(): void {
    if (this.#urgent) return;
    this.#urgent = true;
    this.#wake?.();
  }

  async #send(): Promise<void> {
    // A tick first: appends settled in this tick join the same transaction.
    await new Promise<void>((r) => process.nextTick(r));
    try {
      while (this.#pending.size > 0) {
        // Not before the interval since the last one (routine notices: ROUTINE_FACTOR intervals):
        // what commits meanwhile joins this one. An urgent notice ends a routine wait early.
        const wait = this.#lastSent + this.#intervalMs * (this.#urgent ? 1 : ROUTINE_FACTOR) - performance.now();
        if (wait > 0) {
          await new Promise<void>((r) => {
            const timer = setTimeout(r, wait);
            this.#wake = () => {
              clearTimeout(timer);
              r();
            };
          });
          this.#wake = undefined;
          continue;
        }
        this.#lastSent = performance.now();
        this.#urgent = false;
        const batch = this.#pending;
        this.#pending = new Map();
        const payloads = [...batch].map(([taskId, id]) => quoteLiteral(encodeNotice(taskId, id)));
        this.sent++;
        let client: NotifyClient;
        try {
          client = await this.#connect();
        } catch {
          continue;
        }
        await client.query(`BEGIN; SET LOCAL synchronous_commit TO off; SELECT pg_notify('${this.#channel}', n) FROM unnest(ARRAY[${payloads.join(',')}]::text[]) n; COMMIT`).then(
          () => client.release(),
          (err: Error) => client.release(err),
        );
      }
    } finally {
      this.#sending = undefined;
    }
  }
}
