/**
 * docs/recovery.md shows, per rule, an example history and what `turnlog why` prints for it.
 * That section is generated from RULE_EXAMPLES and explainDecision, and this test fails when
 * the file drifts. Regenerate: UPDATE_DOCS=1 npx vitest run test/replay/recovery-doc.test.ts
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import type { HistoryEvent } from '../../src/history/events.js';
import { decide, formatTime } from '../../src/replay/decide.js';
import { explainDecision } from '../../src/replay/explain.js';
import { fold } from '../../src/replay/fold.js';
import { T0 } from '../../src/testing/history-builder.js';
import { RULE_EXAMPLES } from './rule-examples.js';

const DOC = join(dirname(fileURLToPath(import.meta.url)), '../../docs/recovery.md');
const BEGIN = '<!-- BEGIN GENERATED: examples (test/replay/recovery-doc.test.ts) -->';
const END = '<!-- END GENERATED -->';

const secs = (t: number): string => `+${((t - T0) / 1000).toFixed(0)}s`;

function describeEvent(e: HistoryEvent): string {
  const head = `${String(e.eventId).padStart(2)} ${secs(e.time).padStart(5)} g${e.generation} ${e.type}`;
  switch (e.type) {
    case 'TaskCreated':
      return `${head} workflow=${e.workflow} kind=${e.kind} turnTimeoutMs=${e.policy.turnTimeoutMs} maxRecoveries=${e.policy.maxRecoveries} maxWorkerCrashes=${e.policy.maxWorkerCrashes}`;
    case 'InputQueued':
      return `${head} ${e.inputId}${e.steering ? ' steering' : ''}${e.deliverAt === undefined ? '' : ` deliverAt=${secs(e.deliverAt)}`}`;
    case 'TurnStarted':
      return `${head} turn=${e.turn} attempt=${e.attempt} ${e.entryMode} inputs=[${e.inputIds.join(',')}] deadline=${secs(e.deadline)}`;
    case 'StepCompleted':
      return `${head} turn=${e.turn} seq=${e.seq} ${e.name}`;
    case 'TimeoutCancelRequested':
      return `${head} turn=${e.turn} graceUntil=${secs(e.graceUntil)}`;
    case 'CancelRequested':
      return `${head} scope=${e.scope} "${e.reason}"`;
    case 'WorkerCrashed':
      return `${head} turn=${e.turn} attempt=${e.attempt} signal=${e.signal ?? '-'}`;
    case 'TurnExitedForRecovery':
      return `${head} turn=${e.turn} attempt=${e.attempt} "${e.reason}"`;
    case 'TaskCompleted':
      return `${head} ${e.outcome}`;
    default:
      return 'turn' in e ? `${head} turn=${e.turn}` : head;
  }
}

export function renderExamples(): string {
  const parts: string[] = [BEGIN, ''];
  for (const ex of RULE_EXAMPLES) {
    const state = fold('task-1', ex.events);
    const d = decide(state, ex.lease, ex.now);
    const lease = ex.lease === undefined ? 'none' : `${ex.lease.owner}, expires ${secs(ex.lease.expiresAt)}`;
    parts.push(`### \`${ex.name}\``, '', ex.story, '', '```text');
    for (const e of ex.events) parts.push(describeEvent(e));
    parts.push('```', '', `Decided at now = ${secs(ex.now)} (${formatTime(ex.now)}), lease: ${lease}. \`turnlog why task-1\`:`, '', '```text');
    parts.push(explainDecision(d, state), '```', '');
  }
  parts.push(END);
  return parts.join('\n');
}

it('docs/recovery.md shows what explainDecision prints for every example', () => {
  const doc = readFileSync(DOC, 'utf8');
  const start = doc.indexOf(BEGIN);
  const end = doc.indexOf(END);
  expect(start, 'docs/recovery.md lacks the generated-section markers').toBeGreaterThanOrEqual(0);
  const generated = renderExamples();
  if (process.env['UPDATE_DOCS'] === '1') {
    writeFileSync(DOC, doc.slice(0, start) + generated + doc.slice(end + END.length));
    return;
  }
  expect(doc.slice(start, end + END.length)).toBe(generated);
});
