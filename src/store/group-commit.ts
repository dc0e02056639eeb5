/**
 * Group commit: while one batch is being written, later writes queue up and go out together
 * as the next batch. An idle store writes at once, so a lone append costs one write; a busy
 * store pays one fsync for everything that arrived during the previous one.
 */

export type BatchOp = { type: 'put'; key: Buffer; value: Buffer } | { type: 'del'; key: Buffer };

/** Writes one atomic batch; `sync` asks for it to be durable before resolving. */
export type BatchWriter = (ops: BatchOp[], sync: boolean) => Promise<void>;

interface Entry {
  ops: BatchOp[];
  sync: boolean;
  /** The task whose cached head this write advances. */
  taskId: string;
  /** Runs synchronously once the batch is durable; the write's promise resolves with its value. */
  commit: () => unknown;
  /** Absent for a write that went out alone: the batch's own reaction settles it. */
  resolve: ((value: unknown) => void) | undefined;
  reject: ((err: unknown) => void) | undefined;
}

/**
 * Merges writes into as few batches as the disk allows. Each write is all or nothing (it is
 * inside one batch), and writes keep their submission order (a batch applies ops in order).
 */
export class GroupCommitter {
  readonly #write: BatchWriter;
  /** Called with the tasks of a failed batch so the store can drop their cached heads. */
  readonly #onFailure: (taskIds: ReadonlySet<string>) => void;
  /** A batch is being written. */
  #writing = false;
  /** A batch settled and the tick that writes the next one has not run yet. */
  #flushing = false;
  /** The task of the last batch when it had one write: its caller writes alone (a sequential task). */
  #lone: string | undefined;
  #queue: Entry[] = [];
  #idle: (() => void)[] = [];
  /** Batches and writes issued, for the benchmark and tests. */
  batches = 0;
  writes = 0;
  /** Told each batch's size as it goes out (HistoryStore.onCommit). */
  readonly #listeners = new Set<(writes: number) => void>();

  constructor(write: BatchWriter, onFailure: (taskIds: ReadonlySet<string>) => void) {
    this.#write = write;
    this.#onFailure = onFailure;
  }

  /**
   * Queues one atomic write; resolves with `commit`'s value, which runs once the write is durable.
   * `next`: a caller waits on it to go on (an append, not a snapshot or a lease renewal); `'new'`:
   * such an append that creates its task (AppendOptions.fresh).
   */
  submit<T>(taskId: string, ops: BatchOp[], sync: boolean, commit: () => T, next: boolean | 'new' = false): Promise<T> {
    // The lone writer resumed by the last batch appends again, or creates a task (a caller
    // starting tasks one after another: a new task has no earlier batch to ride with): it goes
    // out now, with whatever queued meanwhile, instead of after every other microtask of this
    // tick (docs/storage.md).
    const resumed = this.#flushing && next !== false && (this.#lone === taskId || (next === 'new' && this.#lone !== undefined));
    if (!this.#writing && this.#queue.length === 0 && (!this.#flushing || resumed)) {
      // Alone (an idle store, or a writer going out at once with nothing queued): the batch's
      // reaction settles it and is what the caller awaits. One promise, where the write's own
      // promise and the batch's reaction made two (each runs the step scope's hooks).
      this.writes++;
      this.#lone = undefined;
      const entries: Entry[] = [{ ops, sync, taskId, commit, resolve: undefined, reject: undefined }];
      return this.#start(entries).then(
        () => this.#settle(entries, undefined) as T,
        (err: unknown) => {
          const e = err ?? new Error('batch write failed');
          this.#settle(entries, e);
          throw e;
        },
      );
    }
    return new Promise<T>((resolve, reject) => {
      const entry: Entry = { ops, sync, taskId, commit, resolve: resolve as (value: unknown) => void, reject };
      this.writes++;
      if (this.#writing) this.#queue.push(entry);
      else if (resumed) {
        this.#lone = undefined;
        this.#queue.push(entry);
        const next = this.#queue;
        this.#queue = [];
        this.#run(next);
      } else if (this.#flushing) this.#queue.push(entry);
      else this.#run([entry]);
    });
  }

  /** Calls `l` with the number of writes of each batch as it goes out; returns its unsubscribe. */
  listen(l: (writes: number) => void): () => void {
    this.#listeners.add(l);
    return () => this.#listeners.delete(l);
  }

  /** Resolves once every submitted write has settled. */
  drain(): Promise<void> {
    if (!this.#writing && !this.#flushing) return Promise.resolve();
    return new Promise((resolve) => this.#idle.push(resolve));
  }

  #run(entries: Entry[]): void {
    this.#start(entries).then(
      () => void this.#settle(entries, undefined),
      (err: unknown) => void this.#settle(entries, err ?? new Error('batch write failed')),
    );
  }

  /** Writes `entries` as one batch. */
  #start(entries: Entry[]): Promise<void> {
    this.#writing = true;
    this.batches++;
    if (this.#listeners.size > 0) for (const l of this.#listeners) l(entries.length);
    let ops: BatchOp[];
    let sync = false;
    if (entries.length === 1) {
      ops = entries[0]!.ops;
      sync = entries[0]!.sync;
    } else {
      ops = [];
      for (const e of entries) {
        for (const op of e.ops) ops.push(op);
        sync ||= e.sync;
      }
    }
    try {
      return this.#write(ops, sync);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** Commits or fails a written batch's entries; returns the first entry's commit value. */
  #settle(entries: Entry[], err: unknown): unknown {
    let failed: Entry[] = [];
    const values: unknown[] = [];
    if (err === undefined) {
      for (const e of entries) values.push(e.commit());
    } else {
      // Queued writes were validated against heads that assumed this batch lands: they fail too.
      const tasks = new Set(entries.map((e) => e.taskId));
      failed = this.#queue.filter((e) => tasks.has(e.taskId));
      this.#queue = this.#queue.filter((e) => !tasks.has(e.taskId));
      this.#onFailure(tasks);
    }
    for (let i = 0; i < entries.length; i++) {
      if (err === undefined) entries[i]!.resolve?.(values[i]);
      else entries[i]!.reject?.(err);
    }
    for (const e of failed) e.reject?.(err);
    // The next batch goes out on the next tick: the callers just resolved submit their next
    // writes in microtasks, which run first, so they join one batch instead of one going out
    // alone. A batch of one write had one caller to wait for: its next write goes out at once.
    this.#writing = false;
    this.#flushing = true;
    this.#lone = entries.length === 1 && err === undefined ? entries[0]!.taskId : undefined;
    process.nextTick(this.#onTick);
    return values[0];
  }

  readonly #onTick = (): void => {
    this.#flushing = false;
    this.#lone = undefined;
    // A lone writer's next batch went out already: the queue waits for it to settle.
    if (this.#writing) return;
    this.#flush();
  };

  #flush(): void {
    const next = this.#queue;
    this.#queue = [];
    if (next.length > 0) {
      this.#run(next);
      return;
    }
    this.#writing = false;
    const idle = this.#idle;
    this.#idle = [];
    for (const r of idle) r();
  }
}
