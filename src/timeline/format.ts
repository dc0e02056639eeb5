/**
 * Human and JSON rendering shared by the CLI and the timeline page: tables, times, durations, payload previews and one
 * line per history event. Pure; commands decide where the text goes.
 */
import type { FailureInfo, HistoryEvent, Payload } from '../history/events.js';
import { defaultPayloadConverter, payloadEncoding, type PayloadConverter } from '../history/payload.js';
import type { TaskState } from '../history/state.js';

/** Renders rows under headers, columns padded to the widest cell; the last column is not padded. */
export function table(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(headers), ...rows.map(line)].join('\n');
}

/** `2025-01-02 03:04:05.678Z`: ISO, with a space so it reads in tables. */
export function isoTime(ms: number): string {
  if (!Number.isFinite(ms) || Math.abs(ms) > 8.64e15) return String(ms);
  return new Date(ms).toISOString().replace('T', ' ');
}

/** A duration: `42ms`, `1.50s`, `2m03s`, `1h02m`. */
export function duration(ms: number): string {
  if (!Number.isFinite(ms)) return String(ms);
  const neg = ms < 0 ? '-' : '';
  const a = Math.abs(ms);
  if (a < 1000) return `${neg}${Math.round(a)}ms`;
  if (a < 60_000) return `${neg}${(a / 1000).toFixed(2)}s`;
  const s = Math.floor(a / 1000);
  if (a < 3_600_000) return `${neg}${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  const m = Math.floor(s / 60);
  if (a < 86_400_000) return `${neg}${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`;
  const h = Math.floor(m / 60);
  return `${neg}${Math.floor(h / 24)}d${String(h % 24).padStart(2, '0')}h`;
}

/** Offset from a start time: `+1.50s`. */
export function offset(ms: number, start: number): string {
  return '+' + duration(ms - start);
}

/** Byte counts: `512 B`, `1.5 KiB`, `3.2 MiB`. */
export function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = -1;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v.toFixed(1)} ${units[u]}`;
}

/** Cuts a string to `max` characters with an ellipsis; newlines become `⏎` so rows stay rows. */
export function truncate(s: string, max: number): string {
  const flat = s.replace(/\r?\n/g, '⏎');
  return max > 0 && flat.length > max ? flat.slice(0, Math.max(0, max - 1)) + '…' : flat;
}

/** A payload decoded for `--json`: JSON values as they are, bytes as base64. */
export type PayloadJSON =
  | { encoding: string; value: unknown }
  | { encoding: string; base64: string }
  | { encoding: string; undecodable: string; base64: string };

function base64(b: Uint8Array): string {
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('base64');
}

/** Decodes a payload for display (default converter: JSON); never throws. */
export function payloadToJSON(p: Payload, converter: PayloadConverter = defaultPayloadConverter): PayloadJSON {
  const encoding = payloadEncoding(p);
  if (encoding === 'binary/plain') return { encoding, base64: base64(p.data) };
  if (encoding === 'binary/null') return { encoding, value: null };
  try {
    return { encoding, value: converter.fromPayload(p) };
  } catch (err) {
    // Payloads written through a PayloadCodec (compression, encryption) need the engine's codec.
    return { encoding, undecodable: (err as Error).message, base64: base64(p.data) };
  }
}

/** A one-line preview of a payload, truncated to `max` characters (0: no limit). */
export function payloadPreview(p: Payload, max: number, converter?: PayloadConverter): string {
  const j = payloadToJSON(p, converter);
  if ('undecodable' in j) return `<${j.encoding || 'no encoding'}, ${p.data.length} bytes>`;
  if ('base64' in j) return `<${p.data.length} bytes>`;
  if (j.encoding === 'binary/null') return 'undefined';
  return truncate(JSON.stringify(j.value) ?? 'undefined', max);
}

function isPayload(v: unknown): v is Payload {
  return typeof v === 'object' && v !== null && (v as Payload).data instanceof Uint8Array && typeof (v as Payload).metadata === 'object';
}

/** An event as plain JSON with every payload decoded (`turnlog events --json`). */
export function eventToDisplayJSON(e: HistoryEvent, converter?: PayloadConverter): Record<string, unknown> {
  return decodePayloads(e, converter) as Record<string, unknown>;
}

function decodePayloads(v: unknown, converter: PayloadConverter | undefined): unknown {
  if (isPayload(v)) return payloadToJSON(v, converter);
  if (Array.isArray(v)) return v.map((x) => decodePayloads(x, converter));
  if (typeof v === 'object' && v !== null) {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) out[k] = decodePayloads(x, converter);
    return out;
  }
  return v;
}

/** `RateLimitError: rate limited [LLM_429]`; an encoded failure says that it is one. */
export function failureText(f: FailureInfo, max: number): string {
  const code = f.code === undefined ? '' : ` [${f.code}]`;
  const message = f.encodedAttributes ? `${f.message} (encoded by a payload codec; pass --codecs <module> to read it)` : f.message;
  return truncate(`${f.type}: ${message}${code}`, max);
}

const OUTCOME_WORDS: Record<string, string> = {
  TurnCompleted: 'completed',
  TurnFailed: 'failed',
  TurnSuspended: 'suspended',
  TurnCancelled: 'cancelled',
  TurnTimedOut: 'timed out',
};

/** The past-tense word for a turn terminal, for tables. */
export function terminalWord(type: string): string {
  return OUTCOME_WORDS[type] ?? type;
}

/** One human line describing an event (without id and time), previews cut to `max`. */
export function describeEvent(e: HistoryEvent, max: number, converter?: PayloadConverter): string {
  const pv = (p: Payload | undefined): string => (p === undefined ? '' : payloadPreview(p, max, converter));
  switch (e.type) {
    case 'TaskCreated':
      return `task created: workflow ${e.workflow} (${e.kind}), turn timeout ${duration(e.policy.turnTimeoutMs)}, grace ${duration(e.policy.graceMs)}, ${e.policy.executor} executor, format v${e.formatVersion}${e.forkedFrom ? `, forked from ${e.forkedFrom.taskId} at the end of turn ${e.forkedFrom.turn} (event ${e.forkedFrom.eventId})` : ''}${e.parent ? `, child of ${e.parent.taskId} (turn ${e.parent.turn}, call ${e.parent.seq}${e.parent.detached ? ', not cancelled with it' : ''})` : ''}`;
    case 'InputQueued':
      return `input ${e.inputId} ${e.deliverAt === undefined ? 'queued' : `scheduled for ${isoTime(e.deliverAt)}`}${e.steering ? ' (steering)' : ''}: ${pv(e.input)}`;
    case 'InputWithdrawn':
      return `input ${e.inputId} withdrawn: ${e.reason}`;
    case 'OperatorAction':
      return `operator ${e.by}: ${e.action}${e.turn > 0 ? ` turn ${e.turn}` : ''}${e.inputId ? ` input ${e.inputId}` : ''}${e.newInputId ? ` → new input ${e.newInputId}` : ''}${e.reason ? `: ${e.reason}` : ''}`;
    case 'TurnStarted':
      return `turn ${e.turn} attempt ${e.attempt} started (${e.entryMode}${e.steered ? ', steered' : ''}) with ${e.inputIds.length === 0 ? 'no input' : 'input ' + e.inputIds.join(', ')}; ${e.pid > 0 ? `${e.executor} pid ${e.pid}` : `${e.executor} worker`}, ${e.owner}/${e.instance}, deadline ${isoTime(e.deadline)}`;
    case 'StepCompleted':
      return e.failure
        ? `step ${e.seq} ${e.name} failed after ${duration(e.durationMs)}: ${failureText(e.failure, max)}`
        : `step ${e.seq} ${e.name} ok in ${duration(e.durationMs)} → ${pv(e.result)}`;
    case 'InputsTaken':
      return `call ${e.seq}: took steering input ${e.inputIds.join(', ')}`;
    case 'TimerStarted':
      return `call ${e.seq}: sleep ${duration(e.durationMs)}, fires at ${isoTime(e.fireAt)}`;
    case 'ChildStarted':
      return `call ${e.seq}: started child ${e.childId} (workflow ${e.workflow}${e.detached ? ', not cancelled with this task' : ''})`;
    case 'ChildEnded':
      return `call ${e.seq}: child ${e.childId} ${e.status}${e.output ? ` → ${pv(e.output)}` : ''}${e.failure ? `: ${failureText(e.failure, max)}` : ''}${e.reason ? ` (${e.reason})` : ''}`;
    case 'Checkpointed':
      return `call ${e.seq}: checkpoint ${pv(e.data)}`;
    case 'SignalReceived':
      return `signal "${e.name}" received (${e.signalId}): ${pv(e.value)}`;
    case 'WaitStarted':
      return `call ${e.seq}: wait for signal "${e.name}"${e.deadline === undefined ? ' (no timeout)' : `, times out at ${isoTime(e.deadline)} (after ${duration(e.timeoutMs ?? 0)})`}`;
    case 'WaitEnded':
      return e.timedOut ? `call ${e.seq}: wait timed out` : `call ${e.seq}: wait ended by signal ${e.signalId}`;
    case 'PatchMarked':
      return `call ${e.seq}: patch ${e.patchId} taken (new branch)${e.deprecated ? ', deprecated' : ''}`;
    case 'TimeoutCancelRequested':
      return `timeout marker: turn ${e.turn} timed out, cancel sent at ${isoTime(e.at)}, grace until ${isoTime(e.graceUntil)}`;
    case 'CancelRequested':
      return `cancel requested (${e.scope}${e.turn ? `, turn ${e.turn}` : ''}): ${e.reason}`;
    case 'WorkerKilled':
      return `worker killed: pid ${e.pid} ${e.signal} (${e.reason})`;
    case 'WorkerCrashed':
      return `worker crashed: attempt ${e.attempt}, pid ${e.pid}, ${e.exitCode === null ? `signal ${e.signal ?? '?'}` : `exit code ${e.exitCode}`}: ${truncate(e.message, max)}`;
    case 'TurnCompleted':
      return `turn ${e.turn} completed${e.output ? ` → ${pv(e.output)}` : ''}`;
    case 'TurnFailed':
      return `turn ${e.turn} failed: ${failureText(e.failure, max)}`;
    case 'TurnSuspended':
      return `turn ${e.turn} suspended (${e.reason})${e.output ? ` → ${pv(e.output)}` : ''}`;
    case 'TurnCancelled':
      return `turn ${e.turn} cancelled: ${e.reason}`;
    case 'TurnTimedOut':
      return `turn ${e.turn} timed out (${e.cause})`;
    case 'TurnExitedForRecovery':
      return `attempt ${e.attempt} of turn ${e.turn} exited for recovery: ${e.reason}`;
    case 'HistoryCompacted':
      return `history compacted: turns 1..${e.turns} (events 2..${e.throughEventId}, ${e.droppedEvents} dropped) are kept as their folded state only`;
    case 'LeaseClaimed':
      return `lease claimed by ${e.owner}/${e.instance}, generation ${e.previousGeneration} → ${e.generation} (${e.reason})`;
    case 'TaskCompleted':
      return `task completed: ${e.outcome}`;
    case 'StateMigrated':
      return `state migrated: version ${e.fromVersion} → ${e.toVersion}${e.state ? ` → ${pv(e.state)}` : ' (as a delta)'}`;
  }
}

/**
 * What a task waits for now (`turnlog why`): the open turn's waits that have not ended, and the
 * signals buffered for a later wait. Empty when neither.
 */
export function waitLines(s: TaskState, max = 80, converter?: PayloadConverter): string[] {
  const out: string[] = [];
  for (const c of s.openTurn?.calls ?? []) {
    if (c.kind !== 'wait' || c.ended) continue;
    const until = c.deadline === undefined ? 'with no timeout' : `until ${isoTime(c.deadline)} (${c.deadline})`;
    out.push(`waiting:  turn ${s.openTurn!.turn} call ${c.seq} waits for signal "${c.name}" ${until}; \`turnlog signal ${s.taskId} ${c.name} <json>\` ends it`);
  }
  for (const x of s.signals ?? []) out.push(`signal:   "${x.name}" (${x.signalId}) buffered since ${isoTime(x.time)} for the next wait of that name: ${payloadPreview(x.value, max, converter)}`);
  return out;
}
