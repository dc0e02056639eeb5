// State migrations through the engine on LevelDB (docs/versioning.md#state-migrations): a deploy
// of a new workflow version migrates an old task's state once, records it (StateMigrated), and
// replay, reload and fold take the record; a newer state is refused; a failing hook fails the turn.
import { afterEach, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { isTurnlogError } from '../../src/errors.js';
import { silentLogger } from '../../src/logger.js';
import { encodeState } from '../../src/history/state-codec.js';
import { fold } from '../../src/replay/fold.js';
import { Engine } from '../../src/runtime/engine.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { replayHistory } from '../../src/testing/replay-history.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Version 1 keeps the messages as strings. */
const v1 = defineWorkflow({
  name: 'chat',
  kind: 'multi-turn',
  version: 1,
  initialState: () => ({ messages: [] as string[] }),
  turn: async (ctx, text: string) => {
    ctx.state.messages.push(text);
    return ctx.state.messages.length;
  },
});

interface V2State {
  log: { role: string; text: string }[];
}
const hookCalls: number[] = [];
/** Version 2 keeps them as records; the hook converts a version-1 state. */
function v2(hook: (state: unknown, from: number) => V2State = toV2) {
  return defineWorkflow({
    name: 'chat',
    kind: 'multi-turn',
    version: 2,
    initialState: (): V2State => ({ log: [] }),
    migrateState: (state, from) => {
      hookCalls.push(from);
      return hook(state, from);
    },
    turn: async (ctx, text: string) => {
      ctx.state.log.push({ role: 'user', text });
      return ctx.state.log.map((m) => m.text).join(' | ');
    },
  });
}
function toV2(state: unknown): V2State {
  return { log: (state as { messages: string[] }).messages.map((text) => ({ role: 'user', text })) };
}

async function storeDir(): Promise<string> {
  const d = await makeTmpDir('turnlog-migrate-');
  cleanups.push(() => d.remove());
  return join(d.path, 'store');
}

interface Opened {
  engine: Engine;
  store: LevelHistoryStore;
  /** Shuts the engine down and closes the store (the engine does not close a store it was given). */
  stop(): Promise<void>;
}

async function open(dir: string, workflow: ReturnType<typeof v2> | typeof v1): Promise<Opened> {
  const store = new LevelHistoryStore(dir);
  const engine = await Engine.open({ store, workflows: [workflow], logger: silentLogger, scanIntervalMs: 0 });
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await engine.shutdown({ graceMs: 0 });
    await store.close();
  };
  cleanups.push(stop);
  return { engine, store, stop };
}

/** Two turns under version 1, then the engine stops (a deploy). */
async function recordV1(dir: string): Promise<void> {
  const { engine, stop } = await open(dir, v1);
  await (await engine.start(v1, 'hello', { taskId: 'c' })).nextTurn();
  await engine.turnResult('c', await engine.sendInput('c', 'book a flight'));
  await stop();
}

describe('state migration (LevelDB)', () => {
  it('migrates once when the new version takes its first turn, and records it before that TurnStarted', async () => {
    const dir = await storeDir();
    await recordV1(dir);
    hookCalls.length = 0;
    const wf = v2();
    const { engine, store } = await open(dir, wf);
    const r = await engine.turnResult('c', await engine.sendInput('c', 'to Paris'));
    expect(r.output).toBe('hello | book a flight | to Paris');
    await engine.turnResult('c', await engine.sendInput('c', 'in May'));
    expect(hookCalls).toEqual([1]);
    const events = await store.readEvents('c');
    const migrated = events.filter((e) => e.type === 'StateMigrated');
    expect(migrated).toHaveLength(1);
    const m = migrated[0]!;
    expect(m).toMatchObject({ fromVersion: 1, toVersion: 2 });
    const next = events[events.indexOf(m) + 1]!;
    expect(next).toMatchObject({ type: 'TurnStarted', turn: 3, workflowVersion: 2 });
    // The fold (and so recovery, describe, replay) takes the recorded state.
    const s = fold('c', events);
    expect(s.stateVersion).toBe(2);
    expect((await engine.describe('c')).state).toEqual({
      log: ['hello', 'book a flight', 'to Paris', 'in May'].map((text) => ({ role: 'user', text })),
    });
    // The replay tester replays turns 3 and 4 on the migrated state, without the hook; turns 1
    // and 2 ran version 1 on the old shape, which this code never runs on.
    const report = await replayHistory({ history: events, workflows: [wf] });
    expect(report.results.map((x) => [x.turn, x.status])).toEqual([[1, 'older-version'], [2, 'older-version'], [3, 'ok'], [4, 'ok']]);
    // Version 1 replays its own turns (it has no hook, so it tries them all; the later ones differ).
    await expect(replayHistory({ history: events.slice(0, events.indexOf(m)), workflows: [v1] })).resolves.toMatchObject({ turns: 2 });
    expect(hookCalls).toEqual([1]);
  });

  it('a reopened engine does not migrate again (the version is in the snapshot and the history)', async () => {
    const dir = await storeDir();
    await recordV1(dir);
    hookCalls.length = 0;
    const first = await open(dir, v2());
    await first.engine.turnResult('c', await first.engine.sendInput('c', 'to Paris'));
    await first.stop();
    const { engine, store } = await open(dir, v2());
    await engine.turnResult('c', await engine.sendInput('c', 'in May'));
    expect(hookCalls).toEqual([1]);
    expect((await store.readEvents('c')).filter((e) => e.type === 'StateMigrated')).toHaveLength(1);
  });

  it('a state of a newer version is refused on send (TURNLOG_STATE_VERSION_NEWER), nothing written', async () => {
    const dir = await storeDir();
    await recordV1(dir);
    const newer = await open(dir, v2());
    await newer.engine.turnResult('c', await newer.engine.sendInput('c', 'to Paris'));
    await newer.stop();
    // A rollback to version 1.
    const { engine, store } = await open(dir, v1);
    const before = (await store.readEvents('c')).length;
    const err = await engine.sendInput('c', 'again').catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_STATE_VERSION_NEWER')).toBe(true);
    expect((err as Error).message).toMatch(/Task c: .*version 2, newer than this code's version 1.*Deploy the newer code/);
    expect(await store.readEvents('c')).toHaveLength(before);
  });

  it('an input queued by newer code waits for it: an older engine leaves the task untouched', async () => {
    const dir = await storeDir();
    await recordV1(dir);
    const newer = await open(dir, v2());
    await newer.engine.turnResult('c', await newer.engine.sendInput('c', 'to Paris'));
    await newer.stop();
    // Queue an input by hand (as a newer engine's send that crashed before its turn started).
    const raw = new LevelHistoryStore(dir);
    await raw.open();
    const events = await raw.readEvents('c');
    const last = events.at(-1)!;
    const input = events.find((e) => e.type === 'InputQueued')!;
    await raw.append('c', [{ ...input, eventId: last.eventId + 1, inputId: 'late', generation: last.generation }], { expectedLastEventId: last.eventId, generation: last.generation });
    await raw.close();
    const { engine, store } = await open(dir, v1);
    await engine.recover();
    expect((await store.readEvents('c')).length).toBe(last.eventId + 1);
    expect((await engine.describe('c')).queuedInputIds).toEqual(['late']);
  });

  it('a hook that throws fails the turn (TURNLOG_STATE_MIGRATION_FAILED) and keeps the stored state; a fixed hook migrates next time', async () => {
    const dir = await storeDir();
    await recordV1(dir);
    hookCalls.length = 0;
    const broken = await open(dir, v2(() => {
      throw new Error('unexpected shape');
    }));
    const r = await broken.engine.turnResult('c', await broken.engine.sendInput('c', 'to Paris'));
    expect(r.status).toBe('failed');
    expect(r.failure).toMatchObject({ code: 'TURNLOG_STATE_MIGRATION_FAILED', cause: { message: 'unexpected shape' } });
    expect(r.failure!.message).toMatch(/Task c: the migrateState hook of workflow chat \(version 1 → 2\) failed: unexpected shape/);
    expect((await broken.engine.describe('c')).state).toEqual({ messages: ['hello', 'book a flight'] });
    const events = await broken.store.readEvents('c');
    expect(events.filter((e) => e.type === 'StateMigrated')).toEqual([]);
    // The failed turn started under version 2 but wrote no state: the state is still of version 1.
    expect(fold('c', events).stateVersion).toBe(1);
    await broken.stop();
    const fixed = await open(dir, v2());
    const again = await fixed.engine.turnResult('c', await fixed.engine.sendInput('c', 'to Paris'));
    expect(again.output).toBe('hello | book a flight | to Paris');
    expect(hookCalls).toEqual([1, 1]);
  });

  it('a snapshot written before state versions is not trusted for the version: the hook still gets version 1', async () => {
    const dir = await storeDir();
    await recordV1(dir);
    // What an older build left: a snapshot at the last event, without state_version.
    const raw = new LevelHistoryStore(dir);
    await raw.open();
    const old = fold('c', await raw.readEvents('c'));
    delete old.stateVersion;
    await raw.putSnapshot('c', { eventId: old.lastEventId, data: encodeState(old) });
    await raw.close();
    hookCalls.length = 0;
    const { engine } = await open(dir, v2());
    await engine.turnResult('c', await engine.sendInput('c', 'to Paris'));
    expect(hookCalls).toEqual([1]);
  });
});
