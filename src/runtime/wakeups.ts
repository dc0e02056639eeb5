/**
 * Due wake-ups of tasks waiting for a scheduled input (`send(input, { deliverAt })`): one
 * min-heap of (time, task) and one clock timer for its head, however many tasks wait — no
 * per-task timer (bench/time.bench.ts). A wake-up only asks the driver to decide again; the
 * decision (rule `timer-due`) comes from the history, so a stale or doubled entry is harmless.
 */
import type { Timer } from './clock.js';
import type { Runtime } from './runtime.js';

interface Entry {
  at: number;
  taskId: string;
}

export class Wakeups {
  readonly #rt: Runtime;
  readonly #wake: (taskId: string) => Promise<void>;
  readonly #heap: Entry[] = [];
  /** The earliest wake-up armed per task (a later one for the same task is dropped). */
  readonly #byTask = new Map<string, number>();
  #timer: Timer | undefined;
  #armedAt = Infinity;

  constructor(rt: Runtime, wake: (taskId: string) => Promise<void>) {
    this.#rt = rt;
    this.#wake = wake;
  }

  /** Tasks with a wake-up armed. */
  get size(): number {
    return this.#byTask.size;
  }

  /** Wakes `taskId` at `at` (engine clock), unless an earlier wake-up of it is armed. */
  add(taskId: string, at: number): void {
    const known = this.#byTask.get(taskId);
    if (known !== undefined && known <= at) return;
    this.#byTask.set(taskId, at);
    push(this.#heap, { at, taskId });
    if (at < this.#armedAt) this.#arm();
  }

  #arm(): void {
    this.#timer?.cancel();
    this.#timer = undefined;
    this.#armedAt = Infinity;
    // Entries superseded by an earlier wake-up of the same task are dropped here, lazily.
    while (this.#heap.length > 0 && this.#byTask.get(this.#heap[0]!.taskId) !== this.#heap[0]!.at) pop(this.#heap);
    const head = this.#heap[0];
    if (!head || !this.#rt.open) return;
    this.#armedAt = head.at;
    // Not a background timer: a due input is work the engine owes, like a running turn's timeout
    // (a script awaiting its turn result must not exit first; shutdown() cancels it).
    this.#timer = this.#rt.clock.setTimer(() => this.#fire(), head.at - this.#rt.clock.now());
  }

  #fire(): void {
    this.#timer = undefined;
    this.#armedAt = Infinity;
    const now = this.#rt.clock.now();
    const due: string[] = [];
    while (this.#heap.length > 0 && this.#heap[0]!.at <= now) {
      const e = pop(this.#heap)!;
      if (this.#byTask.get(e.taskId) !== e.at) continue;
      this.#byTask.delete(e.taskId);
      due.push(e.taskId);
    }
    void this.#run(due);
    this.#arm();
  }

  /** Drives the due tasks, up to `recoveryConcurrency` at once (their appends share group commits). */
  async #run(ids: string[]): Promise<void> {
    const running = new Set<Promise<void>>();
    for (const id of ids) {
      if (!this.#rt.open) return;
      while (running.size >= this.#rt.recoveryConcurrency) await Promise.race(running);
      const p = this.#wake(id).finally(() => running.delete(p));
      running.add(p);
    }
    await Promise.all(running);
  }

  /** Cancels the timer and forgets every wake-up (the next activation's scan finds them again). */
  stop(): void {
    this.#timer?.cancel();
    this.#timer = undefined;
    this.#armedAt = Infinity;
    this.#heap.length = 0;
    this.#byTask.clear();
  }
}

function push(h: Entry[], e: Entry): void {
  h.push(e);
  let i = h.length - 1;
  while (i > 0) {
    const p = (i - 1) >> 1;
    if (h[p]!.at <= h[i]!.at) break;
    [h[p], h[i]] = [h[i]!, h[p]!];
    i = p;
  }
}

function pop(h: Entry[]): Entry | undefined {
  const top = h[0];
  const last = h.pop();
  if (h.length > 0 && last) {
    h[0] = last;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < h.length && h[l]!.at < h[m]!.at) m = l;
      if (r < h.length && h[r]!.at < h[m]!.at) m = r;
      if (m === i) break;
      [h[m], h[i]] = [h[i]!, h[m]!];
      i = m;
    }
  }
  return top;
}
