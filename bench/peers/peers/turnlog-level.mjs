/**
 * turnlog on a store given by `open(store)`: a LevelDB directory (turnlog-level) or a
 * postgres:// URL (turnlog-pg). Inline executor, sync writes, the engine's defaults otherwise.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Engine, silentLogger, decodeEvent } from '../../../dist/src/index.js';
import { replayHistory } from '../../../dist/src/testing/index.js';
import { defineWorkflow, encodeEvent, hundredStepHistory, hundredSteps } from './common.mjs';

const many = defineWorkflow({
  name: 'many-steps',
  turn: async (ctx) => {
    for (let i = 0; i < 100; i++) await ctx.step('s', () => i);
    return 100;
  },
});
const one = defineWorkflow({ name: 'one-step', turn: (ctx, x) => ctx.step('s', () => x + 1) });
const chat = defineWorkflow({ name: 'chat', kind: 'multi-turn', turn: (ctx, x) => ctx.step('s', () => x + 1) });

export async function openTurnlog(store) {
  const engine = await Engine.open({ store, workflows: [many, one, chat, hundredSteps], logger: silentLogger, scanIntervalMs: 0 });
  const stored = hundredStepHistory().map(encodeEvent);
  return {
    engine,
    workflow100: async () => (await engine.start(many, null)).result(),
    oneStep: async (i) => (await engine.start(one, i)).result(),
    async conversations(n) {
      const hs = await Promise.all(Array.from({ length: n }, (_, i) => engine.start(chat, i)));
      await Promise.all(hs.map((h) => h.nextTurn()));
      return hs;
    },
    turn: async (h, i) => h.turnResult(await h.send(i)),
    async replay100() {
      const history = stored.map((b) => decodeEvent(b, 'bench-100'));
      await replayHistory({ history, workflows: [hundredSteps] });
      return history.length;
    },
    close: () => engine.shutdown(),
  };
}

export const info = { label: 'turnlog (LevelDB)', notes: 'inline executor, sync LevelDB writes, group commit' };

export async function open() {
  const dir = mkdtempSync(join(tmpdir(), 'turnlog-peers-level-'));
  const t = await openTurnlog(join(dir, 'store'));
  return {
    ...t,
    async close() {
      await t.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
