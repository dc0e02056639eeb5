/**
 * Runs turns in the engine process: the handler is just awaited, so there is no overhead,
 * and no hard stop either (docs/isolation.md): past the grace the engine finalizes the turn
 * and fences the zombie, whose later records fail.
 */
import { TurnlogError } from '../errors.js';
import { errorToFailure } from '../history/failure.js';
import type { PayloadConverter } from '../history/payload.js';
import type { Workflow } from '../workflow/define-workflow.js';
import { TurnContextImpl, runHandler } from '../attempt/context.js';
import { HOST_AS_IS, type AttemptOutcome, type TurnHost, type TurnSpec } from '../attempt/host.js';
import type { AttemptHandle, Executor } from './executor.js';

/** A settled promise: a reaction on it runs on a later tick. */
const LATER: Promise<void> = Promise.resolve();

export class InlineExecutor implements Executor {
  /** Calls the host's methods on it: given the engine's host object as is (attempt/host.ts, hostFor). */
  static readonly [HOST_AS_IS] = true;
  readonly kind = 'inline' as const;
  readonly #workflows: ReadonlyMap<string, Workflow<any, any, any, any>>;
  readonly #converter: PayloadConverter;

  constructor(workflows: ReadonlyMap<string, Workflow<any, any, any, any>>, converter: PayloadConverter) {
    this.#workflows = workflows;
    this.#converter = converter;
  }

  async start(spec: TurnSpec, host: TurnHost): Promise<AttemptHandle> {
    const wf = this.#workflows.get(spec.workflow);
    if (!wf) {
      throw new TurnlogError(
        'TURNLOG_WORKFLOW_NOT_FOUND',
        `Task ${spec.taskId}: workflow ${spec.workflow} is not registered with this engine. Pass it in Engine.open({ workflows }).`,
      );
    }
    const ctx = new TurnContextImpl(spec, host, this.#converter, wf.initialState);
    // Run on a later tick so the engine finishes its bookkeeping before handler code starts. The
    // outcome is settled by runHandler's own promise: a `.then` resolved with that promise would
    // adopt it (two more promises and hops between the handler's return and the turn's end).
    const converter = this.#converter;
    const outcome = new Promise<AttemptOutcome>((resolve) => {
      const failed = (err: unknown): void => resolve({ kind: 'failed', failure: errorToFailure(err) }); // the handle's outcome never rejects
      void LATER.then(() => {
        try {
          runHandler(wf.turn, ctx, converter).then(resolve, failed);
        } catch (err) {
          failed(err);
        }
      });
    });
    return {
      outcome,
      pid: 0,
      cancel: (kind, reason) => ctx.cancel(kind, reason),
      kill: undefined,
      fence: (detail) => ctx.fence(detail),
    };
  }

  async close(): Promise<void> {}
}
