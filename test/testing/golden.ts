/**
 * Records the golden histories of test/fixtures/histories/ from real engine runs of the
 * support-agent fixture. `UPDATE_GOLDEN=1 npx vitest run test/testing/golden.test.ts` rewrites
 * them; file names carry the package version (`<scenario>_<version>.json`, Temporal-style).
 */
import { readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { HistoryEvent } from '../../src/history/events.js';
import { encodeHistoryFile } from '../../src/history/history-file.js';
import { ManualClock } from '../../src/runtime/clock.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { createTestEngine } from '../../src/testing/index.js';
import { createSupportAgent, defaultTools, type SupportTools } from '../fixtures/workflows/support-agent.js';
import { supportAgent as exampleAgent, timing as exampleTiming } from '../../examples/support-agent/agent.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const GOLDEN_DIR = join(ROOT, 'test/fixtures/histories');
export const VERSION = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;

export interface Recording {
  scenario: string;
  taskId: string;
  events: HistoryEvent[];
}

/** A promise the recorder settles by hand, plus one that says the step got there. */
function gate() {
  let open!: () => void;
  let arrived!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  const reached = new Promise<void>((r) => (arrived = r));
  return { open, opened, reached, arrive: () => arrived() };
}

/** Four turns: an order lookup with a steering message, a refund, a rejected refund, goodbye. */
export async function recordConversation(): Promise<Recording> {
  const g = gate();
  const tools: SupportTools = {
    ...defaultTools,
    lookupOrder: async (id) => {
      g.arrive();
      await g.opened;
      return defaultTools.lookupOrder(id);
    },
  };
  const agent = createSupportAgent(tools);
  const t = await createTestEngine({ workflows: [agent] });
  try {
    const task = await t.engine.start(agent, 'where is my order 42?', { taskId: 'support-conversation', inputId: 'in-1' });
    await g.reached;
    await task.send('it is a gift, please hurry', { inputId: 'in-2' }); // steering: taken mid-turn
    g.open();
    await task.turnResult('in-1');
    for (const [inputId, text] of [
      ['in-3', 'I want a refund of 20'],
      ['in-4', 'then refund 5000 please'],
      ['in-5', 'ok bye'],
    ] as const) {
      await task.send(text, { inputId });
      await task.nextTurn();
    }
    return { scenario: 'support-conversation', taskId: task.taskId, events: await t.history(task.taskId) };
  } finally {
    await t.close();
  }
}

/** A chat turn, a turn that times out waiting for a human (cut off), then an order lookup. */
export async function recordTimeout(): Promise<Recording> {
  const agent = createSupportAgent();
  const t = await createTestEngine({ workflows: [agent] });
  try {
    const task = await t.engine.start(agent, 'hello', { taskId: 'support-timeout', inputId: 'in-1' });
    await task.nextTurn();
    await task.send('get me a human', { inputId: 'in-2' });
    await t.advance(60_000);
    const timedOut = await task.nextTurn();
    if (timedOut.status !== 'timed_out') throw new Error(`expected a timeout, got ${timedOut.status}`);
    await task.send('where is order 7?', { inputId: 'in-3' });
    await task.nextTurn();
    return { scenario: 'support-timeout', taskId: task.taskId, events: await t.history(task.taskId) };
  } finally {
    await t.close();
  }
}

/** The engine stops mid-turn (after lookup-order); a new engine recovers and re-runs the turn as attempt 2. */
export async function recordRecovered(): Promise<Recording> {
  const g = gate();
  let calls = 0;
  const tools: SupportTools = {
    ...defaultTools,
    lookupOrder: (id) => defaultTools.lookupOrder(id),
    issueRefund: async (amount) => {
      if (++calls === 1) {
        g.arrive();
        await g.opened; // the first engine never gets an answer
      }
      return defaultTools.issueRefund(amount);
    },
  };
  const agent = createSupportAgent(tools);
  const store = new MemoryHistoryStore();
  const clock = new ManualClock();
  const first = await createTestEngine({ workflows: [agent], store, clock, instance: 'test-engine-1' });
  const task = await first.engine.start(agent, 'refund 30 for order 9', { taskId: 'support-recovered', inputId: 'in-1' });
  await g.reached;
  await first.close(); // leaves the turn in progress, as a crash would
  const second = await createTestEngine({ workflows: [agent], store, clock, instance: 'test-engine-2' });
  try {
    await second.engine.task(task.taskId).turnResult('in-1');
    g.open();
    return { scenario: 'support-recovered', taskId: task.taskId, events: await second.history(task.taskId) };
  } finally {
    await second.close();
  }
}

export async function recordAll(): Promise<Recording[]> {
  return [await recordConversation(), await recordTimeout(), await recordRecovered(), await recordExample()];
}

/**
 * The conversation of examples/support-agent (`npm run demo`) without the crash: an order
 * question, a refund request steered to store credit mid-turn, a refund. Kept in examples/
 * (its workflow shares the fixture's name, so it replays against its own code).
 */
export async function recordExample(): Promise<Recording> {
  const latency = exampleTiming.modelLatencyMs;
  exampleTiming.modelLatencyMs = 200; // room for the steering message to land mid-turn
  const t = await createTestEngine({ workflows: [exampleAgent] });
  try {
    const task = await t.engine.start(exampleAgent, 'Hi, where is my order 1042?', { taskId: 'support-1042', inputId: 'msg-1' });
    await task.nextTurn();
    await task.send('It is late, I want a refund', { inputId: 'msg-2' });
    await task.send('actually, make it store credit', { inputId: 'msg-2b' });
    await task.turnResult('msg-2');
    await task.send('Please refund order 1042 instead', { inputId: 'msg-3' });
    await task.nextTurn();
    return { scenario: 'examples/support-agent', taskId: task.taskId, events: await t.history(task.taskId) };
  } finally {
    exampleTiming.modelLatencyMs = latency;
    await t.close();
  }
}

export function goldenPath(scenario: string): string {
  return join(GOLDEN_DIR, `${scenario}_${VERSION}.json`);
}

/** Writes each recording as a JSON history file (the `turnlog export` format). */
export async function writeGolden(recordings: readonly Recording[]): Promise<string[]> {
  const paths: string[] = [];
  for (const r of recordings) {
    await mkdir(dirname(goldenPath(r.scenario)), { recursive: true });
    const bytes = await encodeHistoryFile({ taskId: r.taskId, events: r.events }, 'json');
    await writeFile(goldenPath(r.scenario), bytes);
    paths.push(goldenPath(r.scenario));
  }
  return paths;
}
