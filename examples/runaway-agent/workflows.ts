// The workflows module the worker processes import (ProcessExecutor({ workflowsModule })).
import { defineWorkflow } from '../../src/workflow/define-workflow.js';

/** A "tool" that hangs: a synchronous busy loop no AbortSignal can interrupt (think: a native call). */
function hangingTool(): never {
  for (;;) {
    // blocks the worker's event loop
  }
}

export const researchAgent = defineWorkflow({
  name: 'runaway-research-agent',
  executor: 'process',
  turnTimeoutMs: 1000,
  graceMs: 500,
  turn: async (ctx, question: string) => {
    const plan = await ctx.step('plan', () => [`search: ${question}`, 'summarize']);
    // ctx.signal will abort at the timeout, but this loop never yields to notice.
    hangingTool();
    return plan;
  },
});
