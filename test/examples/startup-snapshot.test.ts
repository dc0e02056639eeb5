/**
 * examples/startup-snapshot: a real Node startup snapshot. The test bundles the app, builds the
 * blob in capture mode (nothing opened while capturing), then starts from it twice; each start
 * activates in the deserialize main function, recovers a task that a SIGKILLed process left in
 * progress, and completes it, replaying the recorded step. A cold start of the same bundle is
 * measured beside it (printed, never asserted).
 */
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
// @ts-expect-error plain ESM scripts without type declarations
import { build } from '../../examples/startup-snapshot/build.mjs';
// @ts-expect-error plain ESM scripts without type declarations
import { runApp, seed } from '../../examples/startup-snapshot/run.mjs';
import { makeTmpDir } from '../helpers/tmp-dir.js';

interface Line {
  event: string;
  [k: string]: unknown;
}

const removals: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const r of removals) await r();
});

describe('examples/startup-snapshot', () => {
  it('builds a snapshot blob, starts from it twice, and each start recovers an interrupted task', async () => {
    const tmp = await makeTmpDir('turnlog-snapshot-');
    removals.push(tmp.remove);
    const store = join(tmp.path, 'store');
    const built = await build(tmp.path, store);
    expect(built.stderr).toBe(''); // no "not verified in snapshot" warnings: only safe built-ins at capture

    const snapshot = { blob: built.blob };
    const figures: string[] = [];
    for (const [i, taskId] of ['job-1', 'job-2'].entries()) {
      const env = { DEMO_STORE: store, DEMO_SESSION: 'demo-session', DEMO_RESTORE_ID: `restore-${i + 1}` };
      // A process started from the snapshot starts the task and is SIGKILLed after `fetch` is recorded.
      const crashed = seed(snapshot, taskId, env);
      expect(crashed.lines.filter((l: Line) => l.event === 'effect')).toEqual([{ event: 'effect', taskId, step: 'fetch', attempt: 1 }]);

      const r = runApp({ ...snapshot, env: { ...env, DEMO_AWAIT: taskId } });
      expect(r.stderr).toBe('');
      expect(r.status).toBe(0);
      const lines = r.lines as Line[];
      expect(lines.find((l) => l.event === 'ready')).toMatchObject({ fromSnapshot: true, owner: 'report-app|session:demo-session' });
      // `fetch` was replayed from the history, only `summarize` ran again.
      expect(lines.filter((l) => l.event === 'effect')).toEqual([{ event: 'effect', taskId, step: 'summarize', attempt: 2 }]);
      expect(lines.find((l) => l.event === 'completed')).toEqual({
        event: 'completed',
        taskId,
        status: 'completed',
        output: { summary: 'turnlog is durable; turnlog recovers', entryMode: 'recovered', attempt: 2 },
      });
      figures.push(`snapshot start ${i + 1}: ready ${(lines.find((l) => l.event === 'ready') as Line)['sinceProcessStartMs']} ms after process start, ${r.wallMs.toFixed(1)} ms wall`);
    }

    // A cold start of the same bundle, for comparison.
    const cold = { entry: built.entry };
    const env = { DEMO_STORE: store };
    seed(cold, 'job-cold', env);
    const r = runApp({ ...cold, env: { ...env, DEMO_AWAIT: 'job-cold' } });
    expect(r.status).toBe(0);
    expect((r.lines as Line[]).find((l) => l.event === 'completed')).toMatchObject({ status: 'completed', output: { entryMode: 'recovered' } });
    figures.push(`cold start: ready ${((r.lines as Line[]).find((l) => l.event === 'ready') as Line)['sinceProcessStartMs']} ms after process start, ${r.wallMs.toFixed(1)} ms wall`);
    console.log(figures.join('\n'));
  });
});
