/**
 * Replayer benchmark (issue 3). Every rate is printed beside a bare loop over the same decoded
 * array in the same run, so machines can be compared by ratio. Targets: fold ≥ 2,000,000
 * events/s and decode + fold ≥ 500,000 events/s on a 100,000-event history; recovery from a
 * snapshot + 100-event tail costs the same whatever the prefix length.
 */
import { performance } from 'node:perf_hooks';
import { decodeEvent, encodeEvent } from '../src/history/codec.js';
import type { HistoryEvent } from '../src/history/events.js';
import { decodeState, encodeState } from '../src/history/state-codec.js';
import { decide } from '../src/replay/decide.js';
import { fold } from '../src/replay/fold.js';
import { historyBuilder } from '../src/testing/history-builder.js';

const TASK = 'bench-task';

/** A multi-turn history of `n` events: turns of 20 steps and a checkpoint, a crash now and then. */
export function benchHistory(n: number): HistoryEvent[] {
  const b = historyBuilder(TASK, { tick: 10 }).created({ workflow: 'bench', kind: 'multi-turn', policy: { turnTimeoutMs: 1e12 } });
  let turn = 0;
  while (b.lastEventId < n) {
    turn++;
    b.input({ q: `question ${turn}` }).turnStarted();
    for (let i = 0; i < 20 && b.lastEventId < n - 2; i++) {
      b.step('call-model', { text: `step ${i} of turn ${turn}`, tokens: 42 });
      if (turn % 50 === 0 && i === 10) b.crashed().recovered();
    }
    if (b.lastEventId < n - 1) b.checkpoint({ turn });
    if (b.lastEventId < n) b.completed({ answer: turn });
  }
  return b.build().slice(0, n);
}

function best(runs: number, fn: () => void): number {
  let min = Infinity;
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    fn();
    min = Math.min(min, performance.now() - t0);
  }
  return min;
}

const rate = (n: number, ms: number): string => `${Math.round((n / ms) * 1000).toLocaleString('en-US')} events/s`;
let sink = 0;

export async function run(): Promise<void> {
  const N = 100_000;
  const events = benchHistory(N);
  const stored = events.map(encodeEvent);
  const decoded = stored.map((b) => decodeEvent(b, TASK));

  const bare = best(7, () => {
    let acc = 0;
    for (const e of decoded) acc += e.eventId + e.type.length;
    sink += acc;
  });
  const foldMs = best(7, () => {
    sink += fold(TASK, decoded).lastEventId;
  });
  const decodeMs = best(5, () => {
    for (const b of stored) sink += decodeEvent(b, TASK).eventId;
  });
  // "Every run", not only quiet ones (issue #16): the slowest of the runs is reported too.
  const decodeFoldRuns: number[] = [];
  const decodeFoldMs = best(7, () => {
    const t0 = performance.now();
    const out: HistoryEvent[] = new Array(stored.length);
    for (let i = 0; i < stored.length; i++) out[i] = decodeEvent(stored[i]!, TASK);
    sink += fold(TASK, out).lastEventId;
    decodeFoldRuns.push(performance.now() - t0);
  });
  const decodeFoldWorst = Math.max(...decodeFoldRuns);

  console.log(`history: ${N.toLocaleString('en-US')} events, ${stored.reduce((a, b) => a + b.length, 0).toLocaleString('en-US')} bytes stored`);
  console.log(`  bare loop (same decoded array)  ${rate(N, bare).padStart(22)}  ${bare.toFixed(2)} ms`);
  console.log(`  fold                            ${rate(N, foldMs).padStart(22)}  ${foldMs.toFixed(2)} ms  (target ≥ 2,000,000)`);
  console.log(`  decode only                     ${rate(N, decodeMs).padStart(22)}  ${decodeMs.toFixed(2)} ms`);
  console.log(`  decode + fold (stored bytes)    ${rate(N, decodeFoldMs).padStart(22)}  ${decodeFoldMs.toFixed(2)} ms  (target ≥ 500,000 every run)`);
  console.log(`    slowest of ${decodeFoldRuns.length} runs               ${rate(N, decodeFoldWorst).padStart(22)}  ${decodeFoldWorst.toFixed(2)} ms  (${(N / decodeFoldWorst) * 1000 >= 500_000 ? 'met' : 'missed'})`);

  console.log('recovery: decode snapshot + decode and fold a 100-event tail + decide');
  for (const prefix of [1_000, 10_000, 100_000]) {
    const all = benchHistory(prefix + 100);
    const snapshot = encodeState(fold(TASK, all.slice(0, prefix)));
    const tail = all.slice(prefix).map(encodeEvent);
    const reps = 200;
    const ms =
      best(5, () => {
        for (let r = 0; r < reps; r++) {
          const s = fold(TASK, tail.map((b) => decodeEvent(b, TASK)), decodeState(snapshot));
          sink += decide(s, undefined, 0).reason.length;
        }
      }) / reps;
    const fullMs = best(3, () => {
      sink += fold(TASK, all).lastEventId;
    });
    console.log(
      `  prefix ${prefix.toLocaleString('en-US').padStart(7)}: ${(ms * 1000).toFixed(1).padStart(7)} µs per recovery (snapshot ${snapshot.length} bytes); full fold of ${(prefix + 100).toLocaleString('en-US')} events: ${(fullMs * 1000).toFixed(0)} µs`,
    );
  }
  if (sink === 0.5) console.log(sink);
}

// Run directly: node dist/bench/replay.bench.js
if (import.meta.url === `file://${process.argv[1]}`) await run();
