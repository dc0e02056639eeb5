/**
 * The engine's side of streaming (docs/streaming.md): the `StreamSource` the hub reads through
 * (this engine's store, cache, payload pipeline and clock), the hub of live items fed from the
 * observation seam, reset at every quiesce, and `engine.stream()`'s checks.
 */
import { invalidArgument, taskNotFound } from '../errors.js';
import { StreamHub, type StreamSource } from '../stream/hub.js';
import type { StreamItem, StreamOptions } from '../stream/items.js';
import type { TurnResults } from './results.js';
import type { Runtime } from './runtime.js';
import type { TaskCache } from './task-cache.js';

export class Streams {
  readonly #rt: Runtime;
  readonly #cache: TaskCache;
  readonly #streamSource: StreamSource;
  /** Live stream items and readers (docs/streaming.md); a new one per activation. */
  readonly #hub: StreamHub;

  constructor(rt: Runtime, cache: TaskCache, results: TurnResults) {
    this.#rt = rt;
    this.#cache = cache;
    const o = rt;
    this.#streamSource = {
      readEvents: (taskId, from) => rt.store.readEvents(taskId, { fromEventId: from }),
      // An exclusive store or a turn this engine runs: every event passes here, no need to poll.
      writesHere: (taskId) => rt.store.exclusive || this.#cache.get(taskId)?.active !== undefined,
      // Chunks never pass the codecs (they are not stored): only the converter.
      decoder: { value: (p) => results.value(p), failure: (f) => (o.codec ? o.codec.decodeFailure(f) : f), chunk: (p) => o.converter.fromPayload(p) },
      setTimer: (fn, ms) => o.clock.setTimer(fn, ms, { background: true }),
    };
    this.#hub = new StreamHub(this.#streamSource, { bufferItems: o.streamBufferItems });
    rt.observers.onAppend((t, _before, events) => this.#hub.appended(t.id, events));
    rt.observers.onOutput((e) => this.#hub.output(e.taskId, e.afterEventId, e.turn, e.attempt, e.item, e.time, e.dropped));
  }

  /** engine.stream(): checks the options now, reads once the task is known. */
  read(taskId: string, options: StreamOptions): AsyncGenerator<StreamItem, void, undefined> {
    this.#rt.assertOpen('stream');
    if (typeof options !== 'object' || options === null) throw invalidArgument('stream() options must be an object: { from?, signal?, pollMs? }.');
    if (options.pollMs !== undefined && !(Number.isFinite(options.pollMs) && options.pollMs > 0)) {
      throw invalidArgument(`stream() pollMs must be a positive number of milliseconds, got ${String(options.pollMs)}.`);
    }
    return this.#hub.read(taskId, options, async () => {
      const t = await this.#cache.load(taskId);
      if (!t.state) throw taskNotFound(taskId);
    });
  }

  /**
   * At quiesce: ends every reader reading and keeps nothing. The same hub serves the next
   * activation: a reader made before and first read after it is bound to that hub (test: runtime/streams).
   */
  reset(): void {
    this.#hub.reset();
  }
}
