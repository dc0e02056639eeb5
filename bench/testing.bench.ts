/**
 * Replay-testing benchmark (issue 6): `replayHistory` on a recorded 100-step turn and on a
 * 1,000-turn history. For scale, Temporal's `runReplayHistories` replays a 100-activity
 * workflow history (~1,100 events) in ~130 ms here: ~4,600 events/s, ~7.7 histories/s.
 * Target: ≥ 50× Temporal's events/s (≥ 230,000 events/s) on a history of the same size.
 */
import { performance } from 'node:perf_hooks';
import type { HistoryEvent } from '../src/history/events.js';
import { encodeHistoryFile, parseHistoryFile } from '../src/history/history-file.js';
import { replayHistory } from '../src/testing/replay-history.js';
import { defineWorkflow } from '../src/workflow/define-workflow.js';
import { historyBuilder } from '../src/testing/history-builder.js';

const TEMPORAL_EVENTS_PER_S = 4_600;
const TEMPORAL_HISTORIES_PER_S = 1000 / 130;

/** One turn calling 100 model steps, like an agent loop with 100 tool calls. */
const hundredSteps = defineWorkflow({
  name: 'hundred-steps',
  turn: async (ctx, q: string) => {
    let tokens = 0;
    for (let i = 0; i < 100; i++) tokens += (await ctx.step(`call-model-${i}`, () => ({ text: `${q} ${i}`, tokens: 42 }))).tokens;
    return { tokens };
  },
});

/** A chat: each turn classifies, calls the model, keeps a counter in durable state. */
const chat = defineWorkflow<string, string, { turns: number }>({
  name: 'chat',
  kind: 'multi-turn',
  initialState: () => ({ turns: 0 }),
  turn: async (ctx, text) => {
    const intent = await ctx.step('classify', () => 'chat');
    const reply = await ctx.step('call-model', () => `${intent}: ${text}`);
    ctx.state.turns++;
    return reply;
  },
});

function hundredStepHistory(): HistoryEvent[] {
  const b = historyBuilder('bench-100', { tick: 10 }).created({ workflow: 'hundred-steps' }).input('q').turnStarted();
  for (let i = 0; i < 100; i++) b.step(`call-model-${i}`, { text: `q ${i}`, tokens: 42 });
  return b.completed({ tokens: 4200 }).build();
}

function thousandTurnHistory(): HistoryEvent[] {
  const b = historyBuilder('bench-1000', { tick: 10 }).created({ workflow: 'chat', kind: 'multi-turn' });
  for (let t = 1; t <= 1000; t++) {
    b.input(`message ${t}`).turnStarted().step('classify', 'chat').step('call-model', `chat: message ${t}`);
    b.completed(`chat: message ${t}`, { state: { turns: t }, completeTask: false });
  }
  return b.build();
}

async function best(runs: number, reps: number, fn: () => Promise<unknown>): Promise<number> {
  let min = Infinity;
  for (let r = 0; r < runs; r++) {
    const t0 = performance.now();
    for (let i = 0; i < reps; i++) await fn();
    min = Math.min(min, (performance.now() - t0) / reps);
  }
  return min;
}

const fmt = (n: number): string => Math.round(n).toLocaleString('en-US');

export async function run(): Promise<void> {
  const h100 = hundredStepHistory();
  const file100 = await encodeHistoryFile({ taskId: 'bench-100', events: h100 }, 'json');
  const h1000 = thousandTurnHistory();
  // Sanity first: both histories replay cleanly (a benchmark of a throwing replay measures nothing).
  await replayHistory({ history: h100, workflows: [hundredSteps] });
  if ((await replayHistory({ history: h1000, workflows: [chat] })).turns !== 1000) throw new Error('1,000-turn history did not replay');

  const ms100 = await best(5, 200, () => replayHistory({ history: h100, workflows: [hundredSteps] }));
  const ms100file = await best(5, 200, () =>
    replayHistory({ history: parseHistoryFile(file100, 'bench-100.json').tasks[0]!.events, workflows: [hundredSteps] }),
  );
  const ms1000 = await best(5, 5, () => replayHistory({ history: h1000, workflows: [chat] }));

  const ev100 = (h100.length / ms100) * 1000;
  console.log(`100-step turn (${h100.length} events, ${file100.length.toLocaleString('en-US')} bytes as JSON)`);
  console.log(
    `  replayHistory(events)       ${(ms100 * 1000).toFixed(0).padStart(6)} µs  ${fmt(1000 / ms100).padStart(7)} histories/s  ${fmt(ev100).padStart(10)} events/s  ` +
      `(${(ev100 / TEMPORAL_EVENTS_PER_S).toFixed(0)}× Temporal's events/s, ${(1000 / ms100 / TEMPORAL_HISTORIES_PER_S).toFixed(0)}× its histories/s for 100 activities; target ≥ 50×)`,
  );
  console.log(
    `  parse JSON file + replay    ${(ms100file * 1000).toFixed(0).padStart(6)} µs  ${fmt(1000 / ms100file).padStart(7)} histories/s  ${fmt((h100.length / ms100file) * 1000).padStart(10)} events/s`,
  );
  console.log(`1,000-turn history (${h1000.length.toLocaleString('en-US')} events)`);
  console.log(
    `  replayHistory(events)       ${ms1000.toFixed(1).padStart(6)} ms  ${fmt((1000 / ms1000) * 1000).padStart(7)} turns/s     ${fmt((h1000.length / ms1000) * 1000).padStart(10)} events/s  ${(1000 / ms1000).toFixed(1)} histories/s`,
  );
}

// Run directly: node dist/bench/testing.bench.js
if (import.meta.url === `file://${process.argv[1]}`) await run();
