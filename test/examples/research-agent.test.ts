// Smoke test: examples/research-agent (a lead in a process worker fanning out to three specialist
// child tasks, one of which fails) writes its brief, shows the lineage both ways, and its history
// has each child started once and each outcome recorded once, starts before awaits.
import { spawnSync } from 'node:child_process';
import { resolve } from 'node:path';
import { expect, it } from 'vitest';

it('examples/research-agent: three sub-agents, one failed and caught; lineage both ways', () => {
  const r = spawnSync(process.execPath, [resolve('dist/examples/research-agent/index.js')], { encoding: 'utf8', timeout: 60_000 });
  expect(r.status, r.stderr).toBe(0);
  expect(r.stdout).toContain(
    'brief-1: {"question":"heat pumps","notes":["cost: 3 findings on heat pumps","adoption: 3 findings on heat pumps","(brief-1/c1.3 failed: no sources on the regulation of heat pumps)"]}',
  );
  expect(r.stdout).toContain('brief-1/c1.3  specialist  failed');
  expect(r.stdout).toContain('parent of brief-1/c1.3: brief-1 (turn 1, call 3)');
  const events = r.stdout.slice(r.stdout.indexOf('brief-1 child events:')).split('\n').slice(1).filter(Boolean).map((l) => l.trim());
  expect(events).toEqual([
    'call 1: ChildStarted brief-1/c1.1',
    'call 2: ChildStarted brief-1/c1.2',
    'call 3: ChildStarted brief-1/c1.3',
    'call 4: ChildEnded brief-1/c1.1 completed',
    'call 5: ChildEnded brief-1/c1.2 completed',
    'call 6: ChildEnded brief-1/c1.3 failed',
  ]);
});
