/**
 * State deltas (history format 2): a turn's new state recorded as a change of the previous
 * state instead of in full, so a chat that keeps its messages in state writes what changed
 * (invariant 11). Pure byte-level encoding, independent of the converter: the bytes kept at the
 * start and end of the previous state, and in between literal bytes or copies out of the turn's
 * own payloads (a message appended to state is usually the turn's input or a step's result,
 * already in the history). docs/history.md#state-deltas.
 */
import type { HistoryEvent, Payload, StateDelta, StateDeltaPiece } from './events.js';
import type { OpenTurn, TaskState } from './state.js';

/** Format from which a task's terminals may carry a delta (recorded in its TaskCreated). */
export const STATE_DELTA_FORMAT = 2;

/** Shortest run copied out of a source; shorter runs stay literal (a copy costs ~8 bytes). */
const BLOCK = 32;

/**
 * The payloads a delta may copy from, in a fixed order both sides compute alike: the turn's
 * inputs, the inputs it took, its step results and checkpoints in call order, then the output.
 */
export function turnSources(t: OpenTurn | undefined, output: Payload | undefined): Payload[] {
  const out: Payload[] = [];
  if (t !== undefined) {
    for (const q of t.inputs) out.push(q.input);
    for (const q of t.taken) out.push(q.input);
    for (const c of t.calls) {
      if (c.kind === 'step' && c.result !== undefined) out.push(c.result);
      else if (c.kind === 'checkpoint') out.push(c.data);
    }
  }
  if (output !== undefined) out.push(output);
  return out;
}

function sameMetadata(a: Record<string, Uint8Array>, b: Record<string, Uint8Array>): boolean {
  const ka = Object.keys(a);
  if (ka.length !== Object.keys(b).length) return false;
  for (const k of ka) {
    const x = a[k];
    const y = Object.hasOwn(b, k) ? b[k] : undefined;
    if (x === undefined || y === undefined || !bytesEqual(x, 0, y, 0, x.length) || x.length !== y.length) return false;
  }
  return true;
}

function bytesEqual(a: Uint8Array, ai: number, b: Uint8Array, bi: number, n: number): boolean {
  for (let i = 0; i < n; i++) if (a[ai + i] !== b[bi + i]) return false;
  return true;
}

const MUL = 0x01000193;
/** MUL^(BLOCK-1) mod 2^32, to roll the oldest byte out. */
const MUL_TOP = (() => {
  let p = 1;
  for (let i = 0; i < BLOCK - 1; i++) p = Math.imul(p, MUL);
  return p;
})();

function blockHash(b: Uint8Array, at: number): number {
  let h = 0;
  for (let i = 0; i < BLOCK; i++) h = (Math.imul(h, MUL) + b[at + i]!) | 0;
  return h;
}

/**
 * The delta from `base` to `next`, or undefined when it would not be smaller than `next` itself
 * or the metadata changed (the caller then records the full state).
 */
export function diffState(base: Payload, next: Payload, sources: readonly Payload[]): StateDelta | undefined {
  if (!sameMetadata(base.metadata, next.metadata)) return undefined;
  const b = base.data;
  const n = next.data;
  const max = Math.min(b.length, n.length);
  let prefix = 0;
  while (prefix < max && b[prefix] === n[prefix]) prefix++;
  let suffix = 0;
  const maxSuffix = max - prefix;
  while (suffix < maxSuffix && b[b.length - 1 - suffix] === n[n.length - 1 - suffix]) suffix++;
  // Copies out of the turn's payloads first; the previous state itself (source 0) is indexed
  // only when much is left literal (an edit in place), as indexing it costs its whole length.
  const all = [base, ...sources];
  let pieces = middlePieces(n, prefix, n.length - suffix, all, 1);
  if (literalBytes(pieces) > Math.max(256, (n.length - suffix - prefix) / 8)) {
    const again = middlePieces(n, prefix, n.length - suffix, all, 0);
    if (deltaSize(again) < deltaSize(pieces)) pieces = again;
  }
  if (deltaSize(pieces) >= n.length) return undefined;
  return { prefix, suffix, pieces };
}

function literalBytes(pieces: readonly StateDeltaPiece[]): number {
  let n = 0;
  for (const p of pieces) if ('literal' in p) n += p.literal.length;
  return n;
}

/** About the encoded size of a delta's pieces. */
function deltaSize(pieces: readonly StateDeltaPiece[]): number {
  let size = 8;
  for (const p of pieces) size += 'literal' in p ? p.literal.length + 4 : 10;
  return size;
}

/** `n[from, to)` as literals and copies out of `sources[first..]` (block-hash matching, as rsync does). */
function middlePieces(n: Uint8Array, from: number, to: number, sources: readonly Payload[], first: number): StateDeltaPiece[] {
  const pieces: StateDeltaPiece[] = [];
  const index = new Map<number, number[]>();
  if (to - from >= BLOCK) {
    for (let s = first; s < sources.length; s++) {
      const d = sources[s]!.data;
      for (let o = 0; o + BLOCK <= d.length; o += BLOCK) {
        const h = blockHash(d, o);
        if (!index.has(h)) index.set(h, [s, o]);
      }
    }
  }
  let lit = from;
  let i = from;
  let h = index.size > 0 && i + BLOCK <= to ? blockHash(n, i) : 0;
  while (index.size > 0 && i + BLOCK <= to) {
    const hit = index.get(h);
    if (hit !== undefined) {
      const [s, o] = hit as [number, number];
      const d = sources[s]!.data;
      if (bytesEqual(n, i, d, o, BLOCK)) {
        let start = i;
        let off = o;
        while (start > lit && off > 0 && n[start - 1] === d[off - 1]) (start--, off--);
        let end = i + BLOCK;
        let dEnd = o + BLOCK;
        while (end < to && dEnd < d.length && n[end] === d[dEnd]) (end++, dEnd++);
        if (start > lit) pieces.push({ literal: n.slice(lit, start) });
        pieces.push({ source: s, offset: off, length: end - start });
        i = lit = end;
        if (i + BLOCK <= to) h = blockHash(n, i);
        continue;
      }
    }
    if (i + BLOCK < to) h = (Math.imul(h - Math.imul(n[i]!, MUL_TOP), MUL) + n[i + BLOCK]!) | 0;
    i++;
  }
  if (to > lit) pieces.push({ literal: n.slice(lit, to) });
  return pieces;
}

/** The state a delta describes, or a message saying why it does not apply to `base`. */
export function applyStateDelta(base: Payload, delta: StateDelta, turnSources: readonly Payload[]): Payload | string {
  const b = base.data;
  const sources = [base, ...turnSources];
  if (delta.prefix + delta.suffix > b.length) {
    return `the delta keeps ${delta.prefix} + ${delta.suffix} bytes of a ${b.length}-byte previous state`;
  }
  let size = delta.prefix + delta.suffix;
  for (const p of delta.pieces) {
    if ('literal' in p) {
      size += p.literal.length;
      continue;
    }
    const src = sources[p.source];
    if (src === undefined) return `the delta copies from source ${p.source}, but there are ${sources.length} (the previous state and the turn's payloads)`;
    if (p.offset + p.length > src.data.length) {
      return `the delta copies bytes ${p.offset}..${p.offset + p.length} of a ${src.data.length}-byte source ${p.source}`;
    }
    size += p.length;
  }
  const out = new Uint8Array(size);
  out.set(b.subarray(0, delta.prefix), 0);
  let at = delta.prefix;
  for (const p of delta.pieces) {
    if ('literal' in p) {
      out.set(p.literal, at);
      at += p.literal.length;
    } else {
      out.set(sources[p.source]!.data.subarray(p.offset, p.offset + p.length), at);
      at += p.length;
    }
  }
  out.set(b.subarray(b.length - delta.suffix), at);
  return { metadata: base.metadata, data: out };
}

/**
 * `e` with its full state replaced by a delta against `prev` (the state folded up to just
 * before `e`), when the task's format allows it and the delta is smaller; otherwise `e` itself.
 */
export function withStateDelta(prev: TaskState | undefined, e: HistoryEvent): HistoryEvent {
  if (e.type === 'StateMigrated') {
    // A migration copies only out of the previous state: it has no payloads of its own.
    if (e.state === undefined || prev?.state === undefined || prev.formatVersion < STATE_DELTA_FORMAT) return e;
    const delta = diffState(prev.state, e.state, []);
    if (delta === undefined) return e;
    const out = { ...e, stateDelta: delta };
    delete out.state;
    return out;
  }
  if (e.type !== 'TurnCompleted' && e.type !== 'TurnSuspended') return e;
  if (e.state === undefined || prev?.state === undefined || prev.formatVersion < STATE_DELTA_FORMAT) return e;
  const t = prev.openTurn;
  if (t === undefined || t.turn !== e.turn) return e;
  const delta = diffState(prev.state, e.state, turnSources(t, e.output));
  if (delta === undefined) return e;
  const out = { ...e, stateDelta: delta };
  delete out.state;
  return out;
}

/** `e` with a delta replaced by the full state it describes (`prev` as for {@link withStateDelta}). */
export function withFullState(prev: TaskState, e: HistoryEvent): HistoryEvent {
  if (e.type === 'StateMigrated') {
    if (e.stateDelta === undefined || prev.state === undefined) return e;
    const state = applyStateDelta(prev.state, e.stateDelta, []);
    if (typeof state === 'string') return e;
    const out = { ...e, state };
    delete out.stateDelta;
    return out;
  }
  if ((e.type !== 'TurnCompleted' && e.type !== 'TurnSuspended') || e.stateDelta === undefined || prev.state === undefined) return e;
  const state = applyStateDelta(prev.state, e.stateDelta, turnSources(prev.openTurn, e.output));
  if (typeof state === 'string') return e;
  const out = { ...e, state };
  delete out.stateDelta;
  return out;
}
