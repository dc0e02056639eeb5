// Replay-tests the support agent against a conversation recorded from it (record.ts), the
// way you would guard your own agent in CI: the current code must make the recorded calls in
// the recorded order and end each turn as recorded. The second test shows a change that breaks it.
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
// In your project: import { replayHistory, NonDeterminismError } from 'turnlog/testing';
import { NonDeterminismError, replayHistory } from '../../src/testing/index.js';
import { supportAgent } from '../support-agent/agent.js';
import { supportAgentV2 } from './agent-v2.js';

const history = fileURLToPath(new URL('./support-conversation.json', import.meta.url));

describe('support agent replay', () => {
  it('the current agent replays the recorded conversation, steering message included', async () => {
    const report = await replayHistory({ history, workflows: [supportAgent] });
    expect(report.results.map((r) => `turn ${r.turn}: ${r.status} (${r.terminal}, ${r.calls} calls)`)).toEqual([
      'turn 1: ok (TurnCompleted, 4 calls)',
      'turn 2: ok (TurnCompleted, 6 calls)',
    ]);
  });

  it('v2 adds a moderation step first: replay fails at the first recorded model call', async () => {
    const err = await replayHistory({ history, workflows: [supportAgentV2] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NonDeterminismError);
    expect((err as Error).message).toBe(
      'Task support-1042, turn 1, event 5: the history recorded step "model#1" at position 1 but the handler did step "moderate". ' +
        'Check that your turn handler calls the same steps in the same order on every attempt (see docs/determinism.md).',
    );
  });
});
