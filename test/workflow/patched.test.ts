// ctx.patched / ctx.deprecatePatch (docs/versioning.md): new turns record a PatchMarked and take the
// new branch; a turn recorded before the patch (no marker where the code asks) takes the old one,
// live on recovery and in the replay tester, which reports the patch ids still taken old-way.
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { replayHistory } from '../../src/testing/index.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { isTurnlogError } from '../../src/errors.js';
import type { HistoryEvent } from '../../src/history/events.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

/** The deployed code: refund-v2 behind a patch; `ran` lists the step functions that really ran. */
function refundWorkflow(ran: string[]) {
  return defineWorkflow({
    name: 'refund',
    turn: async (ctx, order: string) => {
      const v2 = await ctx.patched('refund-v2');
      expect(await ctx.patched('refund-v2')).toBe(v2); // one answer per id within an attempt
      if (v2) return ctx.step('refund-v2', () => (ran.push('v2'), `v2:${order}`));
      return ctx.step('refund-v1', () => (ran.push('v1'), `v1:${order}`));
    },
  });
}

/** The cleanup deploy: the old branch is gone. */
const deprecated = defineWorkflow({
  name: 'refund',
  turn: async (ctx, order: string) => {
    await ctx.deprecatePatch('refund-v2');
    return ctx.step('refund-v2', () => `v2:${order}`);
  },
});

async function engineWith(store: MemoryHistoryStore, wf: ReturnType<typeof refundWorkflow> | typeof deprecated): Promise<Engine> {
  const engine = await Engine.open({ store, workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
  cleanups.push(() => engine.shutdown({ graceMs: 100 }));
  return engine;
}

const types = (h: readonly HistoryEvent[]) => h.map((e) => e.type);

describe('ctx.patched', () => {
  it('a new turn records PatchMarked before its first step and takes the new branch (one marker per id)', async () => {
    const ran: string[] = [];
    const engine = await engineWith(new MemoryHistoryStore(), refundWorkflow(ran));
    const h = await engine.start(refundWorkflow(ran), 'o-1');
    expect(await h.result()).toBe('v2:o-1');
    expect(ran).toEqual(['v2']);
    const history = await h.history();
    const marks = history.filter((e) => e.type === 'PatchMarked');
    expect(marks).toEqual([expect.objectContaining({ turn: 1, seq: 1, patchId: 'refund-v2', deprecated: false })]);
    expect(types(history).indexOf('PatchMarked')).toBeLessThan(types(history).indexOf('StepCompleted'));
    expect(history.find((e) => e.type === 'StepCompleted')).toMatchObject({ seq: 2, name: 'refund-v2' });
  });

  it('a turn in flight from before the patch recovers on the old branch: its recorded step comes back, nothing re-runs', async () => {
    const store = new MemoryHistoryStore();
    await store.open();
    const before = historyBuilder('old-1', { start: Date.now() - 1000 }).created({ workflow: 'refund', kind: 'one-shot' }).input('o-2').turnStarted().step('refund-v1', 'v1:o-2').build();
    await store.append('old-1', before, { expectedLastEventId: 0, generation: 1 });
    const ran: string[] = [];
    const engine = await engineWith(store, refundWorkflow(ran));
    let history: HistoryEvent[] = [];
    for (let i = 0; i < 500 && !history.some((e) => e.type === 'TurnCompleted'); i++) {
      await new Promise((r) => setTimeout(r, 10));
      history = await engine.history('old-1');
    }
    const done = history.find((e) => e.type === 'TurnCompleted');
    expect(done?.type === 'TurnCompleted' && JSON.parse(new TextDecoder().decode(done.output!.data))).toBe('v1:o-2');
    expect(ran).toEqual([]);
    expect(history.some((e) => e.type === 'PatchMarked')).toBe(false);
  });

  it('refuses an empty or non-string patch id with TURNLOG_INVALID_ARGUMENT', async () => {
    const bad = defineWorkflow({ name: 'refund', turn: async (ctx) => ctx.patched('') });
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [bad], logger: silentLogger, scanIntervalMs: 0 });
    cleanups.push(() => engine.shutdown({ graceMs: 100 }));
    const err = await (await engine.start(bad, null)).result().catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_TURN_FAILED')).toBe(true);
    expect((err as Error).message).toMatch(/ctx\.patched\(\) needs a non-empty string patch id/);
  });
});

describe('ctx.deprecatePatch', () => {
  it('records a deprecated marker for new turns; replays histories with the marker', async () => {
    const engine = await engineWith(new MemoryHistoryStore(), deprecated);
    const h = await engine.start(deprecated, 'o-3');
    expect(await h.result()).toBe('v2:o-3');
    const history = await h.history();
    expect(history.find((e) => e.type === 'PatchMarked')).toMatchObject({ patchId: 'refund-v2', deprecated: true });
    // Code that still has patched('refund-v2') replays it (a rollback of the cleanup deploy is safe).
    const report = await replayHistory({ history, workflows: [refundWorkflow([])] });
    expect(report.oldPatches).toEqual([]);
  });
});

describe('replay tester: which fixtures still need the old branch', () => {
  const oldTurn = () => historyBuilder('fx').created({ workflow: 'refund', kind: 'one-shot' }).input('o').turnStarted().step('refund-v1', 'v1:o').completed('v1:o').build();
  const newTurn = () =>
    historyBuilder('fx').created({ workflow: 'refund', kind: 'one-shot' }).input('o').turnStarted().patch('refund-v2').step('refund-v2', 'v2:o').completed('v2:o').build();

  it('reports the patch ids a history took old-way, per turn and for the history', async () => {
    const old = await replayHistory({ history: oldTurn(), workflows: [refundWorkflow([])] });
    expect(old.results.map((r) => [r.status, r.oldPatches])).toEqual([['ok', ['refund-v2']]]);
    expect(old.oldPatches).toEqual(['refund-v2']);
    const fresh = await replayHistory({ history: newTurn(), workflows: [refundWorkflow([])] });
    expect(fresh.oldPatches).toEqual([]);
  });

  it('after deprecatePatch, a history that needs the old branch fails to replay (so the report said it was not safe yet)', async () => {
    const err = await replayHistory({ history: oldTurn(), workflows: [deprecated] }).catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_NON_DETERMINISM')).toBe(true);
    await expect(replayHistory({ history: newTurn(), workflows: [deprecated] })).resolves.toMatchObject({ oldPatches: [] });
  });

  it('a marker the code does not ask for at that position is a NonDeterminismError naming it', async () => {
    const noPatch = defineWorkflow({ name: 'refund', turn: async (ctx, order: string) => ctx.step('refund-v2', () => `v2:${order}`) });
    const err = await replayHistory({ history: newTurn(), workflows: [noPatch] }).catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_NON_DETERMINISM')).toBe(true);
    expect((err as Error).message).toContain('patched("refund-v2") at position 1');
  });
});
