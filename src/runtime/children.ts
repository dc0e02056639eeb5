/**
 * Child tasks (ctx.startChild, docs/children.md): what the engine does for a parent's child
 * records before it appends them — create the child task (or find it again on a re-run), wait
 * for its first turn's result — and the cascade of a parent's cancel to its children. The
 * decisions (conflict, outcome) are pure functions below; the engine hands in its task API.
 */
import { ChildConflictError, isTurnlogError } from '../errors.js';
import type { ChildStatus, Payload, TaskParent } from '../history/events.js';
import type { ChildOutcome, TaskState } from '../history/state.js';
import type { TurnResult } from '../client/task-client.js';
import type { Runtime } from './runtime.js';

/** The input id of a child's first input: its outcome is the result of the turn that takes it. */
export const CHILD_INPUT_ID = 'child-input';

/** Why task `s` cannot be the child `parent` asks for, or undefined when it is that child (a re-run). */
export function childConflict(s: TaskState, parent: TaskParent, workflow: string): string | undefined {
  if (!s.parent) return 'it was not started as a child task';
  if (s.parent.taskId !== parent.taskId) return `it is a child of task ${s.parent.taskId}`;
  if (s.workflow !== workflow) return `it runs workflow ${s.workflow}, not ${workflow}`;
  if (s.parent.turn !== parent.turn || s.parent.seq !== parent.seq) {
    return `it was started by turn ${s.parent.turn}, call ${s.parent.seq} of this task (this is turn ${parent.turn}, call ${parent.seq})`;
  }
  return undefined;
}

/** A child's turn result as the outcome its parent records (output re-encoded as a plain payload). */
export function childOutcome(r: TurnResult, toPayload: (v: unknown) => Payload): ChildOutcome {
  const status: ChildStatus = r.status === 'withdrawn' ? 'cancelled' : r.status;
  const o: ChildOutcome = { status };
  if ((status === 'completed' || status === 'suspended') && r.output !== undefined) o.output = toPayload(r.output);
  if (r.failure) o.failure = r.failure;
  if (r.reason !== undefined && status !== 'completed') o.reason = r.reason;
  return o;
}

/** The children a cancel of `s` reaches: started with cancelWithParent, not seen to end. */
export function childrenToCancel(s: TaskState): string[] {
  return (s.children ?? []).filter((c) => !c.detached && c.status === undefined).map((c) => c.childId);
}

/** What the engine lends the child operations. */
export interface ChildTaskApi {
  /** Creates task `childId` with `parent` in its TaskCreated and `input` as CHILD_INPUT_ID, or hands its state when it exists. */
  create(childId: string, workflow: string, input: Payload, parent: TaskParent): Promise<TaskState | undefined>;
  turnResult(taskId: string, inputId: string): Promise<TurnResult>;
  cancel(taskId: string, reason: string): Promise<void>;
}

export class Children {
  readonly #rt: Runtime;
  readonly #api: ChildTaskApi;

  constructor(rt: Runtime, api: ChildTaskApi) {
    this.#rt = rt;
    this.#api = api;
  }

  /** Before ChildStarted: the child exists (created now, or by an earlier attempt) and is this call's. */
  async start(parent: TaskParent, childId: string, workflow: string, input: Payload): Promise<void> {
    const existing = await this.#api.create(childId, workflow, input, parent);
    const why = existing && childConflict(existing, parent, workflow);
    if (why) throw new ChildConflictError(parent.taskId, childId, why);
  }

  /** Before ChildEnded: waits for the child's first turn to end (or `stop` to abort). */
  async outcome(childId: string, stop: AbortSignal): Promise<ChildOutcome> {
    const result = this.#api.turnResult(childId, CHILD_INPUT_ID);
    result.catch(() => undefined);
    const r = await new Promise<TurnResult>((resolve, reject) => {
      if (stop.aborted) return reject(stop.reason);
      const onStop = (): void => reject(stop.reason);
      stop.addEventListener('abort', onStop, { once: true });
      result.then(resolve, reject).finally(() => stop.removeEventListener('abort', onStop));
    });
    return childOutcome(r, (v) => this.#rt.converter.toPayload(v));
  }

  /** After a task cancel of `s` is durable: cancels its attached children (each cascades on). */
  async cascade(s: TaskState | undefined, reason: string): Promise<void> {
    if (!s) return;
    for (const id of childrenToCancel(s)) {
      await this.#api.cancel(id, `parent ${s.taskId} cancelled: ${reason}`).catch((err) => {
        if (!isTurnlogError(err, 'TURNLOG_TASK_NOT_FOUND')) this.#rt.log.warn('cancelling a child with its parent failed', { taskId: id, parentId: s.taskId, error: err });
      });
    }
  }
}
