// The refund agent: plans a refund, then waits (durably, with a deadline) for a human's approval
// before paying. Loaded by the engine and by its process workers (turnlog/workflow only).
import { defineWorkflow } from '../../src/workflow/index.js';

export interface RefundRequest {
  orderId: string;
  amount: number;
  /** How long a human has to decide, in ms. */
  approvalTimeoutMs: number;
}
export interface Approval {
  approved: boolean;
  by: string;
}

export const refundAgent = defineWorkflow({
  name: 'refund-agent',
  executor: 'process',
  turnTimeoutMs: 60_000,
  turn: async (ctx, req: RefundRequest) => {
    const plan = await ctx.step('plan', () => ({ orderId: req.orderId, amount: req.amount, reason: 'damaged item' }));
    // Recorded: a crash here re-runs the turn, which waits only what is left of the deadline.
    const answer = await ctx.waitFor<Approval>('approval', { timeoutMs: req.approvalTimeoutMs });
    if (!answer.ok) return { status: 'expired', orderId: plan.orderId };
    if (!answer.value.approved) return { status: 'refused', orderId: plan.orderId, by: answer.value.by };
    const receipt = await ctx.step('pay', () => `rf-${plan.orderId}-${plan.amount}`);
    return { status: 'refunded', orderId: plan.orderId, by: answer.value.by, receipt };
  },
});
