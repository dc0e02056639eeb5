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
  /** A chunk's payload until first read (decoded once, for every reader). */
  raw?: Payload;
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

export class StreamHub {
  readonly #src: StreamSource;
  readonly #cap: number;
  readonly #maxTasks: number;
  readonly #logs = new Map<string, TaskLog>();
  /** The key last moved to (or added at) the end of `#logs`. */
  #newest: string | undefined;
  #closed = false;
  /** Bumped by `reset()`: a reader that started under an earlier epoch has ended. */
  #epoch = 0;

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
    this.#bump(log);
  }

  /** Live output of a running attempt, after event `afterEventId`; `dropped` items were lost before it. */
  output(taskId: string, afterEventId: number, turn: number, attempt: number, out: LiveOutput, time: number, dropped = 0): void {
    if (this.#closed) return;
    const log = this.#log(taskId);
    if (afterEventId !== log.lastEvent) {
      log.lastEvent = afterEventId;
      log.n = 0;
    }
    if (dropped > 0) this.#push(log, { kind: 'gap', missed: dropped, reason: 'the worker dropped output: the engine did not read it fast enough', offset: '', taskId, time });
    if (out.kind === 'chunk') this.#push(log, { kind: 'chunk', turn, attempt, data: undefined, offset: '', taskId, time }, out.data);
    else this.#push(log, { kind: 'step-started', turn, attempt, seq: out.seq, name: out.name, offset: '', taskId, time });
    this.#bump(log);
  }

  /** Ends every reader (engine shutdown) and keeps nothing. */
  close(): void {
    this.#closed = true;
    this.reset();
  }

  /**
   * Ends every reader that has started and keeps nothing; the hub serves on (engine quiesce, before
   * a re-activation). A reader made earlier whose first `next()` comes later reads afresh: a reader
   * is bound to its epoch when it starts, not when it is made (test: runtime/streams).
   */
  reset(): void {
    this.#epoch++;
    for (const log of this.#logs.values()) {
      log.version++;
      StreamHub.#wakeAll(log);
    }
    this.#logs.clear();
    this.#newest = undefined;
  }

  /**
   * Everything after `options.from`, in offset order, then live until the task completes, the
   * signal aborts or the hub closes. Throws TURNLOG_STREAM_OFFSET (first `next()`) for a bad offset.
   * `before` runs first, at the first `next()`; what it throws ends the read.
   */
  async *read(taskId: string, options: StreamOptions = {}, before?: () => Promise<void>): AsyncGenerator<StreamItem, void, undefined> {
    // The caller's check (the task exists) runs here, at the first next(): one generator per
    // reader, where a generator delegating with yield* doubled every item's promise hops.
    if (before) await before();
    const epoch = this.#epoch;
    let cursor = parseOffset(taskId, options.from);
    const pollMs = options.pollMs ?? DEFAULT_POLL_MS;
    const signal = options.signal;
    const mapper = new HistoryItems(taskId, this.#src.decoder);
    const log = this.#log(taskId);
    log.readers++;
    try {
      /** The highest event id read so far: live items after a later event wait for it. */
      let known = cursor.e;
      let first = true;
      for (;;) {
        if (this.#closed || this.#epoch !== epoch || signal?.aborted) return;
        const seen = log.version;
        let events: readonly HistoryEvent[];
        try {
          events = await this.#eventsFrom(log, taskId, known, first);
        } catch (err) {
          if (this.#closed || this.#epoch !== epoch) return; // the engine shut down (and closed its store) during the read
          throw err;
        }
        // Ids are dense, so a later event and none at the offset means compaction dropped it:
        // the offset is this task's, and the reader gets one gap for what was dropped.
        const compacted = first && cursor.e > 0 && events.length > 0 && events[0]!.eventId > cursor.e;
        if (first && cursor.e > 0 && !compacted && (events.length === 0 || events[0]!.eventId !== cursor.e)) {
          throw offsetAhead(taskId, cursor, events.length ? events[events.length - 1]!.eventId : 0);
        }
        first = false;
        const batch: Entry[] = [];
        if (compacted && events[0]!.eventId - 1 > cursor.e) {
          const time = events[0]!.time;
          batch.push({ at: { e: events[0]!.eventId - 1, n: 0 }, item: { kind: 'gap', reason: 'the history before this point was compacted', offset: '', taskId, time } });
        }
        let ended = false;
        for (const e of events) {
          // Also the event at the offset: a reader from the task's last item ends at once.
          if (e.type === 'TaskCompleted') ended = true;
          if (e.eventId <= known) continue;
          known = e.eventId;
          const item = mapper.map(e);
          if (item) batch.push({ at: { e: e.eventId, n: 0 }, item });
        }
        // Live items dropped from the ring after the cursor: one gap item where they were.
        if (compareOffsets(log.evictedTo, cursor) > 0 && log.evictedTo.n > 0 && log.evictedTo.e <= known) {
          const time = log.live.size ? log.live.at(0).item.time : 0; // when the oldest kept item came
          batch.push({ at: log.evictedTo, item: { kind: 'gap', reason: 'this reader fell behind the stream buffer', offset: '', taskId, time } });
        }
        log.live.after(cursor, known, batch);
        batch.sort((a, b) => compareOffsets(a.at, b.at));
        for (const entry of batch) {
          const { at, item } = entry;
          if (compareOffsets(at, cursor) <= 0) continue;
          cursor = at;
          if (entry.raw) {
            (item as { data: unknown }).data = this.#src.decoder.chunk(entry.raw);
            delete entry.raw;
          }
          // A live item is shared by every reader: each gets its own copy.
          yield item.offset ? (at.n > 0 ? { ...item } : item) : { ...item, offset: formatOffset(at) };
          if (item.kind === 'task-completed') return;
          if (this.#closed || this.#epoch !== epoch || signal?.aborted) return;
        }
        if (ended || signal?.aborted) return; // aborted during the read: its listener would never fire
        if (log.version === seen) await this.#wait(log, this.#src.writesHere(taskId) ? undefined : pollMs, signal);
      }
    } finally {
      log.readers--;
    }
  }

  /** Events after `known`: from the ring of appended events when it covers them, else from the store. */
  async #eventsFrom(log: TaskLog, taskId: string, known: number, first: boolean): Promise<readonly HistoryEvent[]> {
    const cached = log.events;
    const head = cached[0];
    if (!first && head && head.eventId <= known + 1 && this.#src.writesHere(taskId)) {
      return cached.slice(Math.max(0, known + 1 - head.eventId));
    }
    // On the first read, the event at the offset itself too: it proves the offset is this task's.
    return this.#src.readEvents(taskId, first && known > 0 ? known : known + 1);
  }

  #push(log: TaskLog, item: StreamItem, raw?: Payload): void {
    const at = { e: log.lastEvent, n: ++log.n };
    item.offset = formatOffset(at);
    const dropped = log.live.push(raw ? { at, item, raw } : { at, item });
    if (dropped) log.evictedTo = dropped.at;
  }

  /**
   * New items: readers are woken on the next turn of the event loop, once per bump burst, not in
   * the writer's microtasks. A turn's next write is submitted before its readers run (their work
   * overlaps the write's sync instead of delaying it), and a step's events and the chunks emitted
   * after it reach a reader in one pass of its loop.
   */
  #bump(log: TaskLog): void {
    log.version++;
    if (log.wake?.size && !log.waking) {
      log.waking = true;
      setImmediate(() => {
        log.waking = false;
        StreamHub.#wakeAll(log);
      });
    }
  }

  static #wakeAll(log: TaskLog): void {
    if (log.wake?.size) for (const w of [...log.wake]) w();
  }

  #wait(log: TaskLog, pollMs: number | undefined, signal: AbortSignal | undefined): Promise<void> {
    return new Promise<void>((resolve) => {
      const wake = (log.wake ??= new Set());
      const done = (): void => {
        wake.delete(done);
        timer?.cancel();
        signal?.removeEventListener('abort', done);
        resolve();
      };
      wake.add(done);
      const timer = pollMs === undefined ? undefined : this.#src.setTimer(done, pollMs);
      signal?.addEventListener('abort', done, { once: true });
    });
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
