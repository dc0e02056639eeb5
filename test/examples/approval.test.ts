// Smoke test: examples/approval (a refund agent in a process worker waiting for approval with a
// timeout) ends approved, refused (signal buffered before the wait) and expired, and A's history
// shows the wait, the signal and the wait's end in order.
import { spawnSync } from 'node:child_process';
import { resolve } from 'node:path';
import { expect, it } from 'vitest';

it('examples/approval: approved while waiting, refused by a buffered signal, expired at the deadline', () => {
  const r = spawnSync(process.execPath, [resolve('dist/examples/approval/index.js')], { encoding: 'utf8', timeout: 60_000 });
  expect(r.status, r.stderr).toBe(0);
  expect(r.stdout).toContain('refund-A: {"status":"refunded","orderId":"A","by":"ana","receipt":"rf-A-40"}');
  expect(r.stdout).toContain('refund-B: {"status":"refused","orderId":"B","by":"bo"}');
  expect(r.stdout).toContain('refund-C: {"status":"expired","orderId":"C"}');
  const order = ['WaitStarted', 'SignalReceived', 'WaitEnded took', 'step=pay', 'TurnCompleted'].map((t) => r.stdout.indexOf(t));
  expect(order.every((i) => i >= 0)).toBe(true);
  expect([...order].sort((a, b) => a - b)).toEqual(order);
});
