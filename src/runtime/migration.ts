/**
 * State migrations (docs/versioning.md#state-migrations): before a turn starts on a state shaped
 * by an older workflow version, the workflow's `migrateState` hook runs once, here in the engine
 * process, and its result becomes a `StateMigrated` draft that the driver appends in the same
 * batch as the TurnStarted; fold takes the recorded state, so replay never runs the hook again.
 */
import { StateVersionNewerError } from '../errors.js';
import type { FailureInfo } from '../history/events.js';
import { errorToFailure } from '../history/failure.js';
import type { TaskState } from '../history/state.js';
import type { Workflow } from '../workflow/define-workflow.js';
import { oversized, type Draft } from './drafts.js';
import type { Runtime } from './runtime.js';

/** What the start of a turn does about the state's version. */
export type Migration =
  | { kind: 'none' }
  | { kind: 'migrated'; draft: Extract<Draft, { type: 'StateMigrated' }> }
  | { kind: 'failed'; failure: FailureInfo };

export const NONE: Migration = { kind: 'none' };

/**
 * The refusal of a state shaped by a newer version than `wf`'s code, or undefined. Code without
 * a version checks nothing; neither does a state of unknown version (an old snapshot).
 */
export function newerStateError(taskId: string, wf: Workflow<any, any, any, any> | undefined, s: TaskState): StateVersionNewerError | undefined {
  if (wf?.version === undefined || s.state === undefined || s.stateVersion === undefined || s.stateVersion <= wf.version) return undefined;
  return new StateVersionNewerError(taskId, wf.name, s.stateVersion, wf.version);
}

/** Whether {@link migrateState} has a hook to run (the same test): a turn start without one awaits nothing. */
export function needsMigration(wf: Workflow<any, any, any, any> | undefined, s: TaskState): boolean {
  return wf?.version !== undefined && wf.migrateState !== undefined && s.state !== undefined && (s.stateVersion ?? 0) < wf.version;
}

/**
 * Runs `wf.migrateState` when the task has a stored state older than the code (`stateVersion`
 * below `wf.version`; unknown counts as 0). A throw, or a result over the state limit, is a
 * failure for the turn (TURNLOG_STATE_MIGRATION_FAILED); nothing is written here.
 */
export async function migrateState(rt: Runtime, taskId: string, wf: Workflow<any, any, any, any> | undefined, s: TaskState): Promise<Migration> {
  const to = wf?.version;
  const hook = wf?.migrateState;
  if (to === undefined || hook === undefined || s.state === undefined) return NONE;
  const from = s.stateVersion ?? 0;
  if (from >= to) return NONE;
  const subject = `Task ${taskId}: the migrateState hook of workflow ${wf!.name} (version ${from} → ${to})`;
  try {
    const value = rt.converter.fromPayload(rt.codec ? rt.codec.decode(s.state) : s.state);
    const state = rt.converter.toPayload(await hook(value, from));
    const tooLarge = oversized(rt.limits, 'state', state, `${subject}, its result`);
    if (tooLarge) return failed(subject, tooLarge);
    return { kind: 'migrated', draft: { type: 'StateMigrated', fromVersion: from, toVersion: to, state } };
  } catch (err) {
    return failed(subject, err);
  }
}

function failed(subject: string, err: unknown): Migration {
  const cause = errorToFailure(err);
  // A state-limit error already names the hook (`${subject}, its result: …`) and ends with a period.
  const said = (cause.message.startsWith(`${subject}, `) ? cause.message.slice(subject.length + 2) : cause.message).replace(/\.$/, '');
  return {
    kind: 'failed',
    failure: {
      message: `${subject} failed: ${said}. The stored state is unchanged and the handler did not run; fix the hook, deploy it and send the input again.`,
      type: 'StateMigrationFailed',
      code: 'TURNLOG_STATE_MIGRATION_FAILED',
      nonRetryable: true,
      cause,
    },
  };
}
