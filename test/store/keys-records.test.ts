/**
 * Review of src/store/keys.ts (TaskKeys) and src/store/records.ts (summary and lease built as
 * text with cached JSON fragments). Checked and found sound; kept as regression guards:
 * JSON-escaping ids and workflow names, alternating caches, very long ids, and on real LevelDB a
 * task deleted and re-created under the same id with another workflow.
 */
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { HistoryEvent, Lease, TaskSummary } from '../../src/history/events.js';
import { TaskKeys, eventKey, eventPrefix, leaseKey, statusIndexKey, summaryKey, workflowIndexKey } from '../../src/store/keys.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { decodeSummary, encodeLease, encodeLeaseObject, encodeSummary, encodeSummaryRow } from '../../src/store/records.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import { created, queued, started } from '../store/events.js';

const nasty = fc.oneof(
  fc.constantFrom('"', '\\', '\\"', '\u0000', '\u001f', '\u2028\u2029', '\ud800', 'a\udc00b', '\ud83d\ude00', '</script>', '__proto__', '0', '-0', '1e3', ' ', '\t\n'),
  fc.string({ unit: 'binary', maxLength: 16 }),
  fc.string({ unit: 'grapheme', maxLength: 8 }),
  fc.string({ unit: 'binary-ascii', minLength: 400, maxLength: 600 }),
);

describe('records: summary and lease text', () => {
  it('every summary (all optional fields, alternating workflows) encodes as JSON.stringify(row) and decodes back', () => {
    const num = fc.oneof(fc.constantFrom(0, -0, 1, 2 ** 32 - 1, 2 ** 53 - 1, 1e21, 1e-7, 0.1 + 0.2), fc.nat());
    const summary: fc.Arbitrary<TaskSummary> = fc.record({
      taskId: fc.constant('t'),
      workflow: nasty,
      kind: fc.constantFrom('one-shot' as const, 'multi-turn' as const),
      status: fc.constantFrom('pending' as const, 'in_progress' as const, 'suspended' as const, 'completed' as const),
      outcome: fc.constantFrom('succeeded' as const, 'failed' as const, 'cancelled' as const, 'timed_out' as const),
      lastEventId: num,
      turn: num,
      queued: num,
      lastInputId: nasty,
      createdAt: num,
      updatedAt: num,
    });
    fc.assert(
      fc.property(fc.array(summary, { minLength: 2, maxLength: 6 }), (list) => {
        // A-B-A: the cached workflow JSON must follow every change.
        for (const s of [...list, ...list.slice().reverse()]) {
          const bytes = encodeSummary(s);
          expect(bytes.equals(encodeSummaryRow(s))).toBe(true);
          const back = decodeSummary('t', bytes);
          expect(back.workflow).toBe(s.workflow); // JSON.stringify escapes lone surrogates: exact round trip
          expect(back.outcome).toBe(s.outcome);
          expect(back.lastInputId).toBe(s.lastInputId);
        }
      }),
      { seed: 31337, numRuns: 300 },
    );
  });

  it('leases with JSON-escaping owners/instances encode as JSON.stringify({owner,instance,generation,expiresAt}) across cache changes', () => {
    const lease: fc.Arbitrary<Lease> = fc.record({ owner: nasty, instance: nasty, generation: fc.nat(), expiresAt: fc.oneof(fc.nat(), fc.constantFrom(-0, 1e21, 0.5)) });
    fc.assert(
      fc.property(fc.array(lease, { minLength: 2, maxLength: 6 }), (list) => {
        for (const l of [...list, ...list.slice().reverse()]) {
          expect(encodeLease(l).equals(encodeLeaseObject(l))).toBe(true);
          expect(JSON.parse(encodeLease(l).toString())).toEqual({ owner: l.owner, instance: l.instance, generation: l.generation, expiresAt: Object.is(l.expiresAt, -0) ? 0 : l.expiresAt });
        }
      }),
      { seed: 4711, numRuns: 300 },
    );
  });
});

describe('keys: TaskKeys', () => {
  it('matches the key functions for JSON-special, unicode and 512-character ids, workflows switching back and forth', () => {
    const id = fc.oneof(nasty, fc.constant('x'.repeat(512)), fc.constant('ü'.repeat(512))).filter((s) => s.length > 0 && s.length <= 512 && !s.includes('\0'));
    fc.assert(
      fc.property(id, fc.array(nasty.filter((s) => !s.includes('\0')), { minLength: 1, maxLength: 4 }), (taskId, wfs) => {
        const keys = new TaskKeys(taskId);
        expect(keys.eventPrefix.equals(eventPrefix(taskId))).toBe(true);
        expect(eventKey(taskId, 0xffffffff, keys.eventPrefix).equals(eventKey(taskId, 0xffffffff))).toBe(true);
        expect(keys.summary.equals(summaryKey(taskId))).toBe(true);
        expect(keys.lease.equals(leaseKey(taskId))).toBe(true);
        const held: [Buffer, Buffer][] = [];
        for (const wf of [...wfs, ...wfs.slice().reverse()]) {
          for (const st of ['pending', 'in_progress', 'completed'] as const) {
            const k = keys.statusIndex(st, wf);
            expect(k.equals(statusIndexKey(st, wf, taskId))).toBe(true);
            held.push([k, statusIndexKey(st, wf, taskId)]);
          }
          expect(keys.workflowIndex(wf).equals(workflowIndexKey(wf, taskId))).toBe(true);
        }
        // Keys handed out earlier (still in a pending batch) are never rewritten by later calls.
        for (const [k, want] of held) expect(k.equals(want)).toBe(true);
      }),
      { seed: 5, numRuns: 200 },
    );
  });
});

describe('LevelDB: cached keys after deleteTask and re-creation', () => {
  let dir: Awaited<ReturnType<typeof makeTmpDir>>;
  let store: LevelHistoryStore;
  beforeEach(async () => {
    dir = await makeTmpDir('turnlog-review2-keys-');
    store = new LevelHistoryStore(dir.path);
    await store.open();
  });
  afterEach(async () => {
    await store.close();
    await dir.remove();
  });

  it('a task deleted and re-created under the same id with another workflow is indexed under the new one only', async () => {
    const id = 'chat-"42"\\ü\u2028';
    const wfA = 'agent "A"\\';
    const wfB = 'agent-B-ü';
    const first: HistoryEvent[] = [created(1, { workflow: wfA, kind: 'multi-turn' }), queued(2, 'in-1'), { ...started(3, 1), inputIds: ['in-1'] } as HistoryEvent];
    await store.append(id, first, { expectedLastEventId: 0, generation: 1 });
    expect((await store.listTasks({ workflow: wfA })).tasks.map((t) => t.taskId)).toEqual([id]);
    expect((await store.listTasks({ status: 'in_progress', workflow: wfA })).tasks.map((t) => t.taskId)).toEqual([id]);

    await store.deleteTask(id);
    expect(await store.readEvents(id)).toEqual([]);
    expect((await store.listTasks({ workflow: wfA })).tasks).toEqual([]);

    await store.append(id, [created(1, { workflow: wfB, kind: 'one-shot' }), queued(2, 'in-2')], { expectedLastEventId: 0, generation: 1 });
    expect((await store.listTasks({ workflow: wfA })).tasks).toEqual([]);
    expect((await store.listTasks({ status: 'in_progress' })).tasks).toEqual([]);
    expect((await store.listTasks({ workflow: wfB })).tasks.map((t) => [t.taskId, t.workflow, t.status])).toEqual([[id, wfB, 'pending']]);
    expect((await store.listTasks({ status: 'pending', workflow: wfB })).tasks.map((t) => t.taskId)).toEqual([id]);

    // The same after a reopen (summary, lease and indexes as stored on disk).
    await store.close();
    store = new LevelHistoryStore(dir.path);
    await store.open();
    expect((await store.getSummary(id))?.workflow).toBe(wfB);
    expect((await store.listTasks({ workflow: wfA })).tasks).toEqual([]);
    expect((await store.listTasks({ status: 'pending', workflow: wfB })).tasks.map((t) => t.taskId)).toEqual([id]);
  });
});
