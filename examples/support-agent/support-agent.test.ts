// Smoke test: the demo runs end to end on a real LevelDB store, including the SIGKILLed child
// engine, and the recovered turn reuses the recorded refund instead of issuing it again.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { fakeModel } from './agent.js';

const dir = mkdtempSync(join(tmpdir(), 'turnlog-demo-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

it('the fake model is deterministic: it looks an order up, then answers from the tool result', () => {
  expect(fakeModel([{ role: 'user', text: 'where is order 1042?' }])).toEqual({ tool: 'lookup_order', orderId: '1042' });
  expect(fakeModel([{ role: 'user', text: 'x' }, { role: 'tool', text: 'refund R-1 of $1' }])).toEqual({
    reply: "Done: refund R-1 of $1. You'll see it in 3-5 days.",
  });
});

it('npm run demo: converses, survives a SIGKILL mid-turn, and shows the timeline', () => {
  const r = spawnSync(process.execPath, [resolve('dist/examples/support-agent/index.js')], {
    env: { ...process.env, TURNLOG_DEMO_STORE: join(dir, 'store') },
    encoding: 'utf8',
    timeout: 60_000,
  });
  expect(r.status, r.stderr).toBe(0);
  expect(r.stdout).toContain('ended by SIGKILL');
  expect(r.stdout).toContain('credit C-1042'); // the steering message changed the turn's outcome
  expect(r.stdout).toContain('(turn 3, recovered)');
  expect(r.stdout).toContain('issue_refund recorded 1 time(s)');
  expect(r.stdout).toMatch(/turn 3 attempt 2 started \(recovered\)/);
});
