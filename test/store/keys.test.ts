import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { TaskStatus } from '../../src/history/events.js';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { MAX_TASK_ID_LENGTH, TaskKeys, checkTaskId, eventKey, eventPrefix, leaseKey, snapshotKey, snapshotKeyOf, statusIndexKey, summaryKey, summaryKeyOf, taskBytesOfKey, taskIdOfKey, workflowIndexKey } from '../../src/store/keys.js';

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

  it('from the id bytes of an index key (a claim builds its page\'s keys so): the same bytes', () => {
    fc.assert(
      fc.property(id, status, id, (taskId, st, wf) => {
        for (const key of [statusIndexKey(st, wf, taskId), workflowIndexKey(wf, taskId), summaryKey(taskId)]) {
          const task = taskBytesOfKey(key);
          expect(taskIdOfKey(key)).toBe(taskId);
          expect(summaryKeyOf(task).equals(summaryKey(taskId))).toBe(true);
          expect(snapshotKeyOf(task).equals(snapshotKey(taskId))).toBe(true);
          const keys = new TaskKeys(taskId, task);
          expect(keys.eventPrefix.equals(eventPrefix(taskId))).toBe(true);
          expect(keys.lease.equals(leaseKey(taskId))).toBe(true);
          expect(keys.statusIndex(st, wf).equals(statusIndexKey(st, wf, taskId))).toBe(true);
        }
      }),
      { seed: 78, numRuns: 300 },
    );
  });
});

describe('the task-id rule (one limit for the engine and the stores: 200, no control characters)', () => {
  it('the store and engine.start accept 200 characters and reject 201, control characters and empty, with one message', async () => {
    expect(MAX_TASK_ID_LENGTH).toBe(200);
    const wf = defineWorkflow({ name: 'ids', turn: async () => 'ok' });
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    try {
      const ok = 'x'.repeat(200);
      expect(() => checkTaskId(ok)).not.toThrow();
      expect(await (await engine.start(wf, null, { taskId: ok })).nextTurn()).toMatchObject({ status: 'completed' });
      for (const bad of ['x'.repeat(201), 'a\nb', 'a\0b', '']) {
        const message = `Task id ${JSON.stringify(bad)} is invalid. Use a non-empty string of at most 200 characters without control characters.`;
        expect(() => checkTaskId(bad)).toThrow(message);
        await expect(engine.start(wf, null, { taskId: bad })).rejects.toMatchObject({ code: 'TURNLOG_INVALID_ARGUMENT', message });
      }
    } finally {
      await engine.shutdown({ graceMs: 0 });
    }
  });
});
