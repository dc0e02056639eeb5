/**
 * Process groups of workers, and the one reaper that kills them when the engine dies.
 * Each worker leads its own group (spawned detached), so a handler's children share it and one
 * `kill(-pgid)` stops them all. A worker SIGKILLed by the kernel (parent-death signal) cannot
 * kill its group itself, so a tiny `sh` child of the engine holds the live group ids and kills
 * them once its stdin reaches EOF: the kernel closes that pipe however the engine dies.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type { Socket } from 'node:net';

/** Process groups exist on POSIX only; on Windows workers are single processes. */
export const PROCESS_GROUPS = process.platform !== 'win32';

// Reads "+<pgid>" / "-<pgid>" lines; a set kept as shell variables (POSIX sh has no arrays).
// Ignores the terminal's signals: Ctrl-C reaches the engine, whose death is the EOF that matters.
const SCRIPT = `trap '' INT TERM HUP QUIT
while read -r l; do
  case "$l" in
    +[0-9]*) eval "g_\${l#+}=1" ;;
    -[0-9]*) unset "g_\${l#-}" ;;
  esac
done
for g in $(set | sed -n 's/^g_\\([0-9][0-9]*\\)=.*/\\1/p'); do kill -s KILL -- "-$g" 2>/dev/null; done`;

let reaper: ChildProcess | undefined;
let reaperFailed = false;

function reaperStdin(): Socket | undefined {
  if (!PROCESS_GROUPS || reaperFailed) return undefined;
  if (!reaper || reaper.exitCode !== null || reaper.signalCode !== null) {
    try {
      reaper = spawn('/bin/sh', ['-c', SCRIPT], { stdio: ['pipe', 'ignore', 'ignore'], detached: true });
    } catch {
      reaperFailed = true;
      return undefined;
    }
    reaper.on('error', () => {
      reaperFailed = true;
    });
    reaper.unref();
    const stdin = reaper.stdin as Socket;
    stdin.on('error', () => undefined);
    stdin.unref();
  }
  return reaper.stdin as Socket;
}

/** Starts the reaper ahead of the first worker (cheap: one `sh`, once per engine process). */
export function ensureGroupReaper(): void {
  reaperStdin();
}

/** The reaper will kill group `pgid` if this process dies while the group is registered. */
export function registerGroup(pgid: number): void {
  if (pgid > 0) reaperStdin()?.write(`+${pgid}\n`);
}

/**
 * SIGKILLs every process of group `pgid` (the worker and whatever its handler started, unless
 * that called `setsid`). Safe when the group is already empty. `forget` also unregisters it.
 */
export function killGroup(pgid: number, forget = false): void {
  if (pgid <= 0) return;
  if (PROCESS_GROUPS) {
    try {
      process.kill(-pgid, 'SIGKILL');
    } catch {
      // ESRCH: the group is empty already.
    }
  }
  if (forget && reaper && reaper.exitCode === null) (reaper.stdin as Socket | null)?.write(`-${pgid}\n`);
}
