import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { encodeHistoryFile } from '../../src/history/history-file.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { ReplayFailuresError, historyBuilder, replayHistories, replayHistory } from '../../src/testing/index.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

// docs/testing.md#errors: a history file that cannot be read is TURNLOG_HISTORY_FILE, and a
// folder that is a wrong path is TURNLOG_INVALID_ARGUMENT (not a bare ENOENT from node:fs).
const echo = defineWorkflow({ name: 'echo', turn: async (ctx, text: string) => ctx.step('model', () => text) });
const events = historyBuilder('e-1').created({ workflow: 'echo' }).input('hi').turnStarted().step('model', 'hi').completed('hi').build();

const dirs: { remove: () => Promise<void> }[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await d.remove();
});
async function tmp(): Promise<string> {
  const d = await makeTmpDir('turnlog-replay-paths-');
  dirs.push(d);
  return d.path;
}

describe('replayHistory with a path that is not a history file', () => {
  it('a missing file is TURNLOG_HISTORY_FILE naming the path', async () => {
    const path = join(await tmp(), 'missing.json');
    await expect(replayHistory({ history: path, workflows: [echo] })).rejects.toMatchObject({
      code: 'TURNLOG_HISTORY_FILE',
      message: expect.stringContaining(`${path} does not exist`),
    });
  });

  it('a folder is TURNLOG_HISTORY_FILE pointing at replayHistories', async () => {
    const dir = await tmp();
    await expect(replayHistory({ history: dir, workflows: [echo] })).rejects.toMatchObject({
      code: 'TURNLOG_HISTORY_FILE',
      message: expect.stringContaining('replayHistories'),
    });
  });
});

describe('replayHistories with a folder that is a wrong path', () => {
  it('a missing folder is TURNLOG_INVALID_ARGUMENT, as an empty one is', async () => {
    const dir = join(await tmp(), 'nope');
    await expect(replayHistories(dir, [echo])).rejects.toMatchObject({ code: 'TURNLOG_INVALID_ARGUMENT', message: expect.stringContaining(`${dir} does not exist`) });
    await expect(replayHistories(await tmp(), [echo])).rejects.toMatchObject({ code: 'TURNLOG_INVALID_ARGUMENT' });
  });

  it('a file given as the folder is TURNLOG_INVALID_ARGUMENT', async () => {
    const file = join(await tmp(), 'e-1.json');
    await writeFile(file, await encodeHistoryFile({ taskId: 'e-1', events }, 'json'));
    await expect(replayHistories(file, [echo])).rejects.toMatchObject({ code: 'TURNLOG_INVALID_ARGUMENT', message: expect.stringContaining('is not a folder') });
  });

  it('a history-named entry that cannot be read is listed as a TURNLOG_HISTORY_FILE failure beside the files that pass', async () => {
    const dir = await tmp();
    await writeFile(join(dir, 'e-1.json'), await encodeHistoryFile({ taskId: 'e-1', events }, 'json'));
    await mkdir(join(dir, 'not-a-file.json'));
    // A folder named like a history file is skipped (only files are replayed).
    expect((await replayHistories(dir, [echo])).tasks).toBe(1);
    await writeFile(join(dir, 'broken.json'), '{');
    const err = (await replayHistories(dir, [echo]).catch((e: unknown) => e)) as ReplayFailuresError;
    expect(err).toBeInstanceOf(ReplayFailuresError);
    expect(err.failures.map((f) => [f.file, (f.error as { code?: string }).code])).toEqual([[join(dir, 'broken.json'), 'TURNLOG_HISTORY_FILE']]);
    expect(err.report.tasks).toBe(1);
  });
});
