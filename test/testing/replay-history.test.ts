import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { HistoryInvariantError, NonDeterminismError, isTurnlogError } from '../../src/errors.js';
import type { HistoryEvent } from '../../src/history/events.js';
import { encodeHistoryFile } from '../../src/history/history-file.js';
import { defineWorkflow, type Workflow } from '../../src/workflow/define-workflow.js';
import { ReplayFailuresError, createTestEngine, replayHistories, replayHistory, type TestEngine } from '../../src/testing/index.js';
import { historyBuilder, payload } from '../../src/testing/history-builder.js';
import { createSupportAgent, supportAgent } from '../fixtures/workflows/support-agent.js';
import { goldenPath } from './golden.js';
import { eventAt, insertAfter, loadEvents, mutate, remove, swapSteps } from './mutate.js';

const conversation = () => loadEvents(goldenPath('support-conversation'));
const workflows = [supportAgent];

/** Replays and returns the NonDeterminismError it must throw. */
async function divergence(history: HistoryEvent[], wfs: Parameters<typeof replayHistory>[0]['workflows'] = workflows): Promise<NonDeterminismError> {
  const err = await replayHistory({ history, workflows: wfs, taskId: 'support-conversation' }).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(isTurnlogError(err, 'TURNLOG_NON_DETERMINISM'), `expected NonDeterminismError, got ${String(err)}`).toBe(true);
  return err as NonDeterminismError;
}

const engines: TestEngine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.close();
});
async function testEngine(...wfs: Workflow<any, any, any>[]): Promise<TestEngine> {
  const t = await createTestEngine({ workflows: wfs });
  engines.push(t);
  return t;
}

describe('mutated golden histories throw NonDeterminismError naming the event', () => {
  it('the unmutated history replays (control)', async () => {
    const report = await replayHistory({ history: conversation(), workflows });
    expect(report.turns).toBe(4);
  });

  it('a renamed step: the recorded step event, expected the recorded name, actual the called one', async () => {
    expect(eventAt(conversation(), 7)).toMatchObject({ type: 'StepCompleted', name: 'lookup-order' });
    const err = await divergence(mutate(conversation(), 7, (e) => ({ ...e, name: 'lookup-orders' })));
    expect({ turn: err.turn, eventId: err.eventId, expected: err.expected, actual: err.actual }).toEqual({
      turn: 1,
      eventId: 7,
      expected: 'step "lookup-orders" at position 2',
      actual: 'step "lookup-order"',
    });
    expect(err.message).toContain('Task support-conversation, turn 1, event 7');
  });

  it('reordered steps: the first position where record and code disagree', async () => {
    expect(eventAt(conversation(), 15)).toMatchObject({ name: 'issue-refund' });
    expect(eventAt(conversation(), 17)).toMatchObject({ name: 'draft-reply' });
    const err = await divergence(swapSteps(conversation(), 15, 17));
    expect([err.turn, err.eventId, err.expected, err.actual]).toEqual([2, 15, 'step "draft-reply" at position 3', 'step "issue-refund"']);
  });

  it('a changed output: the terminal event, with both values', async () => {
    const err = await divergence(mutate(conversation(), 18, (e) => ({ ...e, output: payload('a different reply') })));
    expect([err.turn, err.eventId]).toEqual([2, 18]);
    expect(err.expected).toBe('TurnCompleted with output "a different reply"');
    expect(err.actual).toMatch(/^end with output "\(4 msgs\) re /);
  });

  it('a changed state: the terminal event', async () => {
    const e18 = eventAt(conversation(), 18);
    const err = await divergence(mutate(conversation(), 18, () => ({ ...e18, state: payload({ messages: [], refunded: 99 }) }) as HistoryEvent));
    expect([err.turn, err.eventId]).toEqual([2, 18]);
    expect(err.expected).toContain('TurnCompleted with state {"messages":[],"refunded":99}');
  });

  it('a changed failure message and a changed suspend reason: their terminals', async () => {
    const failed = await divergence(
      mutate(conversation(), 24, (e) => (e.type === 'TurnFailed' ? { ...e, failure: { ...e.failure, message: 'refund rejected' } } : e)),
    );
    expect([failed.turn, failed.eventId, failed.expected]).toEqual([3, 24, 'TurnFailed with RefundRejected: refund rejected']);
    expect(failed.actual).toBe('fail with RefundRejected: refund of 5000 is over the limit of 500');
    const suspended = await divergence(mutate(conversation(), 30, (e) => ({ ...e, reason: 'waiting' })));
    expect([suspended.turn, suspended.eventId, suspended.expected, suspended.actual]).toEqual([4, 30, 'TurnSuspended ("waiting")', 'suspend ("conversation-closed")']);
  });

  it('a removed step: the handler calls past the record, at the terminal event', async () => {
    expect(eventAt(conversation(), 29)).toMatchObject({ name: 'draft-reply', turn: 4 });
    const err = await divergence(remove(conversation(), 29));
    expect([err.turn, err.eventId, err.expected, err.actual]).toEqual([
      4,
      29,
      'the end of the turn (TurnSuspended) after 2 calls',
      'step "draft-reply"',
    ]);
  });

  it('an extra recorded step: the handler ends before it, at that step event', async () => {
    const err = await divergence(
      insertAfter(conversation(), 29, { type: 'StepCompleted', time: 0, generation: 1, turn: 4, attempt: 1, seq: 4, name: 'send-survey', result: payload(null), durationMs: 1 }),
    );
    expect([err.turn, err.eventId, err.expected]).toEqual([4, 30, 'step "send-survey" at position 4']);
    expect(err.actual).toBe('end the turn after 3 calls (suspend ("conversation-closed"))');
  });

  it('a missing terminal is a turn cut off mid-way (like a crash): it replays as far as recorded', async () => {
    const events = conversation();
    const report = await replayHistory({ history: events.slice(0, -1), workflows });
    expect(report.results.at(-1)).toMatchObject({ turn: 4, terminal: undefined, status: 'cut-off', eventId: 29 });
    // Cut mid-turn, before draft-reply: the handler asks for it, and the replay stops there.
    const shorter = await replayHistory({ history: events.slice(0, 28), workflows });
    expect(shorter.results.at(-1)).toMatchObject({ turn: 4, status: 'cut-off', outcome: undefined });
  });

  it('a history that breaks an invariant throws HistoryInvariantError, not a replay error', async () => {
    const err = await replayHistory({ history: remove(conversation(), 5).slice(0, 8), workflows }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(HistoryInvariantError);
    expect((err as HistoryInvariantError).rule).toBe('seq-order');
  });
});

describe('changed code against the recorded history', () => {
  it('a new step before draft-reply fails at the first recorded position it takes, and never runs the step', async () => {
    const sentiment = vi.fn(() => 'calm');
    const changed = defineWorkflow<string, string, { messages: unknown[] }>({
      name: 'support-agent',
      kind: 'multi-turn',
      initialState: () => ({ messages: [] }),
      turn: async (ctx, text) => {
        await ctx.step('classify', () => text);
        await ctx.step('check-sentiment', sentiment);
        return 'x';
      },
    });
    const err = await divergence(conversation(), [changed]);
    expect([err.turn, err.eventId, err.expected, err.actual]).toEqual([1, 7, 'step "lookup-order" at position 2', 'step "check-sentiment"']);
    expect(sentiment).not.toHaveBeenCalled();
  });

  it('a handler that swallows the error still fails the replay', async () => {
    const swallowing = defineWorkflow({
      name: 'support-agent',
      kind: 'multi-turn',
      turn: async (ctx) => {
        await ctx.step('classify', () => 'order');
        try {
          await ctx.step('renamed', () => 1);
        } catch {
          // ignored
        }
        return 'done';
      },
    });
    const err = await divergence(conversation(), [swallowing]);
    expect([err.eventId, err.actual]).toEqual([7, 'step "renamed"']);
  });

  it('a workflow that is not given: TURNLOG_WORKFLOW_NOT_FOUND naming it', async () => {
    const other = defineWorkflow({ name: 'other', turn: () => 1 });
    const err = await replayHistory({ history: conversation(), workflows: [other] }).catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_WORKFLOW_NOT_FOUND')).toBe(true);
    expect((err as Error).message).toContain('workflow support-agent');
  });

  it('workflows can be a module namespace (named exports, arrays)', async () => {
    const report = await replayHistory({ history: conversation(), workflows: { supportAgent, unrelated: 42, list: [supportAgent] } });
    expect(report.turns).toBe(4);
  });
});

describe('turns recorded on the test engine', () => {
  it('a one-shot workflow with parallel steps replays', async () => {
    const wf = defineWorkflow({
      name: 'parallel',
      turn: async (ctx, n: number) => {
        const [a, b] = await Promise.all([ctx.step('a', () => n + 1), ctx.step('b', () => n * 2)]);
        return a + b;
      },
    });
    const t = await testEngine(wf);
    const h = await t.engine.start(wf, 5, { taskId: 'p1' });
    expect(await h.result()).toBe(16);
    const report = await t.replay('p1');
    expect(report.results).toEqual([expect.objectContaining({ turn: 1, status: 'ok', outcome: 'completed', calls: 2 })]);
  });

  it('a timeout the handler handles within its grace is delivered at the recorded place', async () => {
    const seen: boolean[] = [];
    const wf = defineWorkflow({
      name: 'graceful',
      turnTimeoutMs: 1000,
      graceMs: 5000,
      retry: { maxAttempts: 1 },
      turn: async (ctx) => {
        seen.push(ctx.timeoutExceeded);
        await ctx.step('fast', () => 1);
        seen.push(ctx.timeoutExceeded);
        const partial = await ctx
          .step('slow', (signal) => new Promise<string>((_, reject) => signal.addEventListener('abort', () => reject(signal.reason))))
          .catch(() => 'partial');
        seen.push(ctx.timeoutExceeded);
        return { partial, late: ctx.timeoutExceeded };
      },
    });
    const t = await testEngine(wf);
    const h = await t.engine.start(wf, null, { taskId: 'g1' });
    await t.advance(1000);
    expect(await h.nextTurn()).toMatchObject({ status: 'completed', output: { partial: 'partial', late: true } });
    const types = (await t.history('g1')).map((e) => e.type);
    expect(types.indexOf('TimeoutCancelRequested')).toBeLessThan(types.lastIndexOf('StepCompleted'));
    seen.length = 0;
    expect((await t.replay('g1')).results[0]).toMatchObject({ status: 'ok', terminal: 'TurnCompleted' });
    expect(seen).toEqual([false, false, true]);
  });

  it('a cancelled turn is cut off and replays', async () => {
    const wf = defineWorkflow({
      name: 'cancellable',
      kind: 'multi-turn',
      turn: async (ctx) => {
        await ctx.step('first', () => 1);
        await ctx.step('wait', (signal) => new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason))));
        return 'never';
      },
    });
    const t = await testEngine(wf);
    const h = await t.engine.start(wf, null, { taskId: 'c1' });
    await t.advance(1);
    await h.cancelTurn('user changed their mind');
    expect((await h.nextTurn()).status).toBe('cancelled');
    expect((await t.replay('c1')).results[0]).toMatchObject({ status: 'cut-off', terminal: 'TurnCancelled' });
  });

  it('payload codecs: the history holds encoded payloads, replay decodes them with the same codecs', async () => {
    // Marks what it encoded (as payload codecs should), so a reader without it fails clearly.
    type P = { metadata: Record<string, Uint8Array>; data: Uint8Array };
    const te = new TextEncoder();
    const codec = {
      encode: (p: P): P => ({ metadata: { encoding: te.encode('test/reversed'), inner: p.metadata['encoding']! }, data: p.data.slice().reverse() }),
      decode: (p: P): P => ({ metadata: { encoding: p.metadata['inner']! }, data: p.data.slice().reverse() }),
    };
    const wf = defineWorkflow({ name: 'coded', turn: async (ctx, s: string) => ctx.step('upper', () => s.toUpperCase()) });
    const t = await createTestEngine({ workflows: [wf], payloadCodecs: [codec] });
    engines.push(t);
    await (await t.engine.start(wf, 'abc', { taskId: 'k1' })).result();
    expect((await t.replay('k1')).turns).toBe(1);
    const history = await t.history('k1');
    const withoutCodec = await replayHistory({ history, workflows: [wf] }).catch((e: unknown) => e);
    expect(isTurnlogError(withoutCodec, 'TURNLOG_PAYLOAD_ENCODING')).toBe(true);
    expect((await replayHistory({ history, workflows: [wf], payloadCodecs: [codec] })).turns).toBe(1);
  });
});

describe('hand-built histories', () => {
  const echo = defineWorkflow({
    name: 'echo',
    kind: 'multi-turn',
    turn: async (ctx, text: string) => {
      const a = await ctx.step('a', () => text);
      const b = await ctx.step('b', () => a);
      return b;
    },
  });

  it('a crash then a recovered attempt: the last attempt is replayed with all calls', async () => {
    const events = historyBuilder('h1')
      .created({ workflow: 'echo', kind: 'multi-turn' })
      .input('hi')
      .turnStarted()
      .step('a', 'hi')
      .crashed()
      .recovered()
      .step('b', 'hi')
      .completed('hi', { completeTask: false })
      .build();
    const report = await replayHistory({ history: events, workflows: [echo], taskId: 'h1' });
    expect(report.results).toEqual([expect.objectContaining({ turn: 1, attempt: 2, status: 'ok' })]);
  });

  it('a turn failed by recovery (recoveries exhausted) is cut off, not compared', async () => {
    const events = historyBuilder('h2')
      .created({ workflow: 'echo', kind: 'multi-turn' })
      .input('hi')
      .turnStarted()
      .step('a', 'hi')
      .crashed()
      .failed({ message: 'worker crashed 3 times', type: 'WorkerCrashed', code: 'TURNLOG_WORKER_CRASHED' }, { completeTask: false })
      .build();
    const report = await replayHistory({ history: events, workflows: [echo], taskId: 'h2' });
    expect(report.results[0]).toMatchObject({ status: 'cut-off', terminal: 'TurnFailed' });
  });

  it('a killed worker (hard cap) is cut off; a call that does not match is still a divergence', async () => {
    const build = (name: string) =>
      historyBuilder('h3')
        .created({ workflow: 'echo', kind: 'multi-turn' })
        .input('hi')
        .turnStarted()
        .step(name, 'hi')
        .marker()
        .killed()
        .timedOut('hard_cap', { completeTask: false })
        .build();
    expect((await replayHistory({ history: build('a'), workflows: [echo] })).results[0]).toMatchObject({ status: 'cut-off' });
    const err = await replayHistory({ history: build('z'), workflows: [echo] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NonDeterminismError);
    expect((err as NonDeterminismError).eventId).toBe(4);
  });
});

describe('replayHistories', () => {
  let dir: string | undefined;
  afterEach(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
    dir = undefined;
  });

  it('reports every failing file, not just the first', async () => {
    dir = await mkdtemp(join(tmpdir(), 'turnlog-replay-'));
    const write = async (name: string, events: HistoryEvent[]) =>
      writeFile(join(dir!, name), await encodeHistoryFile({ taskId: 'support-conversation', events }, name.endsWith('.bin') ? 'binary' : 'json'));
    await write('a-good.json', conversation());
    await write('b-renamed.json', mutate(conversation(), 7, (e) => ({ ...e, name: 'lookup-orders' })));
    await write('c-output.bin', mutate(conversation(), 18, (e) => ({ ...e, output: payload('nope') })));
    await writeFile(join(dir, 'd-garbage.json'), 'not a history');
    await writeFile(join(dir, 'README.md'), 'ignored');
    const err = await replayHistories(dir, workflows).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ReplayFailuresError);
    const f = err as ReplayFailuresError;
    expect(f.failures.map((x) => [x.file.slice(dir!.length + 1), (x.error as { code?: string }).code, (x.error as { eventId?: number }).eventId])).toEqual([
      ['b-renamed.json', 'TURNLOG_NON_DETERMINISM', 7],
      ['c-output.bin', 'TURNLOG_NON_DETERMINISM', 18],
      ['d-garbage.json', 'TURNLOG_HISTORY_FILE', undefined],
    ]);
    expect(f.errors).toHaveLength(3);
    expect(f.report.tasks).toBe(1);
    expect(f.message).toContain('3 of 4 recorded histories failed to replay');
    expect(f.message).toContain('b-renamed.json (task support-conversation): Task support-conversation, turn 1, event 7');
  });

  it('an empty folder is a usage error', async () => {
    dir = await mkdtemp(join(tmpdir(), 'turnlog-replay-'));
    const err = await replayHistories(dir, workflows).catch((e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT')).toBe(true);
  });
});

describe('createTestEngine', () => {
  it('tests a turn timeout without waiting: advance the clock past the deadline', async () => {
    const slow = defineWorkflow({
      name: 'slow',
      turnTimeoutMs: 30_000,
      graceMs: 1_000,
      turn: async (ctx) => ctx.step('never-answers', (signal) => new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)))),
    });
    const t = await testEngine(slow);
    const task = await t.engine.start(slow, null, { taskId: 's1' });
    await t.advance(29_999);
    expect((await t.engine.describe('s1')).status).toBe('in_progress');
    await t.advance(1);
    expect(await task.nextTurn()).toMatchObject({ status: 'timed_out' });
    expect((await t.history('s1')).map((e) => e.type)).toContain('TimeoutCancelRequested');
    expect((await t.replay('s1')).results[0]!.status).toBe('cut-off');
  });

  it('replays a support agent recorded with gated tools using the default tools', async () => {
    const agent = createSupportAgent();
    const t = await testEngine(agent);
    const task = await t.engine.start(agent, 'where is order 1?', { taskId: 'r1' });
    await task.nextTurn();
    await task.send('bye');
    await task.nextTurn();
    expect((await t.replay('r1')).results.map((r) => r.status)).toEqual(['ok', 'ok']);
  });
});

describe('payload limits', () => {
  // The engine's limits (EngineOptions.limits) turn a completed turn or a checkpoint into a
  // TurnFailed the replay cannot reproduce: it does not know the limits. Such a turn is cut off,
  // not a divergence (it was: "recorded TurnFailed but the handler did complete").
  const cases = [
    {
      field: 'output',
      limits: { outputBytes: 100 },
      wf: defineWorkflow({ name: 'big-output', turn: async (ctx, _i: null) => ctx.step('a', () => 1).then(() => 'x'.repeat(500)) }),
    },
    {
      field: 'state',
      limits: { stateBytes: 100 },
      wf: defineWorkflow({
        name: 'big-state',
        initialState: () => '',
        turn: async (ctx, _i: null) => {
          await ctx.step('a', () => 1);
          ctx.state = 's'.repeat(500);
          return 'ok';
        },
      }),
    },
    {
      field: 'checkpoint',
      limits: { checkpointBytes: 100 },
      wf: defineWorkflow({
        name: 'big-checkpoint',
        turn: async (ctx, _i: null) => {
          await ctx.step('a', () => 1);
          await ctx.checkpoint('c'.repeat(500)).catch(() => undefined); // caught: the engine fails the turn anyway
          return 'ok';
        },
      }),
    },
  ];
  for (const c of cases) {
    it(`a turn failed for its ${c.field} over the engine's limit replays as cut off`, async () => {
      const t = await createTestEngine({ workflows: [c.wf], limits: c.limits });
      engines.push(t);
      const r = await (await t.engine.start(c.wf.name, null, { taskId: 'p1' })).nextTurn();
      expect(r).toMatchObject({ status: 'failed', failure: { code: 'TURNLOG_PAYLOAD_TOO_LARGE' } });
      expect((await t.replay('p1')).results[0]).toMatchObject({ status: 'cut-off', terminal: 'TurnFailed', calls: 1 });
    });
  }

  it('a checkpoint refused as not JSON is no call, live or in replay (it took no position)', async () => {
    const wf = defineWorkflow({
      name: 'date-checkpoint',
      turn: async (ctx, _i: null) => {
        const refused = await ctx.checkpoint({ at: new Date(0) } as never).then(() => 'no', (err: unknown) => (err as { code?: string }).code);
        await ctx.step('after', () => 1);
        return refused;
      },
    });
    const t = await createTestEngine({ workflows: [wf] });
    engines.push(t);
    expect(await (await t.engine.start(wf, null, { taskId: 'd1' })).nextTurn()).toMatchObject({ status: 'completed', output: 'TURNLOG_PAYLOAD_ENCODING' });
    // It was: "the history recorded step "after" at position 1 but the handler did checkpoint".
    expect((await t.replay('d1')).results[0]).toMatchObject({ status: 'ok', calls: 1 });
  });

  it('a cut-off turn still checks its recorded calls', async () => {
    const wf = defineWorkflow({ name: 'big-out', turn: async (ctx, _i: null) => ctx.step('a', () => 1).then(() => 'x'.repeat(500)) });
    const t = await createTestEngine({ workflows: [wf], limits: { outputBytes: 100 } });
    engines.push(t);
    await (await t.engine.start(wf, null, { taskId: 'p2' })).nextTurn();
    const changed = defineWorkflow({ name: 'big-out', turn: async (ctx, _i: null) => ctx.step('b', () => 1).then(() => 'x'.repeat(500)) });
    const err = await replayHistory({ history: await t.history('p2'), workflows: [changed] }).then(() => undefined, (e: unknown) => e);
    expect(isTurnlogError(err, 'TURNLOG_NON_DETERMINISM')).toBe(true);
  });
});
