/**
 * Group commit for a store whose writes are transactions on a pool (PostgreSQL): an idle store
 * writes a lone submission at once, so grouping costs it nothing; while a batch is being written,
 * later submissions queue and go out together as the next batch, when a batch settles or, with
 * fewer than `maxInFlight` out, `spillMs` after the first of them queued. The second slot waits
 * so that it carries what gathered: opened at each submission, it sent most appends of a busy
 * store alone, one statement each, beside the one big batch (docs/decisions.md); it exists so a
 * batch waiting on a row lock does not stall every append.
 */
export class Batcher<E> {
  readonly #run: (entries: E[], written: () => void) => Promise<void>;
  readonly #maxInFlight: number;
  #inFlight = 0;
  #queue: E[] = [];
  /** Batches and entries written, for the benchmark and tests. */
  batches = 0;
  entries = 0;
  /** Told each batch's size as it goes out (HistoryStore.onCommit). */
  readonly #listeners = new Set<(entries: number) => void>();

  readonly #spillMs: number;
  /** Armed while entries wait with a slot free: sends them when it fires. */
  #spill: ReturnType<typeof setTimeout> | undefined;

  /**
   * `run` writes a batch and settles each entry itself; it must not reject. It may call `written`
   * once the batch is written, before it settles the entries.
   */
  constructor(run: (entries: E[], written: () => void) => Promise<void>, maxInFlight: number, spillMs = 1) {
    this.#run = run;
    this.#maxInFlight = Math.max(1, maxInFlight);
    this.#spillMs = spillMs;
  }

  /** Calls `l` with the number of entries of each batch as it goes out; returns its unsubscribe. */
  listen(l: (entries: number) => void): () => void {
    this.#listeners.add(l);
    return () => this.#listeners.delete(l);
  }

  submit(entry: E): void {
    this.entries++;
    if (this.#inFlight === 0) return this.#start([entry]);
    this.#queue.push(entry);
    if (this.#spill === undefined && this.#inFlight < this.#maxInFlight) {
      this.#spill = setTimeout(this.#spilled, this.#spillMs);
      // Only an early start: the batch in flight sends the queue when it settles.
      this.#spill.unref?.();
    }
  }

  /**
   * Takes the idle store's slot for one entry written by the caller itself (a lone append's
   * callback path, no promise): true if taken, and then `settled()` must follow once it is written.
   */
  claim(): boolean {
    if (this.#inFlight !== 0) return false;
    this.entries++;
    this.#inFlight++;
    this.batches++;
    if (this.#listeners.size > 0) for (const l of this.#listeners) l(1);
    return true;
  }

  /** A claimed entry was written (or failed): its slot is free. */
  settled(): void {
    this.#inFlight--;
    // As #done, from a microtask: the writers that just settled (microtasks) submit first.
    if (this.#queue.length > 0) queueMicrotask(() => process.nextTick(this.#flush));
  }

  readonly #spilled = (): void => {
    this.#spill = undefined;
    this.#flush();
  };

  #start(entries: E[]): void {
    this.#inFlight++;
    this.batches++;
    if (this.#listeners.size > 0) for (const l of this.#listeners) l(entries.length);
    let open = true;
    const done = (): void => {
      if (!open) return;
      open = false;
      this.#done();
    };
    // Written, nothing queued behind it: the slot is free before its entries settle, so a writer's
    // next submission finds the store idle (a lone append may then take the kept connection).
    const written = (): void => {
      if (this.#queue.length === 0) done();
    };
    void this.#run(entries, written).then(done, done);
  }

  /** A batch settled (`then` rather than `finally`: one promise, not three). */
  readonly #done = (): void => {
    this.#inFlight--;
    // Next tick: callers whose writes just settled submit their next ones first, joining this batch.
    process.nextTick(this.#flush);
  };

  readonly #flush = (): void => {
    if (this.#queue.length === 0 || this.#inFlight >= this.#maxInFlight) return;
    if (this.#spill !== undefined) {
      clearTimeout(this.#spill);
      this.#spill = undefined;
    }
    const next = this.#queue;
    this.#queue = [];
    this.#start(next);
  };
}
