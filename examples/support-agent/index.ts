/**
 * `npm run demo`: a support conversation on the embedded LevelDB store, with a steering
 * message mid-turn and a real crash (a child engine SIGKILLed right after a tool step was
 * recorded) and recovery, then the task's history as a timeline (`turnlog show`).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Engine } from '../../src/index.js';
import { supportAgent, type SupportState } from './agent.js';

const here = dirname(fileURLToPath(import.meta.url));
const cli = resolve(here, '../../src/cli/main.js');
const store = resolve(process.env['TURNLOG_DEMO_STORE'] ?? '.turnlog-demo');
const taskId = 'support-1042';

async function crashChild(): Promise<void> {
  // Runs in a child process with TURNLOG_FAULT_KILL_AFTER_APPEND=3: append 1 starts the turn,
  // 2 records the model's answer, 3 the refund tool's result; then the process is SIGKILLed.
  const engine = await Engine.open({ store, workflows: [supportAgent], scanIntervalMs: 0 });
  const task = await engine.start(supportAgent, 'Please refund order 1042 instead', { taskId, inputId: 'msg-3' });
  await task.nextTurn();
  throw new Error('unreachable: the fault injector kills this process first');
}

async function main(): Promise<void> {
  if (process.argv[2] === '--crash-child') return crashChild();
  rmSync(store, { recursive: true, force: true });
  const say = (who: string, text: string) => console.log(`${who.padEnd(9)} ${text}`);

  console.log(`turnlog demo: support agent on LevelDB at ${store}\n`);
  let engine = await Engine.open({ store, workflows: [supportAgent] });
  say('customer', 'Hi, where is my order 1042?');
  const task = await engine.start(supportAgent, 'Hi, where is my order 1042?', { taskId, inputId: 'msg-1' });
  say('agent', String((await task.nextTurn()).output));

  say('customer', 'It is late, I want a refund');
  await task.send('It is late, I want a refund', { inputId: 'msg-2' });
  // Sent while the model is still thinking: the running turn takes it (steering).
  say('customer', '...actually, make it store credit (sent mid-turn)');
  await engine.sendInput(taskId, 'actually, make it store credit', { inputId: 'msg-2b' });
  say('agent', String((await task.turnResult('msg-2')).output));
  await engine.shutdown();

  console.log('\n-- a child engine takes the next message and is SIGKILLed right after the refund tool ran --');
  say('customer', 'Please refund order 1042 instead');
  const child = spawnSync(process.execPath, [fileURLToPath(import.meta.url), '--crash-child'], {
    env: { ...process.env, TURNLOG_FAULT_KILL_AFTER_APPEND: '3', TURNLOG_DEMO_STORE: store },
    stdio: 'inherit',
  });
  console.log(`   child engine pid ${child.pid} ended by ${child.signal ?? `exit ${child.status}`}`);

  console.log('-- reopening the store: recovery replays the recorded tool step instead of refunding twice --');
  engine = await Engine.open({ store, workflows: [supportAgent] });
  const recovered = await engine.turnResult(taskId, 'msg-3');
  say('agent', `${String(recovered.output)}   (turn ${recovered.turn}, recovered)`);
  const d = await engine.describe(taskId);
  const events = await engine.history(taskId);
  const refundRuns = events.filter((e) => e.type === 'StepCompleted' && e.name === 'issue_refund').length;
  console.log(`\nstatus ${d.status}, ${d.turn} turns, ${events.length} events; issue_refund recorded ${refundRuns} time(s)`);
  const state = (await import('../../src/history/payload.js')).defaultPayloadConverter;
  const last = events.findLast((e) => e.type === 'TurnCompleted');
  if (last?.type === 'TurnCompleted' && last.state) console.log(`refunds on file: ${state.fromPayload<SupportState>(last.state).refunds.join('; ')}`);
  await engine.shutdown();

  console.log(`\n$ turnlog show ${taskId} --store ${store}\n`);
  console.log(execFileSync(process.execPath, [cli, 'show', taskId, '--store', store, '--width', '70'], { encoding: 'utf8' }));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
