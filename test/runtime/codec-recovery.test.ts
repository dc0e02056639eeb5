/**
 * Review probe: a payload codec applies on every path, including inputs taken by a turn and
 * replayed to a recovered attempt after exit-for-recovery.
 */
import { describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import type { Payload } from '../../src/history/events.js';
import type { PayloadCodec } from '../../src/history/payload.js';

const xor: PayloadCodec = {
  encode: (p: Payload) => ({ metadata: { ...p.metadata, enc: new TextEncoder().encode('xor') }, data: p.data.map((b) => b ^ 0x5a) }),
  decode: (p: Payload) => {
    const { enc: _enc, ...metadata } = p.metadata;
    return { metadata, data: p.data.map((b) => b ^ 0x5a) };
  },
};

describe('review: codecs across takeInputs and recovery', () => {
  it('a recovered attempt gets the taken inputs and step results decoded', async () => {
    const seen: unknown[] = [];
    let proceed!: () => void;
    const go = new Promise<void>((r) => (proceed = r));
    let started = false;
    const wf = defineWorkflow({
      name: 'taker',
      kind: 'multi-turn',
      turn: async (ctx, first: { n: number }) => {
        started = true;
        if (ctx.attempt === 1) await go;
        const taken = await ctx.takeInputs<{ n: number }>();
        const s = await ctx.step('sum', () => ({ total: first.n + taken.reduce((a, x) => a + x.n, 0) }));
        seen.push({ attempt: ctx.attempt, first, taken, s });
        if (ctx.shutdownRequested) return ctx.exitForRecovery();
        return s;
      },
    });
    const store = new MemoryHistoryStore();
    const e1 = await Engine.open({ store, workflows: [wf], logger: silentLogger, scanIntervalMs: 0, payloadCodecs: [xor] });
    const h = await e1.start(wf, { n: 1 }, { taskId: 't' });
    for (let i = 0; i < 500 && !started; i++) await new Promise((r) => setTimeout(r, 2));
    await h.send({ n: 2 });
    const stopping = e1.shutdown({ graceMs: 5000 });
    proceed();
    await stopping;
    const raw = await store.readEvents('t');
    expect(raw.some((e) => e.type === 'TurnExitedForRecovery')).toBe(true);
    for (const e of raw) if (e.type === 'InputQueued') expect(new TextDecoder().decode(e.input.metadata['enc'])).toBe('xor');
    const e2 = await Engine.open({ store, workflows: [wf], logger: silentLogger, scanIntervalMs: 0, payloadCodecs: [xor] });
    try {
      const r = await e2.turnResult('t', (await e2.describe('t')).lastInputId!);
      expect(r).toMatchObject({ status: 'completed', output: { total: 3 } });
      expect(seen).toEqual([
        { attempt: 1, first: { n: 1 }, taken: [{ n: 2 }], s: { total: 3 } },
        { attempt: 2, first: { n: 1 }, taken: [{ n: 2 }], s: { total: 3 } },
      ]);
    } finally {
      await e2.shutdown({ graceMs: 0 });
    }
  });
});
