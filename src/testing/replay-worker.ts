/**
 * Entry of the replay worker thread (replay-isolate.ts): loads the workflows module, replays,
 * posts each turn and the verdict. The parent owns the time limit and terminates this thread.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { moduleConverter } from '../history/pipeline.js';
import { replayEvents } from './replay-turn.js';
import { workflowMap } from '../workflow/workflow-source.js';
import { serializeError, type ReplayWorkerData, type ReplayWorkerMessage } from './replay-isolate.js';

const data = workerData as ReplayWorkerData;
const post = (m: ReplayWorkerMessage): void => parentPort!.postMessage(m);
try {
  const mod = (await import(data.module)) as Record<string, unknown>;
  post({ type: 'ready' });
  // The module's own converter, as process workers and the CLI take it (docs/workflows.md).
  const converter = moduleConverter(mod);
  // No in-thread timeout: the parent's clock is the limit (it also stops a blocked thread).
  const report = await replayEvents(data.taskId, data.events, workflowMap(mod), (result) => post({ type: 'turn', result }), 0, data.progress, converter);
  post({ type: 'done', report });
} catch (err) {
  post({ type: 'error', error: serializeError(err) });
}
