/**
 * The floor: what any durable engine must at least do per record, here one protobuf event
 * encoded and one sync LevelDB put. A one-step workflow is the same three records turnlog
 * writes (start, step, result); a 100-step workflow 102; replay decodes the stored events.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Level } from 'level';
import { decodeEvent, encodeEvent, hundredStepHistory } from './common.mjs';

export const info = { label: 'floor', notes: 'one protobuf event encoded + one sync LevelDB put per record' };

export async function open() {
  const dir = mkdtempSync(join(tmpdir(), 'turnlog-peers-floor-'));
  const db = new Level(join(dir, 'db'), { valueEncoding: 'view' });
  await db.open();
  const events = hundredStepHistory();
  const first = events[0];
  const step = events.find((e) => e.type === 'StepCompleted') ?? events[4];
  const last = events.at(-1);
  const stored = events.map(encodeEvent);
  let k = 0;
  const record = (task, e) => db.put(`${task}:${String(k++).padStart(10, '0')}`, encodeEvent(e), { sync: true });
  const workflow = async (task, steps) => {
    await record(task, first);
    for (let i = 0; i < steps; i++) await record(task, step);
    await record(task, last);
  };
  return {
    workflow100: () => workflow(`w${k}`, 100),
    oneStep: (i) => workflow(`o${i}`, 1),
    conversations: (n) => Array.from({ length: n }, (_, i) => `c${i}`),
    turn: (c) => workflow(c, 1),
    replay100: () => {
      let n = 0;
      for (const b of stored) n += decodeEvent(b, 'bench-100').eventId > 0 ? 1 : 0;
      return n;
    },
    async close() {
      await db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
