// The workflow replayed by peers/temporal.mjs: 100 sequential activity calls.
import { proxyActivities } from '@temporalio/workflow';

const { callModel } = proxyActivities({ startToCloseTimeout: '1 minute' });

export async function hundredSteps(q) {
  let tokens = 0;
  for (let i = 0; i < 100; i++) tokens += (await callModel(`${q} ${i}`)).tokens;
  return { tokens };
}
