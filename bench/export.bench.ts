/**
 * Export benchmark (issue 6): events/s exporting a 100k-event history to JSON and binary
 * history files, beside raw `encodeEvent` over the same events in the same run (machines
 * differ; the ratio travels). Measured twice: from memory (serialization alone) and from a
 * LevelDB store to a file (what `turnlog export` does). Median of 3 runs each.
 */
import { createWriteStream } from 'node:fs';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { finished } from 'node:stream/promises';
import { decodeEvent, encodeEvent } from '../src/history/codec.js';
import type { HistoryEvent } from '../src/history/events.js';
import { writeHistoryFile, type ByteSink, type HistoryFileFormat } from '../src/history/history-file.js';
import { defaultPayloadConverter } from '../src/history/payload.js';
import { LevelHistoryStore } from '../src/store/index.js';
import { POLICY } from '../src/testing/store-events.js';

const N = 100_000;
const RUNS = 3;


/** A long agent turn: TaskCreated, an input, TurnStarted, then steps with ~60-byte JSON results. */
function history(n: number): HistoryEvent[] {
  const t = 1_700_000_000_000;
  const p = (v: unknown) => defaultPayloadConverter.toPayload(v);
  const events: HistoryEvent[] = [
    { type: 'TaskCreated', eventId: 1, time: t, generation: 1, workflow: 'bench', kind: 'multi-turn', policy: POLICY, formatVersion: 1 },
    { type: 'InputQueued', eventId: 2, time: t, generation: 1, inputId: 'i1', input: p({ text: 'go' }), steering: false },
    {
      type: 'TurnStarted', eventId: 3, time: t, generation: 1, turn: 1, attempt: 1, inputIds: ['i1'], entryMode: 'fresh', steered: false,
      owner: 'bench', instance: 'bench-1', executor: 'inline', pid: 1, turnStartedAt: t, deadline: t + 60_000,
    },
  ];
  for (let id = 4; id <= n; id++) {
    events.push({
      type: 'StepCompleted', eventId: id, time: t + id, generation: 1, turn: 1, attempt: 1, seq: id - 3,
      name: 'call-model', result: p({ tokens: id, text: 'the quick brown fox jumps' }), durationMs: 12,
    });
  }
  // As a store hands them back: decoded from bytes.
  return events.map((e) => decodeEvent(Buffer.from(encodeEvent(e)), 'bench'));
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function timeIt(fn: () => Promise<unknown> | unknown): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const t0 = performance.now();
    await fn();
    times.push(performance.now() - t0);
  }
  return median(times);
}

const rate = (ms: number): string => `${Math.round(N / (ms / 1000)).toLocaleString('en-US')} events/s`;

function fileSink(path: string): { sink: ByteSink; close: () => Promise<void> } {
  const out = createWriteStream(path);
  return {
    sink: { write: (c) => (out.write(c) ? undefined : new Promise<void>((r) => out.once('drain', r))) },
    close: async () => {
      out.end();
      await finished(out);
    },
  };
}

/** Runs the export benchmark and prints one line per measurement. */
export async function run(): Promise<void> {
  const events = history(N);
  const dir = await mkdtemp(join(tmpdir(), 'turnlog-bench-export-'));
  try {
    const raw = await timeIt(() => {
      let bytes = 0;
      for (const e of events) bytes += encodeEvent(e).length;
      return bytes;
    });
    console.log(`raw encodeEvent                 ${rate(raw).padStart(20)}  (${raw.toFixed(0)} ms for ${N} events)`);

    const discard: ByteSink = { write: () => {} };
    for (const format of ['binary', 'json'] as HistoryFileFormat[]) {
      const ms = await timeIt(() => writeHistoryFile(discard, { taskId: 'bench', eventCount: N, events }, { format }));
      console.log(`${format.padEnd(6)} file, from memory        ${rate(ms).padStart(20)}  ${(ms / raw).toFixed(2)}× raw encode time`);
    }

    const store = new LevelHistoryStore(join(dir, 'store'), { sync: false });
    await store.open();
    for (let i = 0; i < N; i += 1000) {
      await store.append('bench', events.slice(i, i + 1000), { expectedLastEventId: i, generation: 1 });
    }
    for (const format of ['binary', 'json'] as HistoryFileFormat[]) {
      const path = join(dir, `export.${format}`);
      const ms = await timeIt(async () => {
        const f = fileSink(path);
        await writeHistoryFile(f.sink, { taskId: 'bench', eventCount: N, events: store.iterateEvents('bench') }, { format });
        await f.close();
      });
      const size = (await stat(path)).size;
      console.log(
        `${format.padEnd(6)} file, store → disk       ${rate(ms).padStart(20)}  ${(ms / raw).toFixed(2)}× raw encode time, ${(size / 1048576).toFixed(1)} MiB`,
      );
    }
    await store.close();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
