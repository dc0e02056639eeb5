// Sub-agents as child tasks: a lead researcher in a worker process fans a question out to three
// specialist child tasks and awaits them; one of them fails and the lead carries on without it.
// Prints the brief, the lineage (parent ↔ children) and the lead's child events.
// Run: npm run build && node dist/examples/research-agent/index.js
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Engine } from '../../src/runtime/engine.js';
import { ProcessExecutor } from '../../src/executor/process-executor.js';
import { silentLogger } from '../../src/logger.js';
import { lead, specialist } from './workflows.js';

const dir = await mkdtemp(join(tmpdir(), 'turnlog-research-'));
const executor = new ProcessExecutor({ workflowsModule: new URL('./workflows.js', import.meta.url), execArgv: [] });
const engine = await Engine.open({ store: join(dir, 'store'), workflows: [lead, specialist], executors: { process: executor }, logger: silentLogger, inspect: false });

try {
  const task = await engine.start(lead, 'heat pumps', { taskId: 'brief-1' });
  console.log(`brief-1: ${JSON.stringify(await task.result())}`);

  const d = await engine.describe('brief-1');
  console.log('\nchildren of brief-1:');
  for (const c of d.children ?? []) console.log(`  ${c.childId}  ${c.workflow}  ${c.status ?? 'running'}`);
  const child = await engine.describe('brief-1/c1.3');
  console.log(`parent of brief-1/c1.3: ${child.parent?.taskId} (turn ${child.parent?.turn}, call ${child.parent?.seq})`);

  console.log('\nbrief-1 child events:');
  for (const e of await task.history()) {
    if (e.type === 'ChildStarted') console.log(`  call ${e.seq}: ChildStarted ${e.childId}`);
    if (e.type === 'ChildEnded') console.log(`  call ${e.seq}: ChildEnded ${e.childId} ${e.status}`);
  }
} finally {
  await engine.shutdown();
  await executor.close();
  await rm(dir, { recursive: true, force: true });
}
