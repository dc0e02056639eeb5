/**
 * A multi-turn support agent with a scripted fake model (no network): each turn asks the
 * "model" what to do, runs its tool calls as recorded steps, takes steering messages that
 * arrive mid-turn, and keeps the conversation in durable task state.
 */
import { defineWorkflow, type TurnContext } from '../../src/workflow/index.js';

export interface Message {
  role: 'user' | 'assistant' | 'tool';
  text: string;
}

export interface SupportState {
  messages: Message[];
  refunds: string[];
}

type ModelAction = { tool: 'lookup_order' | 'issue_refund' | 'issue_credit'; orderId: string } | { reply: string };

/** The scripted model: decides from the conversation so far. Deterministic, like a recorded LLM. */
export function fakeModel(messages: readonly Message[]): ModelAction {
  const user = messages.filter((m) => m.role === 'user').map((m) => m.text.toLowerCase());
  const last = user.at(-1) ?? '';
  const tools = messages.filter((m) => m.role === 'tool').map((m) => m.text);
  const orderId = /\b(\d{4})\b/.exec(user.join(' '))?.[1] ?? 'unknown';
  const lastTool = messages.at(-1)?.role === 'tool' ? messages.at(-1)!.text : undefined;
  if (lastTool) return { reply: summarize(lastTool) };
  if (last.includes('where') && !tools.some((t) => t.startsWith(`order ${orderId}:`))) return { tool: 'lookup_order', orderId };
  if (last.includes('credit')) return { tool: 'issue_credit', orderId };
  if (last.includes('refund')) return { tool: 'issue_refund', orderId };
  return { reply: 'Happy to help. Anything else?' };
}

function summarize(toolResult: string): string {
  if (toolResult.includes('in transit')) return `Your order is on its way: ${toolResult}.`;
  if (toolResult.startsWith('refund')) return `Done: ${toolResult}. You'll see it in 3-5 days.`;
  if (toolResult.startsWith('credit')) return `Done: ${toolResult}. It's already on your account.`;
  return toolResult;
}

/** Tools the agent can call. Real ones would hit an order system; these are deterministic. */
export const tools = {
  lookup_order: async (orderId: string) => `order ${orderId}: in transit, ETA 2 days`,
  issue_refund: async (orderId: string) => `refund R-${orderId} of $42.00`,
  issue_credit: async (orderId: string) => `credit C-${orderId} of $45.00`,
};

/** Simulated model latency; steering messages can land while a turn "thinks". */
export const timing = { modelLatencyMs: 30 };

export const supportAgent = defineWorkflow({
  name: 'support-agent',
  kind: 'multi-turn',
  turnTimeoutMs: 60_000,
  graceMs: 5_000,
  retry: { maxAttempts: 3, initialIntervalMs: 50 },
  initialState: (): SupportState => ({ messages: [], refunds: [] }),
  turn: async (ctx: TurnContext<string, SupportState>, text: string) => {
    const messages = ctx.state.messages;
    messages.push({ role: 'user', text });
    for (let round = 1; round <= 4; round++) {
      // The model call is a step: a recovered attempt gets the recorded answer back.
      const action = await ctx.step(`model#${round}`, async (signal) => {
        await sleep(timing.modelLatencyMs, signal);
        return fakeModel(messages);
      });
      // Messages sent while the model was thinking steer this same turn.
      if (ctx.pendingInputCount > 0) {
        for (const steer of await ctx.takeInputs<string>()) messages.push({ role: 'user', text: steer });
        continue;
      }
      if ('reply' in action) {
        messages.push({ role: 'assistant', text: action.reply });
        return action.reply;
      }
      const result = await ctx.step(action.tool, () => tools[action.tool](action.orderId));
      messages.push({ role: 'tool', text: result });
      if (action.tool !== 'lookup_order') ctx.state.refunds.push(result);
      await ctx.checkpoint({ round, tool: action.tool });
    }
    return ctx.suspend('needs-human', 'Let me get a human to look at this.');
  },
});

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => (clearTimeout(t), reject(signal.reason)), { once: true });
  });
}
