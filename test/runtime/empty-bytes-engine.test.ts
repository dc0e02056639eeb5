/**
 * User-visible effect of the generic decode path's `data: []` for empty bytes (see
 * codec-fast-path.test.ts): the same turn result reads back differently live and after a restart.
 */
import { afterEach, expect, it } from 'vitest';
import { Engine } from '../../src/runtime/engine.js';
import { silentLogger } from '../../src/logger.js';
import { defineWorkflow } from '../../src/workflow/define-workflow.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const emptyBytes = defineWorkflow({ name: 'empty-bytes', turn: async () => new Uint8Array(0) });

// BUG (src/history/codec.ts:77 payloadFromProto): after a restart the TurnCompleted output is
// decoded by the generic path, whose absent `data` is protobufjs 8's default `[]` (an Array),
// so a turn that returned `new Uint8Array(0)` reads back as `[]`. Live, it is a Uint8Array.
it('Regression (fixed): a turn result of new Uint8Array(0) is still a Uint8Array when read back after an engine restart', async () => {
  const dir = await makeTmpDir('turnlog-review2-empty-');
  cleanups.push(dir.remove);
  const first = await Engine.open({ store: dir.path, workflows: [emptyBytes], logger: silentLogger, scanIntervalMs: 0 });
  const h = await first.start(emptyBytes, null, { taskId: 'empty-1' });
  const live = await h.result();
  expect(live).toBeInstanceOf(Uint8Array);
  const inputId = h.inputId!;
  await first.shutdown({ graceMs: 0 });

  const second = await Engine.open({ store: dir.path, workflows: [emptyBytes], logger: silentLogger, scanIntervalMs: 0 });
  cleanups.push(() => second.shutdown({ graceMs: 0 }));
  const again = await second.turnResult('empty-1', inputId);
  expect(again.status).toBe('completed');
  expect(again.output).toBeInstanceOf(Uint8Array);
});
