/**
 * The stream hub: per task, a bounded ring of live items (chunks, steps starting, gaps) and,
 * while a reader is attached, the recent events this engine appended; readers merge them with
 * the history, in offset order.
 * Writers never wait: a full ring drops its oldest live item and a reader behind it gets a gap.
 * I/O only through its {@link StreamSource} (the engine's store and clock). docs/streaming.md.
 */
import type { HistoryEvent, Payload } from '../history/events.js';
import { HistoryItems, type StreamDecoder } from './history-items.js';
import { START, compareOffsets, formatOffset, offsetAhead, parseOffset, type Offset, type StreamItem, type StreamOptions } from './items.js';

/** What the hub reads through: the engine implements it. */
export interface StreamSource {
  /** The task's events from `fromEventId` on (inclusive), from the store. */
  readEvents(taskId: string, fromEventId: number): Promise<HistoryEvent[]>;
  /**
   * True when every event of the task passes through this engine (an exclusive store, or this
   * engine runs its turn): readers are woken by appends and never poll the store.
   */
  writesHere(taskId: string): boolean;
  readonly decoder: StreamDecoder;
  setTimer(fn: () => void, ms: number): { cancel(): void };
}

/** Live output as the engine's host got it (the attempt contract's EmitItem): a chunk is decoded when read. */
export type LiveOutput = { kind: 'chunk'; data: Payload } | { kind: 'step-started'; seq: number; name: string };

export interface StreamHubOptions {
  /** Live items kept per task for readers that fall behind or reconnect. Default 1000. */
  bufferItems?: number;
  /** Tasks whose live items are kept (least recently active dropped first). Default 1000. */
  maxTasks?: number;
}

interface Entry {
  at: Offset;
  item: StreamItem;
  /** A chunk's payload until first read (decoded once, for every reader); always set, so entries share one shape. */
  raw: Payload | undefined;
}

/**
 * A ring of live entries in offset order, at most `cap`: a push on a full ring drops the oldest.
 * The array grows with use (most tasks emit a few items), not to `cap` at once: allocating
 * 1,000 slots for each task that starts a step was most of the GC of recovering 10,000 tasks.
 */
class Ring {
  readonly #buf: Entry[] = [];
  readonly #cap: number;
  #head = 0;
  size = 0;
  constructor(cap: number) {
    this.#cap = cap;
  }
  at(i: number): Entry {
    return this.#buf[(this.#head + i) % this.#cap]!;
  }
  /** Returns the entry dropped to make room, if any. */
  push(e: Entry): Entry | undefined {
    // Until full the head stays at 0, so the next slot is the array's end.
    if (this.size < this.#cap) {
      this.#buf[this.size++] = e;
      return undefined;
    }
    const dropped = this.#buf[this.#head]!;
    this.#buf[this.#head] = e;
    this.#head = (this.#head + 1) % this.#cap;
    return dropped;
  }
  /** Entries after `cursor` up to event `known`, oldest first (scans back from the newest). */
  after(cursor: Offset, known: number, out: Entry[]): void {
    let i = this.size;
    while (i > 0 && compareOffsets(this.at(i - 1).at, cursor) > 0) i--;
    for (; i < this.size; i++) {
      const e = this.at(i);
      if (e.at.e > known) break;
      out.push(e);
    }
  }
}

class TaskLog {
  /** Live items in offset order; at most the hub's `bufferItems`. */
  live: Ring;
  /** The largest offset dropped from `live` (START: none). */
  evictedTo: Offset = START;
  /** The event the next live item follows, and how many live items followed it so far. */
  lastEvent = 0;
  n = 0;
  /**
   * Events this engine appended while a reader was attached, contiguous, newest last (at most
   * 2 × `cap`). Only a cache: a reader's first read, and any read it does not cover, goes to the store.
   */
  events: HistoryEvent[] = [];
  /** Bumped by every append and output: a reader that saw the same version has nothing new. */
  version = 0;
  /** Readers waiting for the next bump; made by the first wait (most tasks are never read). */
  wake: Set<() => void> | undefined;
  /** A wake of the readers is scheduled (setImmediate). */
  waking = false;
  readers = 0;
  constructor(cap: number) {
    this.live = new Ring(cap);
  }
}

export const DEFAULT_POLL_MS = 250;

/** Whether the hub still serves readers, shared with them: closed, or reset since a reader started. */
interface Life {
  closed: boolean;
  /** Bumped by `reset()`: a reader that started under an earlier epoch has ended. */
  epoch: number;
}

export class StreamHub {
  readonly #src: StreamSource;
  readonly #cap: number;
  readonly #maxTasks: number;
  readonly #logs = new Map<string, TaskLog>();
  /** The key last moved to (or added at) the end of `#logs`. */
  #newest: string | undefined;
  readonly #life: Life = { closed: false, epoch: 0 };
  readonly #openLog = (taskId: string): TaskLog => this.#log(taskId);

  constructor(src: StreamSource, options: StreamHubOptions = {}) {
    this.#src = src;
    this.#cap = options.bufferItems ?? 1000;
    this.#maxTasks = options.maxTasks ?? 1000;
  }

  /** After an append (this engine's, or another writer's read back): wake the task's readers. */
  appended(taskId: string, events: readonly HistoryEvent[]): void {
    const log = this.#logs.get(taskId);
    if (!log || events.length === 0) return; // nobody streams this task: nothing to keep
    // No reader: keep no events (a reader's first read goes to the store), so a task that only
    // started steps holds its live items, not its history (profile: 100 new tasks in flight).
    if (log.readers === 0) {
      if (log.events.length) log.events = [];
      log.version++;
      return;
    }
    const last = log.events[log.events.length - 1];
    if (last && last.eventId + 1 !== events[0]!.eventId) log.events = []; // a hole: the store has it
    for (const e of events) log.events.push(e);
    // Trimmed to `cap` once twice as long: O(1) an append, where a splice on every append of a
    // full cache moved `cap` elements each time.
    if (log.events.length > 2 * this.#cap) log.events = log.events.slice(-this.#cap);
    bump(log);
  }

  /** Live output of a running attempt, after event `afterEventId`; `dropped` items were lost before it. */
  output(taskId: string, afterEventId: number, turn: number, attempt: number, out: LiveOutput, time: number, dropped = 0): void {
    if (this.#life.closed) return;
    const log = this.#log(taskId);
    if (afterEventId !== log.lastEvent) {
      log.lastEvent = afterEventId;
      log.n = 0;
    }
    if (dropped > 0) push(log, { kind: 'gap', missed: dropped, reason: 'the worker dropped output: the engine did not read it fast enough', offset: '', taskId, time }, undefined);
    if (out.kind === 'chunk') push(log, { kind: 'chunk', turn, attempt, data: undefined, offset: '', taskId, time }, out.data);
    else push(log, { kind: 'step-started', turn, attempt, seq: out.seq, name: out.name, offset: '', taskId, time }, undefined);
    bump(log);
  }

  /** Ends every reader (engine shutdown) and keeps nothing. */
  close(): void {
    this.#life.closed = true;
    this.reset();
  }

  /**
   * Ends every reader that has started and keeps nothing; the hub serves on (engine quiesce, before
   * a re-activation). A reader made earlier whose first `next()` comes later reads afresh: a reader
   * is bound to its epoch when it starts, not when it is made (test: runtime/streams).
   */
  reset(): void {
    this.#life.epoch++;
    for (const log of this.#logs.values()) {
      log.version++;
      wakeAll(log);
    }
    this.#logs.clear();
    this.#newest = undefined;
  }

  /**
   * Everything after `options.from`, in offset order, then live until the task completes, the
   * signal aborts or the hub closes. Throws TURNLOG_STREAM_OFFSET (first `next()`) for a bad offset.
   * `before` runs first, at the first `next()`; what it throws ends the read.
   */
  read(taskId: string, options: StreamOptions = {}, before?: () => Promise<void>): AsyncGenerator<StreamItem, void, undefined> {
    return new StreamReader(taskId, options, before, this.#src, this.#life, this.#openLog);
  }

  /**
   * The task's log; beyond `maxTasks`, the least recently used logs without readers are dropped.
   * `#logs` is kept in order of use (a used log moves to the end), so trimming walks from the
   * front: O(1) per new task, where sorting every log was 6% of recovering 10,000 tasks.
   */
  #log(taskId: string): TaskLog {
    let log = this.#logs.get(taskId);
    if (log) {
      // Already the most recently used (a turn's run of chunks): no move.
      if (this.#newest !== taskId) {
        this.#logs.delete(taskId);
        this.#logs.set(taskId, log);
        this.#newest = taskId;
      }
      return log;
    }
    log = new TaskLog(this.#cap);
    this.#logs.set(taskId, log);
    this.#newest = taskId;
    if (this.#logs.size > this.#maxTasks) this.#trim();
    return log;
  }

  #trim(): void {
    for (const [id, l] of this.#logs) {
      if (this.#logs.size <= this.#maxTasks) return;
      if (l.readers === 0) this.#logs.delete(id);
    }
  }
}

function push(log: TaskLog, item: StreamItem, raw: Payload | undefined): void {
  const at = { e: log.lastEvent, n: ++log.n };
  item.offset = formatOffset(at);
  const dropped = log.live.push({ at, item, raw });
  if (dropped) log.evictedTo = dropped.at;
}

/**
 * New items: readers are woken on the next turn of the event loop, once per bump burst, not in
 * the writer's microtasks. A turn's next write is submitted before its readers run (their work
 * overlaps the write's sync instead of delaying it), and a step's events and the chunks emitted
 * after it reach a reader in one pass of its loop.
 */
function bump(log: TaskLog): void {
  log.version++;
  if (log.wake?.size && !log.waking) {
    log.waking = true;
    setImmediate(() => {
      log.waking = false;
      wakeAll(log);
    });
  }
}

function wakeAll(log: TaskLog): void {
  if (log.wake?.size) for (const w of [...log.wake]) w();
}

/** Until the log's next bump, the poll (a task another engine writes) or the signal's abort. */
function wait(log: TaskLog, src: StreamSource, pollMs: number | undefined, signal: AbortSignal | undefined): Promise<void> {
  return new Promise<void>((resolve) => {
    const wake = (log.wake ??= new Set());
    const done = (): void => {
      wake.delete(done);
      timer?.cancel();
      signal?.removeEventListener('abort', done);
      resolve();
    };
    wake.add(done);
    const timer = pollMs === undefined ? undefined : src.setTimer(done, pollMs);
    signal?.addEventListener('abort', done, { once: true });
  });
}

const DONE: Promise<IteratorResult<StreamItem, void>> = Promise.resolve({ done: true, value: undefined });
const NEW = 0;
const READING = 1;
const ENDED = 2;

/**
 * One reader, an async iterator written by hand rather than an async generator: items already read
 * are handed out with one resolved promise each, where a generator's yield cost three and a hop
 * (profile in docs/performance.md). Calls made while a read is in flight wait for it, as a generator's would.
 */
class StreamReader implements AsyncGenerator<StreamItem, void, undefined> {
  readonly #taskId: string;
  readonly #options: StreamOptions;
  readonly #before: (() => Promise<void>) | undefined;
  readonly #src: StreamSource;
  readonly #life: Life;
  readonly #openLog: (taskId: string) => TaskLog;
  #state = NEW;
  #epoch = 0;
  #log!: TaskLog;
  #mapper!: HistoryItems;
  #cursor: Offset = START;
  /** The highest event id read so far: live items after a later event wait for it. */
  #known = 0;
  #first = true;
  /** The log's version at the last read: the reader waits while it is unchanged. */
  #seen = 0;
  /** The history said the task completed: end once the batch is handed out. */
  #ended = false;
  /** Entries read, in offset order, after the cursor; handed out from `#at`. */
  #batch: Entry[] = [];
  #at = 0;
  /** The read in flight: `next()`, `return()` and `throw()` called meanwhile run after it. */
  #busy: Promise<unknown> | undefined;

  constructor(taskId: string, options: StreamOptions, before: (() => Promise<void>) | undefined, src: StreamSource, life: Life, openLog: (taskId: string) => TaskLog) {
    this.#taskId = taskId;
    this.#options = options;
    this.#before = before;
    this.#src = src;
    this.#life = life;
    this.#openLog = openLog;
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<IteratorResult<StreamItem, void>> {
    // Also after a failed read: it ended the reader, so this call is done, as a generator's (test: stream/hub-reader-queued).
    if (this.#busy) return this.#busy.then(() => this.next(), () => this.next());
    if (this.#state === ENDED) return DONE;
    if (this.#state === READING && this.#at < this.#batch.length) {
      if (!this.#alive()) return this.#end();
      try {
        return Promise.resolve({ done: false, value: this.#take() });
      } catch (err) {
        this.#end();
        return Promise.reject(err);
      }
    }
    const p = this.#pull();
    this.#busy = p;
    const idle = (): void => {
      if (this.#busy === p) this.#busy = undefined;
    };
    p.then(idle, idle);
    return p;
  }

  return(): Promise<IteratorResult<StreamItem, void>> {
    if (this.#busy) return this.#busy.then(() => this.return(), () => this.return());
    return this.#end();
  }

  throw(err: unknown): Promise<IteratorResult<StreamItem, void>> {
    if (this.#busy) return this.#busy.then(() => this.throw(err), () => this.throw(err));
    this.#end();
    return Promise.reject(err);
  }

  #alive(): boolean {
    return !this.#life.closed && this.#life.epoch === this.#epoch && !this.#options.signal?.aborted;
  }

  /** Ends the read (once) and releases the task's log. */
  #end(): Promise<IteratorResult<StreamItem, void>> {
    if (this.#state === READING) this.#log.readers--;
    this.#state = ENDED;
    this.#batch = [];
    return DONE;
  }

  async #pull(): Promise<IteratorResult<StreamItem, void>> {
    try {
      if (this.#state === NEW) await this.#start();
      for (;;) {
        if (this.#state === ENDED || !this.#alive()) return this.#end();
        if (this.#at < this.#batch.length) return { done: false, value: this.#take() };
        if (this.#ended) return this.#end();
        await this.#fill();
      }
    } catch (err) {
      this.#end();
      throw err;
    }
  }

  async #start(): Promise<void> {
    // The caller's check (the task exists) runs here, at the first next().
    if (this.#before) await this.#before();
    this.#epoch = this.#life.epoch;
    this.#cursor = parseOffset(this.#taskId, this.#options.from);
    this.#known = this.#cursor.e;
    this.#mapper = new HistoryItems(this.#taskId, this.#src.decoder);
    this.#log = this.#openLog(this.#taskId);
    this.#log.readers++;
    this.#state = READING;
  }

  /** The next entry as the reader's item; the cursor moves past it. */
  #take(): StreamItem {
    const entry = this.#batch[this.#at++]!;
    const { at, item } = entry;
    this.#cursor = at;
    if (entry.raw) {
      (item as { data: unknown }).data = this.#src.decoder.chunk(entry.raw);
      entry.raw = undefined;
    }
    if (item.kind === 'task-completed') this.#end();
    // A live item is shared by every reader: each gets its own copy.
    return item.offset ? (at.n > 0 ? copyLive(item) : item) : { ...item, offset: formatOffset(at) };
  }

  /**
   * Reads what came after the cursor into the batch: the task's events (from the cache of
   * appended events when it covers them, with no promise) and the live items, merged in offset
   * order. Waits for the next bump (or poll) when nothing came.
   */
  async #fill(): Promise<void> {
    const log = this.#log;
    const taskId = this.#taskId;
    for (;;) {
      if (!this.#alive()) return;
      if (!this.#first && log.version === this.#seen) {
        // Nothing new since the last read.
        const signal = this.#options.signal;
        if (signal?.aborted) return; // aborted during the read: its listener would never fire
        await wait(log, this.#src, this.#src.writesHere(taskId) ? undefined : this.#options.pollMs ?? DEFAULT_POLL_MS, signal);
        continue;
      }
      this.#seen = log.version;
      const first = this.#first;
      const cursor = this.#cursor;
      let events: readonly HistoryEvent[];
      const cached = log.events;
      const head = cached[0];
      if (!first && head && head.eventId <= this.#known + 1 && this.#src.writesHere(taskId)) {
        events = cached.slice(Math.max(0, this.#known + 1 - head.eventId));
      } else {
        try {
          // On the first read, the event at the offset itself too: it proves the offset is this task's.
          events = await this.#src.readEvents(taskId, first && this.#known > 0 ? this.#known : this.#known + 1);
        } catch (err) {
          if (this.#life.closed || this.#life.epoch !== this.#epoch) return; // the engine shut down (and closed its store) during the read
          throw err;
        }
      }
      // Ids are dense, so a later event and none at the offset means compaction dropped it:
      // the offset is this task's, and the reader gets one gap for what was dropped.
      const compacted = first && cursor.e > 0 && events.length > 0 && events[0]!.eventId > cursor.e;
      if (first && cursor.e > 0 && !compacted && (events.length === 0 || events[0]!.eventId !== cursor.e)) {
        throw offsetAhead(taskId, cursor);
      }
      this.#first = false;
      const batch: Entry[] = [];
      if (compacted && events[0]!.eventId - 1 > cursor.e) {
        const time = events[0]!.time;
        batch.push({ at: { e: events[0]!.eventId - 1, n: 0 }, item: { kind: 'gap', reason: 'the history before this point was compacted', offset: '', taskId, time }, raw: undefined });
      }
      let known = this.#known;
      for (const e of events) {
        // Also the event at the offset: a reader from the task's last item ends at once.
        if (e.type === 'TaskCompleted') this.#ended = true;
        if (e.eventId <= known) continue;
        known = e.eventId;
        const item = this.#mapper.map(e);
        if (item) batch.push({ at: { e: e.eventId, n: 0 }, item, raw: undefined });
      }
      this.#known = known;
      // Live items dropped from the ring after the cursor: one gap item where they were.
      if (compareOffsets(log.evictedTo, cursor) > 0 && log.evictedTo.n > 0 && log.evictedTo.e <= known) {
        const time = log.live.size ? log.live.at(0).item.time : 0; // when the oldest kept item came
        batch.push({ at: log.evictedTo, item: { kind: 'gap', reason: 'this reader fell behind the stream buffer', offset: '', taskId, time }, raw: undefined });
      }
      log.live.after(cursor, known, batch);
      batch.sort(byOffset);
      // Only what is after the cursor, each offset once.
      let last = cursor;
      let n = 0;
      for (const entry of batch) {
        if (compareOffsets(entry.at, last) <= 0) continue;
        last = entry.at;
        batch[n++] = entry;
      }
      batch.length = n;
      this.#batch = batch;
      this.#at = 0;
      if (n > 0 || this.#ended) return;
    }
  }
}

const byOffset = (a: Entry, b: Entry): number => compareOffsets(a.at, b.at);

/** A reader's own copy of a live item: literals for the kinds every step makes (cheaper than a spread). */
function copyLive(i: StreamItem): StreamItem {
  if (i.kind === 'chunk') return { kind: 'chunk', turn: i.turn, attempt: i.attempt, data: i.data, offset: i.offset, taskId: i.taskId, time: i.time };
  if (i.kind === 'step-started') return { kind: 'step-started', turn: i.turn, attempt: i.attempt, seq: i.seq, name: i.name, offset: i.offset, taskId: i.taskId, time: i.time };
  return { ...i };
}
