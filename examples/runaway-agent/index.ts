// A tool that hangs: cancelled at the turn timeout, SIGKILLed after the grace. Prints the timeline.
// Run: npm run build && node dist/examples/runaway-agent/index.js
import { Engine } from '../../src/runtime/engine.js';
import { ProcessExecutor } from '../../src/executor/process-executor.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { silentLogger } from '../../src/logger.js';
import { researchAgent } from './workflows.js';

// warmPool: 1 — a worker that already loaded workflows.js waits for the turn.
const executor = new ProcessExecutor({ workflowsModule: new URL('./workflows.js', import.meta.url), execArgv: [], warmPool: 1 });
while (executor.readyWarmCount < 1) await new Promise((r) => setTimeout(r, 10));
const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [researchAgent], executors: { process: executor }, logger: silentLogger });

const task = await engine.start(researchAgent, 'why is the sky blue?');
try {
  await task.result();
} catch (err) {
  console.log(`result(): ${(err as Error).message}`);
}

const history = await task.history();
const t0 = history[0]!.time;
console.log('\ntimeline (ms since the task was created):');
for (const e of history) {
  const extra =
    e.type === 'TurnStarted' ? ` deadline=+${e.deadline - t0}` :
    e.type === 'TimeoutCancelRequested' ? ` graceUntil=+${e.graceUntil - t0}` :
    e.type === 'StepCompleted' ? ` step=${e.name}` :
    e.type === 'WorkerKilled' ? ` pid=${e.pid} signal=${e.signal} (${e.reason})` :
    e.type === 'TurnTimedOut' ? ` cause=${e.cause}` :
    e.type === 'TaskCompleted' ? ` outcome=${e.outcome}` : '';
  console.log(`  +${String(e.time - t0).padStart(5)}  ${e.type}${extra}`);
}
await engine.shutdown();
