/**
 * A lost race on every mutation path: just before the engine's append, another writer appends
 * under the same generation (an input sent through another engine on a shared store), so the
 * engine's append gets a ConcurrencyError. The engine re-reads the task and decides again: the
 * call succeeds, and every input is in the history once and gets its turn (nothing lost, nothing
 * doubled). The race is forced by a store wrapper, once, at the append named in each test.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import { Engine } from '../../src/runtime/engine.js';
import type { Logger } from '../../src/logger.js';
import type { AppendOptions, HistoryStore } from '../../src/store/history-store.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import { created, json } from '../../src/testing/store-events.js';
import { historyBuilder } from '../../src/testing/history-builder.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';

const engines: Engine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown({ graceMs: 0 });
});

function gate() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** Parks a turn whose input is "park" until `release`; every turn echoes its input. */
let parked = gate();
let release = gate();
const chat = defineWorkflow({
  name: 'chat',
  kind: 'multi-turn',
  turn: async (ctx, text: string) => {
    const echoed = await ctx.step('echo', () => `echo ${text}`);
    if (text === 'park') {
      parked.resolve();
      await release.promise;
    }
    return ctx.suspend('waiting', echoed);
  },
});

interface Warn {
  message: string;
  fields: Record<string, unknown>;
}
function logger(warns: Warn[], errors: Warn[]): Logger {
  const none = () => undefined;
  return { debug: none, info: none, warn: (message, fields = {}) => void warns.push({ message, fields }), error: (message, fields = {}) => void errors.push({ message, fields }) };
}

/** A store where, once, another writer appends just before the engine's append that `when` picks. */
function racingStore(inner: MemoryHistoryStore) {
  let when: ((taskId: string, events: readonly HistoryEvent[]) => boolean) | undefined;
  let write: ((taskId: string) => Promise<void>) | undefined;
  let fired = 0;
  const store = new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop === 'append') {
        return async (taskId: string, events: readonly HistoryEvent[], options: AppendOptions) => {
          if (when?.(taskId, events)) {
            when = undefined;
            fired++;
            await write!(taskId);
          }
          return target.append(taskId, events, options);
        };
      }
      const v = Reflect.get(target, prop, receiver) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  }) as HistoryStore;
  return {
    store,
    get fired() {
      return fired;
    },
    /** Arms the race: before the first append whose events include `type`, `other` writes. */
    raceBefore(type: HistoryEvent['type'], other: (taskId: string) => Promise<void>) {
      when = (_taskId, events) => events.some((e) => e.type === type);
      write = other;
    },
  };
}

/** Another engine's send: an InputQueued under the task's current generation. */
async function foreignInput(store: MemoryHistoryStore, taskId: string, inputId: string): Promise<void> {
  const events = await store.readEvents(taskId);
  const last = events[events.length - 1]!;
  const generation = Math.max(...events.map((e) => e.generation));
  const busy = (await store.getSummary(taskId))?.status === 'in_progress';
  const e: HistoryEvent = { type: 'InputQueued', eventId: last.eventId + 1, generation, time: last.time, inputId, input: json(inputId), steering: busy };
  await store.append(taskId, [e], { expectedLastEventId: last.eventId, generation });
}

async function setup(instance = 'A') {
  parked = gate();
  release = gate();
  const inner = new MemoryHistoryStore();
  await inner.open();
  const race = racingStore(inner);
  const warns: Warn[] = [];
  const errors: Warn[] = [];
  const engine = await Engine.open({ store: race.store, workflows: [chat], instance, logger: logger(warns, errors), scanIntervalMs: 0 });
  engines.push(engine);
  return { inner, race, engine, warns, errors };
}

async function queuedIds(store: MemoryHistoryStore, taskId: string): Promise<string[]> {
  return (await store.readEvents(taskId)).flatMap((e) => (e.type === 'InputQueued' ? [e.inputId] : []));
}

/** Input ids by the TurnStarted that took them: each input exactly once means nothing doubled. */
async function takenIds(store: MemoryHistoryStore, taskId: string): Promise<string[]> {
  return (await store.readEvents(taskId)).flatMap((e) => (e.type === 'TurnStarted' && e.attempt === 1 ? e.inputIds : []));
}

const lostRace = (warns: Warn[]) => warns.filter((w) => w.fields['code'] === 'TURNLOG_CONCURRENCY').length;

describe('a lost race on each mutation path: the engine reloads the task and decides again', () => {
  it('start of a new task: another writer created it first; our input goes on top', async () => {
    const { inner, race, engine, warns, errors } = await setup();
    race.raceBefore('TaskCreated', async (taskId) => {
      const c = { ...created(1, { workflow: 'chat', kind: 'multi-turn', generation: 0 }) } as HistoryEvent;
      await inner.append(taskId, [c, { type: 'InputQueued', eventId: 2, generation: 0, time: c.time, inputId: 'theirs', input: json('theirs'), steering: false }], { expectedLastEventId: 0, generation: 0 });
    });
    const h = await engine.start(chat, 'ours', { taskId: 's1', inputId: 'ours' });
    expect(race.fired).toBe(1);
    expect(lostRace(warns)).toBeGreaterThan(0);
    expect(await engine.turnResult('s1', 'ours')).toMatchObject({ status: 'suspended', output: 'echo ours' });
    expect(await h.nextTurn()).toMatchObject({ status: 'suspended', output: 'echo ours' });
    expect(await engine.turnResult('s1', 'theirs')).toMatchObject({ status: 'suspended' });
    expect((await inner.readEvents('s1')).filter((e) => e.type === 'TaskCreated')).toHaveLength(1);
    expect((await queuedIds(inner, 's1')).sort()).toEqual(['ours', 'theirs']);
    expect((await takenIds(inner, 's1')).sort()).toEqual(['ours', 'theirs']);
    expect(errors).toEqual([]);
  });

  it('send: another writer queued an input first; both run once', async () => {
    const { inner, race, engine, errors } = await setup();
    const h = await engine.start(chat, 'first', { taskId: 's2' });
    const first = h.inputId!;
    await h.nextTurn();
    race.raceBefore('InputQueued', (taskId) => foreignInput(inner, taskId, 'theirs'));
    const ours = await h.send('second');
    expect(race.fired).toBe(1);
    expect(await engine.turnResult('s2', ours)).toMatchObject({ status: 'suspended', output: 'echo second' });
    expect(await engine.turnResult('s2', 'theirs')).toMatchObject({ status: 'suspended', output: 'echo theirs' });
    expect((await queuedIds(inner, 's2')).filter((id) => id !== first).sort()).toEqual([ours, 'theirs'].sort());
    const taken = await takenIds(inner, 's2');
    expect(taken).toHaveLength(new Set(taken).size);
    expect(new Set(taken)).toEqual(new Set([first, ours, 'theirs']));
    expect(errors).toEqual([]);
  });

  it('send whose turn start loses the race: the input is written once and its turn starts', async () => {
    const { inner, race, engine, errors } = await setup();
    const h = await engine.start(chat, 'first', { taskId: 's3' });
    await h.nextTurn();
    race.raceBefore('TurnStarted', (taskId) => foreignInput(inner, taskId, 'theirs'));
    const ours = await h.send('second', { inputId: 'ours' });
    expect(race.fired).toBe(1);
    expect(await engine.turnResult('s3', ours)).toMatchObject({ status: 'suspended', output: 'echo second' });
    expect(await engine.turnResult('s3', 'theirs')).toMatchObject({ status: 'suspended', output: 'echo theirs' });
    expect((await queuedIds(inner, 's3')).filter((id) => id === 'ours')).toHaveLength(1);
    const taken = await takenIds(inner, 's3');
    expect(taken.filter((id) => id === 'ours' || id === 'theirs').sort()).toEqual(['ours', 'theirs']);
    expect(errors).toEqual([]);
  });

  it('cancel: another writer queued an input first; the cancel lands once and the task ends cancelled', async () => {
    const { inner, race, engine, errors } = await setup();
    const h = await engine.start(chat, 'first', { taskId: 's4' });
    await h.nextTurn();
    race.raceBefore('CancelRequested', (taskId) => foreignInput(inner, taskId, 'theirs'));
    await engine.cancel('s4', 'stop');
    expect(race.fired).toBe(1);
    const events = await inner.readEvents('s4');
    expect(events.filter((e) => e.type === 'CancelRequested')).toHaveLength(1);
    expect(events.filter((e) => e.type === 'TaskCompleted')).toMatchObject([{ outcome: 'cancelled' }]);
    expect(await queuedIds(inner, 's4')).toContain('theirs');
    expect(errors).toEqual([]);
  });

  it('withdraw: another writer queued an input first; the withdrawal lands once and its waiter resolves', async () => {
    const { inner, race, engine, errors } = await setup();
    const h = await engine.start(chat, 'park', { taskId: 's5' });
    await parked.promise;
    const steer = await h.send('steer');
    const steerResult = engine.turnResult('s5', steer);
    race.raceBefore('InputWithdrawn', (taskId) => foreignInput(inner, taskId, 'theirs'));
    await engine.withdraw('s5', steer, 'not needed');
    expect(race.fired).toBe(1);
    release.resolve();
    expect(await steerResult).toMatchObject({ status: 'withdrawn', reason: 'not needed' });
    expect(await engine.turnResult('s5', 'theirs')).toMatchObject({ status: 'suspended', output: 'echo theirs' });
    expect((await inner.readEvents('s5')).filter((e) => e.type === 'InputWithdrawn')).toHaveLength(1);
    expect(await takenIds(inner, 's5')).not.toContain(steer);
    expect(errors).toEqual([]);
  });

  it('turn start in recovery: another writer queued an input first; the turn starts once', async () => {
    const inner = new MemoryHistoryStore();
    await inner.open();
    // Left in progress by an engine that died.
    const events = historyBuilder('r1', { start: Date.now() }).created({ workflow: 'chat', kind: 'multi-turn' }).input('hi').turnStarted().build();
    await inner.append('r1', events, { expectedLastEventId: 0, generation: events[0]!.generation });
    const race = racingStore(inner);
    race.raceBefore('TurnStarted', (taskId) => foreignInput(inner, taskId, 'theirs'));
    const warns: Warn[] = [];
    const errors: Warn[] = [];
    const engine = await Engine.open({ store: race.store, workflows: [chat], instance: 'B', logger: logger(warns, errors), scanIntervalMs: 0 });
    engines.push(engine);
    await engine.recovered();
    expect(race.fired).toBe(1);
    expect(await engine.turnResult('r1', 'theirs')).toMatchObject({ status: 'suspended', output: 'echo theirs' });
    const after = await inner.readEvents('r1');
    // Turn 1 rerun exactly once (attempt 2), then the foreign input's turn.
    expect(after.filter((e) => e.type === 'TurnStarted').map((e) => (e.type === 'TurnStarted' ? [e.turn, e.attempt] : []))).toEqual([
      [1, 1],
      [1, 2],
      [2, 1],
    ]);
    expect(errors).toEqual([]);
  });

  it('outcome: another writer queued an input first; the turn ends once and the input gets the next turn', async () => {
    const { inner, race, engine, errors } = await setup();
    const h = await engine.start(chat, 'park', { taskId: 's6' });
    const first = h.inputId!;
    await parked.promise;
    race.raceBefore('TurnSuspended', (taskId) => foreignInput(inner, taskId, 'theirs'));
    release.resolve();
    expect(await h.nextTurn()).toMatchObject({ status: 'suspended', output: 'echo park' });
    expect(race.fired).toBe(1);
    expect(await engine.turnResult('s6', 'theirs')).toMatchObject({ status: 'suspended', output: 'echo theirs' });
    const after = await inner.readEvents('s6');
    expect(after.filter((e) => e.type === 'TurnSuspended')).toHaveLength(2);
    expect(await takenIds(inner, 's6')).toEqual([first, 'theirs']);
    expect(errors).toEqual([]);
  });

  it('step record: another writer queued an input first; the step is recorded once', async () => {
    const { inner, race, engine, errors } = await setup();
    race.raceBefore('StepCompleted', (taskId) => foreignInput(inner, taskId, 'theirs'));
    const h = await engine.start(chat, 'first', { taskId: 's7' });
    expect(await h.nextTurn()).toMatchObject({ status: 'suspended', output: 'echo first' });
    expect(race.fired).toBe(1);
    expect(await engine.turnResult('s7', 'theirs')).toMatchObject({ status: 'suspended', output: 'echo theirs' });
    const steps = (await inner.readEvents('s7')).filter((e) => e.type === 'StepCompleted' && e.turn === 1);
    expect(steps).toHaveLength(1);
    expect(errors).toEqual([]);
  });
});
