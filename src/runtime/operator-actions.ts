/**
 * Operator actions carried out (docs/cli.md#operator-actions): `cancel`, `withdraw`, `resend`,
 * `resume` from the CLI, the inspection socket or an operator engine (Engine.openForOperator),
 * each recorded as an `OperatorAction` in the same append as its effect. The pure part (which
 * inputs a failed turn took, the draft) is operator.ts; the effects are cancels.ts and inputs.ts.
 */
import { nanoid } from 'nanoid';
import { invalidArgument, isTurnlogError, taskNotFound } from '../errors.js';
import type { OperatorActionKind, Payload } from '../history/events.js';
import type { TaskState } from '../history/state.js';
import type { Workflow } from '../workflow/define-workflow.js';
import type { Cancels } from './cancels.js';
import type { Inputs } from './inputs.js';
import { failedTurnInputs, operatorDraft, type ActionArgs } from './operator.js';
import type { Runtime } from './runtime.js';
import type { TaskCache } from './task-cache.js';

/** What an operator action did (the CLI prints `message`; `--json` prints the whole object). */
export interface OperatorResult {
  action: OperatorActionKind;
  taskId: string;
  /** False when there was nothing to do (a cancel of a task that already ended). */
  done: boolean;
  message: string;
  /** resend/resume: the turn re-sent and the new inputs' ids. */
  turn?: number;
  inputIds?: string[];
}

export class OperatorActions {
  readonly #rt: Runtime;
  readonly #cache: TaskCache;
  readonly #inputs: Inputs;
  readonly #cancels: Cancels;
  /** Engine.signal (its open check included): `turnlog signal` through the socket. */
  readonly #signal: (taskId: string, name: string, value: unknown) => Promise<string>;

  constructor(rt: Runtime, cache: TaskCache, inputs: Inputs, cancels: Cancels, signal: (taskId: string, name: string, value: unknown) => Promise<string>) {
    this.#rt = rt;
    this.#cache = cache;
    this.#inputs = inputs;
    this.#cancels = cancels;
    this.#signal = signal;
  }

  /** Operator actions the inspection socket forwards (docs/cli.md#operator-actions). */
  fromSocket(op: string, raw: Record<string, unknown>): Promise<unknown> | undefined {
    const text = (k: string, required = true): string | undefined => {
      const v = raw[k];
      if (v === undefined && !required) return undefined;
      if (typeof v !== 'string' || v === '') throw invalidArgument(`Operator action ${op} needs a non-empty ${k}.`);
      return v;
    };
    const run = async (): Promise<unknown> => {
      const reason = text('reason', false);
      const args: ActionArgs = { taskId: text('taskId')!, by: text('by')!, ...(reason === undefined ? {} : { reason }) };
      return this.run(op as OperatorActionKind, args, raw);
    };
    // `turnlog signal`: its record is the SignalReceived event (no OperatorAction).
    if (op === 'signal') return this.#signal(text('taskId')!, text('name')!, raw['value']).then((signalId) => ({ action: 'signal', done: true, signalId, message: `signal ${signalId} sent to task ${String(raw['taskId'])}` }));
    return op === 'cancel' || op === 'withdraw' || op === 'resend' || op === 'resume' ? run() : undefined;
  }

  /** Engine.operatorAction: one action, decided again after a fenced write of an operator engine. */
  async run(op: string, args: ActionArgs, extra: Record<string, unknown>): Promise<OperatorResult> {
    for (let races = 0; ; races++) {
      try {
        return await this.#once(op, args, extra);
      } catch (err) {
        // An operator engine writes under the generation it read: a claim in between (another
        // engine recovering the task) fences it; the re-read decides again on the new lease.
        if (!this.#rt.operatorOnly || races >= 2 || !isTurnlogError(err, 'TURNLOG_STALE_GENERATION')) throw err;
      }
    }
  }

  async #once(op: string, args: ActionArgs, extra: Record<string, unknown>): Promise<OperatorResult> {
    const { taskId, by } = args;
    const why = args.reason ?? `${op} by ${by} (turnlog CLI)`;
    switch (op) {
      case 'cancel': {
        const scope = extra['scope'] === 'turn' ? 'turn' : 'task';
        const kind: OperatorActionKind = scope === 'turn' ? 'cancel-turn' : 'cancel-task';
        const done = await this.#cancels.cancel(taskId, why, scope, (s) => operatorDraft(kind, args, { turn: s.openTurn?.turn ?? 0 }));
        const summary = await this.#rt.store.getSummary(taskId);
        return done
          ? { action: kind, taskId, done, message: `cancel of task ${taskId}${scope === 'turn' ? `'s open turn` : ''} recorded (by ${by})` }
          : { action: kind, taskId, done, message: `nothing to cancel: task ${taskId} is ${summary?.status ?? 'unknown'}${scope === 'turn' ? ' with no open turn' : ''}, or a cancel is already pending` };
      }
      case 'withdraw': {
        const inputId = extra['inputId'];
        if (typeof inputId !== 'string' || inputId === '') throw invalidArgument('Operator action withdraw needs an inputId.');
        await this.#inputs.withdraw(taskId, inputId, why, [operatorDraft('withdraw', args, { inputId })]);
        return { action: 'withdraw', taskId, done: true, message: `input ${inputId} of task ${taskId} withdrawn (by ${by})` };
      }
      case 'resend':
      case 'resume': {
        const turn = typeof extra['turn'] === 'number' ? extra['turn'] : undefined;
        return this.#resend(op, args, op === 'resend' ? turn : undefined);
      }
      default:
        throw invalidArgument(`Unknown operator action ${op}: use cancel, withdraw, resend or resume.`);
    }
  }

  /** Queues a failed turn's inputs again as a new turn (resend), or the last failed turn's (resume). */
  async #resend(kind: 'resend' | 'resume', args: ActionArgs, turn: number | undefined): Promise<OperatorResult> {
    this.#rt.assertOpen(kind);
    const { taskId } = args;
    const t = await this.#cache.load(taskId);
    const s = t.state;
    if (!s) throw taskNotFound(taskId);
    const found = failedTurnInputs(taskId, await this.#rt.store.readEvents(taskId), turn);
    const wf = this.#rt.operatorOnly ? operatorWorkflow(s) : this.#rt.workflow(s.workflow);
    const decode = this.#rt.codec?.decode ?? ((p: Payload) => p);
    const ids: string[] = [];
    for (const [i, q] of found.inputs.entries()) {
      const newId = `in-${nanoid(12)}`;
      const before = i === 0 ? [operatorDraft(kind, args, { turn: found.turn, inputId: q.inputId, newInputId: newId })] : [];
      ids.push(await this.#inputs.queue(t, wf, newId, decode(q.input), {}, before));
    }
    return {
      action: kind,
      taskId,
      done: true,
      turn: found.turn,
      inputIds: ids,
      message: `turn ${found.turn}'s input${ids.length > 1 ? 's' : ''} (${found.inputs.map((q) => q.inputId).join(', ')}) re-sent as ${ids.join(', ')} (by ${args.by})`,
    };
  }
}

/**
 * What an operator engine (no workflows) knows of a task's workflow, from its history: the name
 * and policy. Not steerable: a re-send while a turn runs is refused instead of steering it.
 */
function operatorWorkflow(s: TaskState): Workflow<any, any, any, any> {
  return { name: s.workflow, kind: s.kind, steerable: false, policy: s.policy } as unknown as Workflow<any, any, any, any>;
}
