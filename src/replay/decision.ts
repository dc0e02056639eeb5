/**
 * The replayer's verdict for one task: what the engine must do next and the rule that said so.
 * The rules and their order are the table in docs/recovery.md (DESIGN.md "Recovery decisions").
 */
import type { TaskOutcome, TimeoutCause } from '../history/events.js';

export type DecisionRule =
  | 'completed'
  | 'cancel-requested'
  | 'owned'
  | 'marker'
  | 'backstop'
  | 'worker-crashes-exhausted'
  | 'recoveries-exhausted'
  | 'recover'
  | 'queued-input'
  | 'timer-due'
  | 'waiting-for-timer'
  | 'suspended'
  | 'pending'
  | 'corrupt';

export type Decision =
  | {
      kind: 'none';
      /** `corrupt` is the engine's, never the replayer's: the task's stored records cannot be read. */
      rule: 'completed' | 'owned' | 'suspended' | 'pending' | 'corrupt';
      reason: string;
    }
  | {
      /** Only scheduled inputs are queued and none is due: the engine wakes the task at `wakeAt`. */
      kind: 'none';
      rule: 'waiting-for-timer';
      wakeAt: number;
      reason: string;
    }
  | {
      /** Append the turn's terminal event (and TaskCompleted when `completeTask` is set). */
      kind: 'finalize-turn';
      rule: 'cancel-requested' | 'marker' | 'backstop' | 'worker-crashes-exhausted' | 'recoveries-exhausted';
      turn: number;
      terminal: 'TurnCancelled' | 'TurnTimedOut' | 'TurnFailed';
      /** For TurnTimedOut. */
      cause?: TimeoutCause;
      /** One-shot tasks and task-scoped cancels complete the task with this outcome. */
      completeTask?: TaskOutcome;
      reason: string;
    }
  | {
      /** No open turn, a task-scoped cancel: append TaskCompleted(cancelled). */
      kind: 'complete-task';
      rule: 'cancel-requested';
      outcome: 'cancelled';
      reason: string;
    }
  | {
      /** Start a new attempt of the open turn, entry mode `recovered`, replaying recorded calls. */
      kind: 'rerun';
      rule: 'recover';
      turn: number;
      attempt: number;
      reason: string;
    }
  | {
      /** Start the next turn with the first due input of the queue (`timer-due`: a scheduled one). */
      kind: 'start-turn';
      rule: 'queued-input' | 'timer-due';
      turn: number;
      inputIds: string[];
      entryMode: 'fresh' | 'resumed';
      steered: boolean;
      reason: string;
    };
