// Shared by the crash matrices: runs a driver child (optionally SIGKILLed after its N-th
// append) and reads back the history it left on the Level store.
import { spawnSync } from 'node:child_process';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import type { HistoryEvent } from '../../src/history/events.js';

export function runDriver(driver: string, dir: string, killAfter?: number) {
  const env = { ...process.env };
  delete env['TURNLOG_FAULT_KILL_AFTER_APPEND'];
  if (killAfter !== undefined) env['TURNLOG_FAULT_KILL_AFTER_APPEND'] = String(killAfter);
  const r = spawnSync(process.execPath, [driver, dir], { env, encoding: 'utf8', timeout: 60_000 });
  return { status: r.status, signal: r.signal, stdout: r.stdout, stderr: r.stderr };
}

export async function readStoredHistory(dir: string, taskId: string): Promise<HistoryEvent[]> {
  const store = new LevelHistoryStore(dir);
  await store.open();
  try {
    return await store.readEvents(taskId);
  } finally {
    await store.close();
  }
}
