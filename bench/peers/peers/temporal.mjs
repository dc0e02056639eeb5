/**
 * Temporal: replay only (a Temporal server is a separate download, not an npm package). A
 * recorded history of the 100-activity workflow in temporal-workflow.mjs, built event by event
 * as a server records it, replayed with `Worker.runReplayHistories` (the workflow bundle is
 * built once, outside the measurement).
 */
import { fileURLToPath } from 'node:url';
import { Worker } from '@temporalio/worker';
import { labelOf, pkgVersion } from './common.mjs';

const version = pkgVersion('@temporalio/worker');
export const info = { label: labelOf('Temporal', version), version, notes: 'replay only: Worker.runReplayHistories on a 100-activity history, bundle built once' };

const b64 = (s) => Buffer.from(s).toString('base64');
const payload = (v) => ({ metadata: { encoding: b64('json/plain') }, data: b64(JSON.stringify(v)) });
const T0 = Date.UTC(2026, 0, 1);

/** The history a Temporal server records for hundredSteps('q') with every activity completing. */
export function temporalHistory() {
  const events = [];
  const taskQueue = { name: 'bench', kind: 'TASK_QUEUE_KIND_NORMAL' };
  const add = (type, attrsKey, attrs) => {
    const eventId = events.length + 1;
    events.push({ eventId: String(eventId), eventTime: new Date(T0 + eventId * 10).toISOString(), eventType: type, taskId: String(1000 + eventId), [attrsKey]: attrs });
    return String(eventId);
  };
  const workflowTask = () => {
    const s = add('EVENT_TYPE_WORKFLOW_TASK_SCHEDULED', 'workflowTaskScheduledEventAttributes', { taskQueue, startToCloseTimeout: '10s', attempt: 1 });
    const st = add('EVENT_TYPE_WORKFLOW_TASK_STARTED', 'workflowTaskStartedEventAttributes', { scheduledEventId: s, identity: 'bench', requestId: `r${s}` });
    return add('EVENT_TYPE_WORKFLOW_TASK_COMPLETED', 'workflowTaskCompletedEventAttributes', { scheduledEventId: s, startedEventId: st, identity: 'bench' });
  };
  add('EVENT_TYPE_WORKFLOW_EXECUTION_STARTED', 'workflowExecutionStartedEventAttributes', {
    workflowType: { name: 'hundredSteps' },
    taskQueue,
    input: { payloads: [payload('q')] },
    workflowExecutionTimeout: '0s',
    workflowRunTimeout: '0s',
    workflowTaskTimeout: '10s',
    originalExecutionRunId: 'run-1',
    firstExecutionRunId: 'run-1',
    identity: 'bench',
    attempt: 1,
  });
  let completed = workflowTask();
  for (let i = 0; i < 100; i++) {
    const s = add('EVENT_TYPE_ACTIVITY_TASK_SCHEDULED', 'activityTaskScheduledEventAttributes', {
      activityId: String(i + 1),
      activityType: { name: 'callModel' },
      taskQueue,
      input: { payloads: [payload(`q ${i}`)] },
      scheduleToCloseTimeout: '0s',
      scheduleToStartTimeout: '0s',
      startToCloseTimeout: '60s',
      heartbeatTimeout: '0s',
      workflowTaskCompletedEventId: completed,
      retryPolicy: { initialInterval: '1s', backoffCoefficient: 2, maximumInterval: '100s' },
    });
    const st = add('EVENT_TYPE_ACTIVITY_TASK_STARTED', 'activityTaskStartedEventAttributes', { scheduledEventId: s, identity: 'bench', requestId: `a${s}`, attempt: 1 });
    add('EVENT_TYPE_ACTIVITY_TASK_COMPLETED', 'activityTaskCompletedEventAttributes', { result: { payloads: [payload({ text: `q ${i}`, tokens: 42 })] }, scheduledEventId: s, startedEventId: st, identity: 'bench' });
    completed = workflowTask();
  }
  add('EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED', 'workflowExecutionCompletedEventAttributes', { result: { payloads: [payload({ tokens: 4200 })] }, workflowTaskCompletedEventId: completed });
  return { events };
}

export async function open() {
  const { bundleWorkflowCode } = await import('@temporalio/worker');
  const { historyFromJSON } = await import('@temporalio/common/lib/proto-utils.js');
  const { Runtime, DefaultLogger } = await import('@temporalio/worker');
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  const workflowBundle = await bundleWorkflowCode({ workflowsPath: fileURLToPath(new URL('./temporal-workflow.mjs', import.meta.url)), logger: new DefaultLogger('ERROR') });
  const history = historyFromJSON(temporalHistory());
  const replayOne = async () => {
    let n = 0;
    for await (const r of Worker.runReplayHistories({ workflowBundle }, [{ workflowId: 'bench-100', history }])) {
      if (r.error) throw r.error;
      n++;
    }
    if (n !== 1) throw new Error(`replayed ${n} histories`);
    return history.events.length;
  };
  await replayOne(); // fails here, not in the measurement, when the history does not replay
  return { replay100: replayOne, close: async () => {} };
}
