import { expect, it } from 'vitest';
import { describeEvent } from '../../src/cli/format.js';
import type { HistoryEvent } from '../../src/history/events.js';

const started = (executor: 'inline' | 'process', pid: number): HistoryEvent => ({
  type: 'TurnStarted', eventId: 4, time: 0, generation: 1, turn: 1, attempt: 1, inputIds: ['i1'], entryMode: 'fresh',
  steered: false, owner: 'o', instance: 'e1', executor, pid, turnStartedAt: 0, deadline: 1000,
});

it('a turn start names the pid when it is known, and a process worker when it is not yet bound', () => {
  expect(describeEvent(started('inline', 4242), 60)).toContain('inline pid 4242');
  const proc = describeEvent(started('process', 0), 60);
  expect(proc).toContain('process worker');
  expect(proc).not.toContain('pid 0');
});
