// Tier 3 is at deadline + grace (docs/isolation.md, DESIGN.md "Timeout tiers"), however late the
// deadline timer fires: a blocked event loop or a slow marker append must not push the hard cap
// (and a worker's SIGKILL) later. Real clock; the handler blocks the loop across its deadline.
import { afterEach, describe, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import type { HistoryEvent } from '../../src/history/events.js';

const engines: Engine[] = [];
afterEach(async () => {
  for (const e of engines.splice(0)) await e.shutdown();
});

describe('the hard cap', () => {
  it('is at deadline + graceMs even when the deadline timer fires late: the marker records that time', async () => {
    const TIMEOUT = 100;
    const GRACE = 1_000;
    const wf = defineWorkflow({
      name: 'blocks-past-its-deadline',
      turnTimeoutMs: TIMEOUT,
      graceMs: GRACE,
      turn: async () => {
        // Synchronous work past the deadline: the deadline timer cannot fire until it ends.
        const until = Date.now() + 3 * TIMEOUT;
        while (Date.now() < until);
        await new Promise(() => undefined); // ignores the cancel: only the hard cap ends it
      },
    });
    const engine = await Engine.open({ store: new MemoryHistoryStore(), workflows: [wf], logger: silentLogger, scanIntervalMs: 0 });
    engines.push(engine);
    const h = await engine.start(wf, null);
    await h.result().catch(() => undefined);
    const history = await h.history();
    const started = history.find((e) => e.type === 'TurnStarted') as Extract<HistoryEvent, { type: 'TurnStarted' }>;
    const marker = history.find((e) => e.type === 'TimeoutCancelRequested') as Extract<HistoryEvent, { type: 'TimeoutCancelRequested' }>;
    // The marker came late (the loop was blocked), yet the grace still ends at deadline + graceMs.
    expect(marker.at).toBeGreaterThan(started.deadline);
    expect(marker.graceUntil).toBe(started.deadline + GRACE);
    expect(history.at(-1)?.type).toBe('TaskCompleted');
    expect(history.some((e) => e.type === 'TurnTimedOut')).toBe(true);
  });
});
