/**
 * The chat server's agent: a fake model that writes its answer token by token (`ctx.emit`, live),
 * calls a refund tool as a recorded step (durable, issued once), then answers the steering
 * messages that arrived while it was talking. Deterministic, like a recorded LLM.
 */
import { appendFileSync, existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { defineWorkflow } from '../../src/workflow/index.js';

/** Where the refund "payment API" writes (one JSON line per refund); set by the server. */
export const ledger = { dir: process.env['CHAT_DATA'] ?? '.chat-data' };
/** Delay between tokens; the browser test sets it so it can act mid-answer. */
const TOKEN_MS = Number(process.env['CHAT_TOKEN_MS'] ?? 60);

export interface Refund {
  key: string;
  orderId: string;
  amount: number;
}

/** The payment API: idempotent by key, so even a step re-run after a crash refunds once. */
export function issueRefund(r: Refund): Refund {
  const file = join(ledger.dir, 'refunds.jsonl');
  if (!refunds().some((x) => x.key === r.key)) appendFileSync(file, `${JSON.stringify(r)}\n`);
  return r;
}

export function refunds(): Refund[] {
  const file = join(ledger.dir, 'refunds.jsonl');
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Refund);
}

/** The fake model's answer to a message, as tokens. */
function tokens(text: string): string[] {
  return text.split(/(?<= )/);
}

async function say(ctx: { emit(chunk: string): void; signal: AbortSignal }, text: string): Promise<void> {
  for (const token of tokens(text)) {
    await delay(TOKEN_MS, undefined, { signal: ctx.signal });
    ctx.emit(token);
  }
}

export const chat = defineWorkflow({
  name: 'chat',
  kind: 'multi-turn',
  turn: async (ctx, message: string) => {
    const order = /\d{3,}/.exec(message)?.[0] ?? '1042';
    await say(ctx, `I'm sorry to hear about order ${order}. Let me look into it and issue a refund for you. `);
    const refund = await ctx.step('refund', () => issueRefund({ key: ctx.idempotencyKey('refund'), orderId: order, amount: 42 }));
    await say(ctx, `Done: I refunded $${refund.amount} for order ${refund.orderId}. You'll see it on your card in 3 to 5 days. `);
    // Messages sent while the answer was written (steering): taken, recorded, answered.
    const more = await ctx.takeInputs<string>();
    for (const m of more) await say(ctx, `You also said "${m}": noted, I added it to your case. `);
    return ctx.suspend('waiting for the next message', { refund, steering: more });
  },
});
