// Smoke test: the runaway example's worker is cancelled at the timeout, SIGKILLed after the
// grace, and the task completes timed out with the marker, the kill and the terminal in order.
import { spawnSync } from 'node:child_process';
import { resolve } from 'node:path';
import { expect, it } from 'vitest';

it('examples/runaway-agent: marker, then SIGKILL, then TurnTimedOut(hard_cap)', () => {
  const r = spawnSync(process.execPath, [resolve('dist/examples/runaway-agent/index.js')], { encoding: 'utf8', timeout: 60_000 });
  expect(r.status, r.stderr).toBe(0);
  const order = ['TimeoutCancelRequested', 'WorkerKilled', 'TurnTimedOut', 'TaskCompleted'].map((t) => r.stdout.indexOf(t));
  expect(order.every((i) => i >= 0)).toBe(true);
  expect([...order].sort((a, b) => a - b)).toEqual(order);
  expect(r.stdout).toContain('signal=SIGKILL');
  expect(r.stdout).toContain('cause=hard_cap');
});
