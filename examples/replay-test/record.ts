/**
 * Records the conversation this example replays: `node dist/examples/replay-test/record.js`
 * (after `npm run build`) rewrites support-conversation.json from a run of the real agent on a
 * test engine (in-memory store, manual clock).
 */
import { writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { encodeHistoryFile } from '../../src/history/history-file.js';
import { createTestEngine } from '../../src/testing/index.js';
import { supportAgent, timing } from '../support-agent/agent.js';

// Source and compiled copies (dist/examples/…) both write the file beside the source.
const here = dirname(fileURLToPath(import.meta.url)).replace(/[\\/]dist([\\/]examples[\\/])/, '$1');
export const HISTORY = join(here, 'support-conversation.json');

export async function record(path = HISTORY): Promise<void> {
  timing.modelLatencyMs = 200; // room for the second message to arrive mid-turn (steering)
  const t = await createTestEngine({ workflows: [supportAgent] });
  try {
    const task = await t.engine.start(supportAgent, 'Hi, where is my order 1042?', { taskId: 'support-1042', inputId: 'msg-1' });
    await task.nextTurn();
    await task.send('It is late, I want a refund', { inputId: 'msg-2' });
    await task.send('actually, make it store credit', { inputId: 'msg-2b' });
    await task.turnResult('msg-2');
    const events = await t.history(task.taskId);
    await writeFile(path, await encodeHistoryFile({ taskId: task.taskId, events }, 'json'));
  } finally {
    await t.close();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await record();
