/**
 * `summarize` copies the previous summary field by field (a literal, not a spread: one hidden
 * class for all summaries, docs/performance.md). A field added to TaskSummary and not copied
 * would vanish from every summary after the next append: `Required<TaskSummary>` below stops
 * compiling when the interface grows, and the assertions catch a field left out of the copy.
 */
import { describe, expect, it } from 'vitest';
import type { TaskSummary } from '../../src/history/events.js';
import { copySummary, summarize } from '../../src/history/summary.js';

const full: Required<TaskSummary> = {
  taskId: 'task-a',
  workflow: 'chat',
  kind: 'multi-turn',
  status: 'suspended',
  outcome: 'succeeded',
  lastEventId: 7,
  turn: 2,
  queued: 1,
  scheduled: { 'in-1': 1_700_000_000_000 },
  lastInputId: 'in-1',
  cancelRequested: true,
  createdAt: 1_000,
  updatedAt: 2_000,
  corrupt: { key: 'k', code: 'TURNLOG_CORRUPT', message: 'm' },
};

describe('summary copy', () => {
  it('copies every field of a summary that has all of them, into a new object', () => {
    const copy = copySummary(full);
    expect(copy).toEqual(full);
    expect(copy).not.toBe(full);
    expect(Object.keys(copy).sort()).toEqual(Object.keys(full).sort());
  });

  it('adds no key a summary does not have (no undefined-valued optional fields)', () => {
    const { outcome: _o, scheduled: _s, lastInputId: _l, corrupt: _c, cancelRequested: _x, ...bare } = full;
    const copy = copySummary(bare);
    expect(Object.keys(copy).sort()).toEqual(Object.keys(bare).sort());
  });

  it('summarize with no new events keeps every field of the previous summary', () => {
    expect(summarize(full.taskId, full, [])).toEqual(full);
  });
});
