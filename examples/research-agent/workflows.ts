// A lead researcher and its sub-agents: the lead (in a worker process) fans a question out to
// three specialist child tasks, awaits them durably, and writes the brief from their notes.
// Loaded by the engine and by its process workers (turnlog/workflow only).
import { ChildFailedError, defineWorkflow } from '../../src/workflow/index.js';

export interface Assignment {
  question: string;
  angle: string;
}

/** A specialist sub-agent: one angle of the question (a stand-in for a model call). */
export const specialist = defineWorkflow({
  name: 'specialist',
  retry: { maxAttempts: 2, initialIntervalMs: 10 },
  turn: async (ctx, a: Assignment) => {
    if (a.angle === 'regulation') throw new Error(`no sources on the regulation of ${a.question}`);
    return ctx.step('research', () => `${a.angle}: 3 findings on ${a.question}`);
  },
});

/** The lead: starts one specialist per angle (recorded), then awaits each outcome (recorded). */
export const lead = defineWorkflow({
  name: 'lead-researcher',
  executor: 'process',
  turnTimeoutMs: 60_000,
  turn: async (ctx, question: string) => {
    const angles = ['cost', 'adoption', 'regulation'];
    const children = [];
    for (const angle of angles) children.push(await ctx.startChild(specialist, { question, angle }));
    const notes: string[] = [];
    for (const child of children) {
      try {
        notes.push(await child.result());
      } catch (err) {
        // A failed sub-agent is recorded like any outcome: the brief says what is missing.
        if (!(err instanceof ChildFailedError)) throw err;
        notes.push(`(${err.childId} ${err.status}: ${(err.cause as Error | undefined)?.message ?? ''})`);
      }
    }
    return ctx.step('brief', () => ({ question, notes }));
  },
});
