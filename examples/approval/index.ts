// Human in the loop: a refund agent in a worker process waits for approval with a timeout.
// Refund A is approved while it waits, B is refused by a signal sent before it waits (buffered),
// C is never answered and expires. Prints each result and A's timeline.
// Run: npm run build && node dist/examples/approval/index.js
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Engine } from '../../src/runtime/engine.js';
import { ProcessExecutor } from '../../src/executor/process-executor.js';
import { silentLogger } from '../../src/logger.js';
import { refundAgent } from './workflows.js';

const dir = await mkdtemp(join(tmpdir(), 'turnlog-approval-'));
const executor = new ProcessExecutor({ workflowsModule: new URL('./workflows.js', import.meta.url), execArgv: [] });
const engine = await Engine.open({ store: join(dir, 'store'), workflows: [refundAgent], executors: { process: executor }, logger: silentLogger, inspect: false });

/** Resolves once the task's turn waits (its WaitStarted is durable). */
async function waiting(taskId: string): Promise<void> {
  while (!(await engine.history(taskId)).some((e) => e.type === 'WaitStarted')) await new Promise((r) => setTimeout(r, 10));
}

try {
  const a = await engine.start(refundAgent, { orderId: 'A', amount: 40, approvalTimeoutMs: 60_000 }, { taskId: 'refund-A' });
  await waiting('refund-A');
  await a.signal('approval', { approved: true, by: 'ana' }); // a human clicks "approve"

  // A decision that arrives before the agent asks is buffered in the history, not lost.
  const b = await engine.start(refundAgent, { orderId: 'B', amount: 900, approvalTimeoutMs: 60_000 }, { taskId: 'refund-B' });
  await b.signal('approval', { approved: false, by: 'bo' });

  const c = await engine.start(refundAgent, { orderId: 'C', amount: 5, approvalTimeoutMs: 300 }, { taskId: 'refund-C' });

  for (const t of [a, b, c]) console.log(`${t.taskId}: ${JSON.stringify(await t.result())}`);

  const history = await a.history();
  const t0 = history[0]!.time;
  console.log('\nrefund-A timeline (ms since the task was created):');
  for (const e of history) {
    const extra =
      e.type === 'StepCompleted' ? ` step=${e.name}` :
      e.type === 'WaitStarted' ? ` name=${e.name} deadline=+${(e.deadline ?? t0) - t0}` :
      e.type === 'SignalReceived' ? ` name=${e.name} id=${e.signalId}` :
      e.type === 'WaitEnded' ? (e.timedOut ? ' timed out' : ` took ${e.signalId}`) :
      '';
    console.log(`  +${String(e.time - t0).padStart(5)}  ${e.type}${extra}`);
  }
} finally {
  await engine.shutdown();
  await executor.close();
  await rm(dir, { recursive: true, force: true });
}
