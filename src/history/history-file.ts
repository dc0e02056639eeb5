/**
 * History files: what `turnlog export` writes and `turnlog import` reads (docs/cli.md).
 *
 * - JSON: `{"format":"turnlog-history","formatVersion":2,"taskId":…,"events":[…]}`, one event
 *   (its proto3 JSON mapping) per line so files diff well; `--all` writes `{…,"tasks":[…]}`.
 * - Binary: per task, a length-delimited `HistoryFileHeader` then `event_count`
 *   length-delimited `HistoryEvent`s; a multi-task file is such blocks back to back.
 *
 * history/ does no I/O (DESIGN.md boundaries): writers take a {@link ByteSink}, readers take
 * bytes or an async iterable of chunks (a `fs.ReadStream` is one); the CLI opens the files.
 */
import { HistoryCorruptError, HistoryFormatError, TurnlogError, isTurnlogError } from '../errors.js';
import { lookupType } from '../internal/proto/root.js';
import { decodeEvent, encodeEventDelimited, eventFromJSON, eventToJSON } from './codec.js';
import { checkEventIds, illFormedText } from './well-formed.js';
import { HISTORY_FORMAT_VERSION, eventIdAfter, type HistoryEvent } from './events.js';

const HeaderType = lookupType('turnlog.v1.HistoryFileHeader');

/** The `format` field of JSON files and the `magic` of binary headers. */
export const HISTORY_FILE_MAGIC = 'turnlog-history';

/** The two encodings of a history file. */
export type HistoryFileFormat = 'json' | 'binary';

/** One task's history as read from a file. Event ids are dense from 1 (checked on read). */
export interface HistoryFileTask {
  taskId: string;
  events: HistoryEvent[];
}

/** A parsed history file. */
export interface HistoryFile {
  format: HistoryFileFormat;
  formatVersion: number;
  /** True for `export --all` files (`tasks: [...]` in JSON), even with one task in them. */
  multi: boolean;
  tasks: HistoryFileTask[];
}

/** One task to write. `eventCount` goes into the binary header, so it must be known up front. */
export interface HistoryFileSource {
  taskId: string;
  eventCount: number;
  events: Iterable<HistoryEvent> | AsyncIterable<HistoryEvent>;
}

/** Where a writer sends bytes. Return a promise to apply backpressure (a stream's 'drain'). */
export interface ByteSink {
  write(chunk: Uint8Array): void | Promise<void>;
}

export interface WriteHistoryFileOptions {
  format: HistoryFileFormat;
  /** Called after each flushed chunk with the events written so far (progress bars). */
  onProgress?: (eventsWritten: number) => void;
}

export interface WriteHistoryFileResult {
  tasks: number;
  events: number;
  bytes: number;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

// Batch output into ~256 KiB chunks: one sink write per event would dominate export time.
const FLUSH_BYTES = 256 * 1024;

class ChunkedWriter {
  #parts: Uint8Array[] = [];
  #pending = 0;
  bytes = 0;
  events = 0;
  readonly #sink: ByteSink;
  readonly #onProgress: ((n: number) => void) | undefined;

  constructor(sink: ByteSink, onProgress: ((n: number) => void) | undefined) {
    this.#sink = sink;
    this.#onProgress = onProgress;
  }

  push(bytes: Uint8Array): Promise<void> | undefined {
    this.#parts.push(bytes);
    this.#pending += bytes.length;
    return this.#pending >= FLUSH_BYTES ? this.flush() : undefined;
  }

  text(s: string): Promise<void> | undefined {
    return this.push(encoder.encode(s));
  }

  async flush(): Promise<void> {
    if (this.#pending === 0) return;
    const chunk = concat(this.#parts, this.#pending);
    this.#parts = [];
    this.bytes += this.#pending;
    this.#pending = 0;
    await this.#sink.write(chunk);
    this.#onProgress?.(this.events);
  }
}

function concat(parts: Uint8Array[], total: number): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  const out = new Uint8Array(total);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

function isSource(x: unknown): x is HistoryFileSource {
  return typeof x === 'object' && x !== null && typeof (x as HistoryFileSource).taskId === 'string';
}

/**
 * Writes one task (a single-task file) or several (a multi-task file, `export --all`) to `sink`,
 * streaming: events are pulled from each source as they are written, never all held at once.
 * Throws TURNLOG_HISTORY_FILE if a source yields a different number of events than it declared.
 *
 * @example
 * await writeHistoryFile(sink, { taskId, eventCount: events.length, events }, { format: 'json' });
 */
export async function writeHistoryFile(
  sink: ByteSink,
  tasks: HistoryFileSource | Iterable<HistoryFileSource> | AsyncIterable<HistoryFileSource>,
  options: WriteHistoryFileOptions,
): Promise<WriteHistoryFileResult> {
  const w = new ChunkedWriter(sink, options.onProgress);
  const multi = !isSource(tasks);
  const sources: Iterable<HistoryFileSource> | AsyncIterable<HistoryFileSource> = isSource(tasks) ? [tasks] : tasks;
  let count = 0;
  if (options.format === 'json') {
    const head = `{"format":${JSON.stringify(HISTORY_FILE_MAGIC)},"formatVersion":${HISTORY_FORMAT_VERSION},`;
    await w.text(multi ? `${head}"tasks":[` : head);
    for await (const src of sources) {
      const open = `{"taskId":${JSON.stringify(src.taskId)},"events":[`;
      await w.text(multi ? (count === 0 ? '\n' : ',\n') + open : `"taskId":${JSON.stringify(src.taskId)},"events":[`);
      const n = await eachEvent(src.events, (e, i) => {
        w.events++;
        return w.text((i === 0 ? '\n' : ',\n') + JSON.stringify(eventToJSON(e)));
      });
      checkCount(src, n);
      await w.text(multi ? '\n]}' : '\n]}\n');
      count++;
    }
    if (multi) await w.text('\n]}\n');
  } else {
    for await (const src of sources) {
      await w.push(encodeHeader(src.taskId, src.eventCount));
      const n = await eachEvent(src.events, (e) => {
        w.events++;
        return w.push(encodeEventDelimited(e));
      });
      checkCount(src, n);
      count++;
    }
    // Zero tasks (an empty store's `export --all`): one header with no task id and no events,
    // so the file is not empty and reads back as zero tasks.
    if (multi && count === 0) await w.push(encodeHeader('', 0));
  }
  await w.flush();
  return { tasks: count, events: w.events, bytes: w.bytes };
}

/**
 * Calls `fn` per event, awaiting only the promises it returns (a flush): `for await` over an
 * array would cost a microtask per event, about a third of binary export time.
 */
async function eachEvent(
  events: Iterable<HistoryEvent> | AsyncIterable<HistoryEvent>,
  fn: (e: HistoryEvent, index: number) => Promise<void> | undefined,
): Promise<number> {
  let n = 0;
  if (Symbol.iterator in events) {
    for (const e of events) {
      const p = fn(e, n++);
      if (p) await p;
    }
  } else {
    for await (const e of events) {
      const p = fn(e, n++);
      if (p) await p;
    }
  }
  return n;
}

function checkCount(src: HistoryFileSource, n: number): void {
  if (n !== src.eventCount) {
    throw new TurnlogError(
      'TURNLOG_HISTORY_FILE',
      `Task ${src.taskId}: declared ${src.eventCount} events but ${n} were written; the file is incomplete. Export again while nothing writes the task.`,
    );
  }
}

function encodeHeader(taskId: string, eventCount: number): Uint8Array {
  return HeaderType.encodeDelimited({
    magic: HISTORY_FILE_MAGIC,
    formatVersion: HISTORY_FORMAT_VERSION,
    taskId,
    eventCount,
  } as never).finish();
}

/**
 * Serializes histories to one in-memory file (tests, small exports). Same bytes as
 * {@link writeHistoryFile}.
 */
export async function encodeHistoryFile(
  tasks: HistoryFileTask | readonly HistoryFileTask[],
  format: HistoryFileFormat,
): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  const toSource = (t: HistoryFileTask): HistoryFileSource => ({
    taskId: t.taskId,
    eventCount: t.events.length,
    events: t.events,
  });
  const src = 'taskId' in tasks ? toSource(tasks) : tasks.map(toSource);
  const { bytes } = await writeHistoryFile({ write: (c) => void parts.push(c) }, src, { format });
  return concat(parts, bytes);
}

// ---------------------------------------------------------------------------------------------
// Reading

/**
 * Reads a history file, detecting JSON or binary by content. `name` (the path) is used in
 * errors. Every problem is a TURNLOG_HISTORY_FILE error naming the file and what to do.
 */
export async function readHistoryFile(
  source: Uint8Array | AsyncIterable<Uint8Array>,
  name: string,
): Promise<HistoryFile> {
  if (source instanceof Uint8Array) return parseHistoryFile(source, name);
  const parts: Uint8Array[] = [];
  let total = 0;
  for await (const c of source) {
    parts.push(c);
    total += c.length;
  }
  return parseHistoryFile(concat(parts, total), name);
}

/** Synchronous form of {@link readHistoryFile} over bytes already in memory. */
export function parseHistoryFile(input: Uint8Array, name: string): HistoryFile {
  const bytes = asBuffer(input);
  if (bytes.length === 0) throw fileError(name, 'it is empty', 'Export the task again.');
  if (startsWithBinaryHeader(bytes)) return parseBinary(bytes, name);
  let i = 0;
  while (i < bytes.length && isSpace(bytes[i]!)) i++;
  if (bytes[i] === 0x7b /* { */) return parseJSON(bytes, name);
  throw fileError(
    name,
    'it is neither a JSON history (starting with `{`) nor a binary history (starting with a turnlog-history header)',
    'Pass a file written by `turnlog export`.',
  );
}

// protobufjs decodes bytes fields as Buffers from a Buffer and as plain Uint8Arrays otherwise;
// reading from a Buffer view makes binary files decode like JSON files (fromObject → Buffer).
function asBuffer(b: Uint8Array): Uint8Array {
  const B = (globalThis as { Buffer?: typeof Buffer }).Buffer;
  return B && !B.isBuffer(b) ? B.from(b.buffer, b.byteOffset, b.byteLength) : b;
}

function fileError(name: string, problem: string, fix: string, cause?: unknown): TurnlogError {
  return new TurnlogError(
    'TURNLOG_HISTORY_FILE',
    `History file ${name}: ${problem}. ${fix}`,
    cause === undefined ? {} : { cause },
  );
}

function checkVersion(name: string, version: unknown): number {
  if (typeof version !== 'number' || !Number.isInteger(version) || version < 1) {
    throw fileError(name, `formatVersion ${JSON.stringify(version)} is not a positive integer`, 'Export the task again.');
  }
  if (version > HISTORY_FORMAT_VERSION) {
    throw fileError(
      name,
      `it has history format version ${version}, newer than this turnlog reads (up to ${HISTORY_FORMAT_VERSION})`,
      'Upgrade turnlog to read it, or export it again with this version.',
    );
  }
  return version;
}

function isSpace(b: number): boolean {
  return b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09 || b === 0xef || b === 0xbb || b === 0xbf;
}

const MAGIC_BYTES = encoder.encode(HISTORY_FILE_MAGIC);

/** Varint at `pos`, or undefined when truncated or longer than 5 bytes (> uint32). */
function readVarint(bytes: Uint8Array, pos: number): { value: number; next: number } | undefined {
  let value = 0;
  for (let i = 0; i < 5; i++) {
    const b = bytes[pos + i];
    if (b === undefined) return undefined;
    value += (b & 0x7f) * 2 ** (7 * i);
    if ((b & 0x80) === 0) return { value, next: pos + i + 1 };
  }
  return undefined;
}

// A binary file starts with: header length, then field 1 (tag 0x0a) = the magic string.
function startsWithBinaryHeader(bytes: Uint8Array): boolean {
  const len = readVarint(bytes, 0);
  if (!len) return false;
  const p = len.next;
  if (bytes[p] !== 0x0a || bytes[p + 1] !== MAGIC_BYTES.length) return false;
  for (let i = 0; i < MAGIC_BYTES.length; i++) if (bytes[p + 2 + i] !== MAGIC_BYTES[i]) return false;
  return true;
}

interface HeaderMsg {
  magic: string;
  formatVersion: number;
  taskId: string;
  eventCount: number;
}

function parseBinary(bytes: Uint8Array, name: string): HistoryFile {
  const tasks: HistoryFileTask[] = [];
  let pos = 0;
  let version = 0;
  const truncated = (what: string): TurnlogError =>
    fileError(name, `it ends inside ${what} at byte ${pos}, so it is truncated`, 'Export the task again.');
  while (pos < bytes.length) {
    if (!startsWithBinaryHeader(bytes.subarray(pos))) {
      throw fileError(
        name,
        `byte ${pos} should start a task header but does not (a header declared fewer events than follow, or the file is garbled)`,
        'Export the task again.',
      );
    }
    const len = readVarint(bytes, pos)!;
    if (len.next + len.value > bytes.length) throw truncated('a task header');
    let header: HeaderMsg;
    try {
      header = HeaderType.decode(bytes.subarray(len.next, len.next + len.value)) as unknown as HeaderMsg;
    } catch (err) {
      throw fileError(name, `the task header at byte ${pos} cannot be decoded`, 'Export the task again.', err);
    }
    version = Math.max(version, checkVersion(name, header.formatVersion));
    pos = len.next + len.value;
    const taskId = header.taskId;
    if (!taskId && header.eventCount === 0 && tasks.length === 0 && pos === bytes.length) {
      return { format: 'binary', formatVersion: version, multi: true, tasks: [] };
    }
    if (!taskId) throw fileError(name, `the task header at byte ${len.next} has no task id`, 'Export the task again.');
    const events: HistoryEvent[] = new Array(header.eventCount);
    for (let i = 0; i < header.eventCount; i++) {
      const el = readVarint(bytes, pos);
      if (!el || el.next + el.value > bytes.length) throw truncated(`event ${i + 1} of task ${taskId}`);
      const key = `${name}@${pos}`;
      events[i] = decodeInFile(name, taskId, i, () =>
        decodeEvent(bytes.subarray(el.next, el.next + el.value), taskId, key),
      );
      pos = el.next + el.value;
    }
    tasks.push(checkTask(name, { taskId, events }));
  }
  return { format: 'binary', formatVersion: version, multi: tasks.length !== 1, tasks: checkUnique(name, tasks) };
}

function decodeInFile(name: string, taskId: string, index: number, decode: () => HistoryEvent): HistoryEvent {
  try {
    const e = decode();
    // JSON can spell a lone surrogate (`"\ud83d"`): an id that has no UTF-8 form is refused here.
    checkEventIds(e, taskId);
    return e;
  } catch (err) {
    if (err instanceof HistoryFormatError) {
      throw fileError(
        name,
        `task ${taskId}, event ${index + 1} has a type this turnlog does not know (${err.message})`,
        'Upgrade turnlog to read it.',
        err,
      );
    }
    if (err instanceof HistoryCorruptError || isTurnlogError(err)) {
      throw fileError(name, `task ${taskId}, event ${index + 1} cannot be decoded (${err.message})`, 'Export the task again.', err);
    }
    throw err;
  }
}

// Import appends with dense expected ids, so a gap or reordering is caught here, not mid-import.
function checkTask(name: string, t: HistoryFileTask): HistoryFileTask {
  if (!t.taskId.isWellFormed()) throw fileError(name, illFormedText('task id', t.taskId), 'Export the task again.');
  let want = 1;
  for (let i = 0; i < t.events.length; i++) {
    const e = t.events[i]!;
    const id = e.eventId;
    if (id !== want) {
      throw fileError(
        name,
        `task ${t.taskId}: event ${i + 1} has event id ${id}; event ids must be dense from 1 (after a HistoryCompacted event 2, from its throughEventId + 1)`,
        'Export the task again rather than editing events out.',
      );
    }
    want = eventIdAfter(e);
  }
  return t;
}

function checkUnique(name: string, tasks: HistoryFileTask[]): HistoryFileTask[] {
  const seen = new Set<string>();
  for (const t of tasks) {
    if (seen.has(t.taskId)) throw fileError(name, `task ${t.taskId} appears twice`, 'Remove one of the copies.');
    seen.add(t.taskId);
  }
  return tasks;
}

function isObject(x: unknown): x is Record<string, unknown> {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

function parseJSON(bytes: Uint8Array, name: string): HistoryFile {
  let doc: unknown;
  try {
    doc = JSON.parse(decoder.decode(bytes));
  } catch (err) {
    throw fileError(name, `it is not valid UTF-8 JSON (${(err as Error).message}); it may be truncated`, 'Export the task again.', err);
  }
  if (!isObject(doc) || doc['format'] !== HISTORY_FILE_MAGIC) {
    throw fileError(
      name,
      `it is JSON but not a turnlog history (expected "format": "${HISTORY_FILE_MAGIC}")`,
      'Pass a file written by `turnlog export`.',
    );
  }
  const version = checkVersion(name, doc['formatVersion']);
  const multi = Array.isArray(doc['tasks']);
  const raw: unknown[] = multi ? (doc['tasks'] as unknown[]) : [doc];
  const tasks = raw.map((t, ti) => {
    const where = multi ? `tasks[${ti}]` : 'the file';
    if (!isObject(t) || typeof t['taskId'] !== 'string' || t['taskId'] === '' || !Array.isArray(t['events'])) {
      throw fileError(name, `${where} needs a non-empty "taskId" string and an "events" array`, 'Export the task again.');
    }
    const taskId = t['taskId'];
    const events = (t['events'] as unknown[]).map((e, i) => {
      if (!isObject(e)) throw fileError(name, `task ${taskId}, event ${i + 1} is not an object`, 'Export the task again.');
      return decodeInFile(name, taskId, i, () => eventFromJSON(e, taskId));
    });
    return checkTask(name, { taskId, events });
  });
  return { format: 'json', formatVersion: version, multi, tasks: checkUnique(name, tasks) };
}
