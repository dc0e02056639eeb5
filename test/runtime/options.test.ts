import { describe, expect, it } from 'vitest';
import { resolveOptions } from '../../src/runtime/options.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { isTurnlogError } from '../../src/errors.js';

// docs/workflows.md#the-engine: an option out of range is TURNLOG_INVALID_ARGUMENT naming it, at
// Engine.open, not an engine that never scans (NaN), snapshots every event (0) or caches nothing (-1).
const wf = defineWorkflow({ name: 'w', turn: async () => 1 });

describe('engine options', () => {
  it.each([
    ['scanIntervalMs', -1],
    ['scanIntervalMs', Number.NaN],
    ['shutdownGraceMs', -1],
    ['shutdownGraceMs', Number.POSITIVE_INFINITY],
    ['snapshotEvery', 0],
    ['snapshotEvery', 2.5],
    ['maxCachedTasks', -1],
    ['maxCachedTasks', 0],
  ])('%s = %s is refused, naming the option', (name, value) => {
    let err: unknown;
    try {
      resolveOptions({ workflows: [wf], [name]: value });
    } catch (e) {
      err = e;
    }
    expect(isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT'), String(err)).toBe(true);
    expect((err as Error).message).toContain(name);
  });

  it('accepts 0 for scanIntervalMs (no periodic scan) and shutdownGraceMs, and has the documented defaults', () => {
    const o = resolveOptions({ workflows: [wf], scanIntervalMs: 0, shutdownGraceMs: 0 });
    expect([o.scanIntervalMs, o.shutdownGraceMs]).toEqual([0, 0]);
    const d = resolveOptions({ workflows: [wf] });
    expect({ scan: d.scanIntervalMs, grace: d.shutdownGraceMs, every: d.snapshotEvery, cached: d.maxCached, lease: d.leaseMs, conc: d.recoveryConcurrency, store: d.storeSpec }).toEqual({
      scan: 30_000,
      grace: 25_000,
      every: 1000,
      cached: 10_000,
      lease: 60_000,
      conc: 64,
      store: '.turnlog',
    });
  });
});
