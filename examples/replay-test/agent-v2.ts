/**
 * The change that breaks replay: v2 screens every message with a moderation step before the
 * agent runs. Harmless for new conversations, but every recorded turn starts with `model#1`,
 * so a task recorded by v1 and recovered (or replayed) by v2 no longer lines up.
 */
import { defineWorkflow } from '../../src/index.js';
import { supportAgent, type SupportState } from '../support-agent/agent.js';

export const supportAgentV2 = defineWorkflow<string, unknown, SupportState>({
  name: supportAgent.name,
  kind: 'multi-turn',
  initialState: supportAgent.initialState!,
  turn: async (ctx, text) => {
    await ctx.step('moderate', () => ({ flagged: /refund.*now!!/i.test(text) }));
    return supportAgent.turn(ctx, text);
  },
});
