// Lineage (docs/children.md): a parent's children with their recorded status, a child's parent,
// as `turnlog show` prints them.
import { describe, expect, it } from 'vitest';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { lineage, lineageLines } from '../../src/timeline/lineage.js';

describe('lineage', () => {
  it('lists the children a task started, with the outcome it recorded, and a child its parent', () => {
    const parent = historyBuilder('lead').created().input().turnStarted().childStarted('researcher').childStarted('writer', { detached: true }).childEnded('lead/c1.1', { failure: 'no sources' }).build();
    const l = lineage(parent);
    expect(l.parent).toBeNull();
    expect(l.children.map((c) => [c.childId, c.workflow, c.status, c.detached])).toEqual([
      ['lead/c1.1', 'researcher', 'failed', false],
      ['lead/c1.2', 'writer', 'running', true],
    ]);
    expect(lineageLines(l)).toEqual(['children  2', '  lead/c1.1  researcher  failed  (turn 1, call 1)', '  lead/c1.2  writer  running  (turn 1, call 2, detached)']);
    const created = historyBuilder('lead/c1.1').created().build()[0]!;
    const child = lineage([{ ...created, parent: { taskId: 'lead', turn: 1, seq: 1, detached: false } } as typeof created]);
    expect(lineageLines(child)).toEqual(['parent    lead (turn 1, call 1)']);
    expect(lineageLines(lineage(historyBuilder('x').created().build()))).toEqual([]);
  });
});
