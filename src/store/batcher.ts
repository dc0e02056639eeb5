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

  /** `run` writes a batch and settles each entry itself; it must not reject. */
  constructor(run: (entries: E[]) => Promise<void>, maxInFlight: number) {
    this.#run = run;
    this.#maxInFlight = Math.max(1, maxInFlight);
  }

  submit(entry: E): void {
    this.entries++;
    if (this.#inFlight >= this.#maxInFlight) this.#queue.push(entry);
    else this.#start([entry]);
  }

  #start(entries: E[]): void {
    this.#inFlight++;
    this.batches++;
    void this.#run(entries).finally(() => {
      this.#inFlight--;
      // Next tick: callers whose writes just settled submit their next ones first, joining this batch.
      process.nextTick(() => this.#flush());
    });
  }

  #flush(): void {
    if (this.#queue.length === 0 || this.#inFlight >= this.#maxInFlight) return;
    const next = this.#queue;
    this.#queue = [];
    this.#start(next);
  }
}
