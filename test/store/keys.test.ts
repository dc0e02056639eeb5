import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { TaskStatus } from '../../src/history/events.js';
import { TaskKeys, eventKey, eventPrefix, leaseKey, statusIndexKey, summaryKey, workflowIndexKey } from '../../src/store/keys.js';

const id = fc.oneof(fc.string({ unit: 'grapheme', minLength: 1, maxLength: 20 }), fc.string({ unit: 'binary', minLength: 1, maxLength: 20 })).filter((s) => !s.includes('\0'));
const status = fc.constantFrom<TaskStatus>('pending', 'in_progress', 'suspended', 'completed');

describe('TaskKeys (per-task cached keys)', () => {
  it('gives the same bytes as the key functions, across workflow and status changes', () => {
    fc.assert(
      fc.property(id, fc.array(fc.tuple(status, id), { minLength: 1, maxLength: 8 }), (taskId, moves) => {
        const keys = new TaskKeys(taskId);
        expect(keys.eventPrefix.equals(eventPrefix(taskId))).toBe(true);
        expect(eventKey(taskId, 7, keys.eventPrefix).equals(eventKey(taskId, 7))).toBe(true);
        expect(keys.summary.equals(summaryKey(taskId))).toBe(true);
        expect(keys.lease.equals(leaseKey(taskId))).toBe(true);
        for (const [st, wf] of moves) {
          expect(keys.statusIndex(st, wf).equals(statusIndexKey(st, wf, taskId))).toBe(true);
          expect(keys.workflowIndex(wf).equals(workflowIndexKey(wf, taskId))).toBe(true);
          // Asking again (cached) gives the same bytes.
          expect(keys.statusIndex(st, wf).equals(statusIndexKey(st, wf, taskId))).toBe(true);
        }
      }),
      { seed: 77, numRuns: 300 },
    );
  });
});
