/**
 * Group commit for a store whose writes are transactions on a pool (PostgreSQL): while
 * `maxInFlight` batches are being written, later submissions queue and go out together as the
 * next batch. An idle store writes a lone submission at once, so grouping costs it nothing.
 */
export class Batcher<E> {
  readonly #run: (entries: E[]) => Promise<void>;
  readonly #maxInFlight: number;
  #inFlight = 0;
  #queue: E[] = [];
  /** Batches and entries written, for the benchmark and tests. */
  batches = 0;
  entries = 0;
  /** Told each batch's size as it goes out (HistoryStore.onCommit). */
  readonly #listeners = new Set<(entries: number) => void>();

  /** `run` writes a batch and settles each entry itself; it must not reject. */
  constructor(run: (entries: E[]) => Promise<void>, maxInFlight: number) {
    this.#run = run;
    this.#maxInFlight = Math.max(1, maxInFlight);
  }

  /** Calls `l` with the number of entries of each batch as it goes out; returns its unsubscribe. */
  listen(l: (entries: number) => void): () => void {
    this.#listeners.add(l);
    return () => this.#listeners.delete(l);
  }

  submit(entry: E): void {
    this.entries++;
    if (this.#inFlight >= this.#maxInFlight) this.#queue.push(entry);
    else this.#start([entry]);
  }

  #start(entries: E[]): void {
    this.#inFlight++;
    this.batches++;
    if (this.#listeners.size > 0) for (const l of this.#listeners) l(entries.length);
    void this.#run(entries).then(this.#done, this.#done);
  }

  /** A batch settled (`then` rather than `finally`: one promise, not three). */
  readonly #done = (): void => {
    this.#inFlight--;
    // Next tick: callers whose writes just settled submit their next ones first, joining this batch.
    process.nextTick(this.#flush);
  };

  readonly #flush = (): void => {
    if (this.#queue.length === 0 || this.#inFlight >= this.#maxInFlight) return;
    const next = this.#queue;
    this.#queue = [];
    this.#start(next);
  };
}
