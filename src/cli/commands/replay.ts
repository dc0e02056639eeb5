/**
 * `turnlog replay <file|task> --workflows <module>`: replay-tests a history file or a stored
 * task against the workflows a module exports (turnlog/testing's replayHistory), printing one
 * line per turn. Exit 0 when every turn replays, 1 on a divergence (docs/testing.md#cli).
 */
import { existsSync, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Option, type Command } from 'commander';
import { isTurnlogError } from '../../errors.js';
import { engineActivationMark, engineActivationsSince } from '../../runtime/work-log.js';
import type { HistoryEvent } from '../../history/events.js';
import type { PayloadConverter } from '../../history/payload.js';
import { moduleConverter } from '../../history/pipeline.js';
import { parseHistoryFile } from '../../history/history-file.js';
import {
  DEFAULT_REPLAY_TIMEOUT_MS,
  replayHistory,
  workflowMap,
  type ReplayHistoryOptions,
  type ReplayReport,
  type TurnReplayResult,
} from '../../testing/replay-history.js';
import type { Workflow } from '../../workflow/define-workflow.js';
import { CliError, EXIT, globals, loadCodecsModule, positiveInt, printJSON, printText, requireTask, toCliError, usageError, withStore } from '../context.js';

interface ReplayFlags {
  workflows: string;
  task?: string;
  timeout?: number;
  isolate: 'worker' | 'none';
}

/** Registers `replay` on the program. */
export function registerReplay(program: Command): void {
  program
    .command('replay')
    .description('replay-test a history file or a stored task against your workflows (exit 1 on a divergence)')
    .argument('<file|task>', 'history file (from `turnlog export`, JSON or binary) or a task id in --store')
    .requiredOption(
      '--workflows <module>',
      'JavaScript module exporting your workflows (named exports, or a default array); it is imported, so it must have no side effects',
    )
    .option('--task <id>', 'with a multi-task file: replay only this task')
    .addHelpText(
      'after',
      '\nThe --workflows module is imported and its top-level code runs. Keep workflows in a module without\n' +
        'side effects (defineWorkflow only, from turnlog/workflow); open the engine in another module.\n' +
        'A module whose import opens an engine gets a warning on stderr: it may have written to the store.',
    )
    .option('--timeout <ms>', `per turn: fail a turn that has not settled after this many ms (default ${DEFAULT_REPLAY_TIMEOUT_MS})`, positiveInt)
    .addOption(
      new Option('--isolate <mode>', 'worker: replay in a worker thread, terminated at the timeout (stops handlers that block); none: in this process')
        .choices(['worker', 'none'])
        .default('worker'),
    )
    .action(async (target: string, flags: ReplayFlags, cmd: Command) => {
      const g = globals(cmd);
      // Loaded here too, so a module without workflows is a usage error before any replay.
      const { workflows, payloadConverter } = await loadWorkflows(flags.workflows);
      const payloadCodecs = g.codecs === undefined ? [] : (await loadCodecsModule(g.codecs)).codecs;
      const tasks = await loadTasks(target, flags, cmd);
      const reports: ReplayReport[] = [];
      const failures: { taskId: string; error: unknown }[] = [];
      for (const t of tasks) {
        if (!g.json) await printText(`task ${t.taskId} (${t.events.length} events)`);
        // Turn lines stream as turns replay (long histories show progress); drained below.
        const lines: Promise<void>[] = [];
        const onTurn = (r: TurnReplayResult): void => {
          const p = g.json ? undefined : printText(turnLine(r));
          if (p) lines.push(p);
        };
        try {
          const options: ReplayHistoryOptions = { history: t.events, taskId: t.taskId, workflows, onTurn, isolate: flags.isolate, payloadCodecs };
          if (payloadConverter) options.payloadConverter = payloadConverter;
          if (flags.isolate === 'worker') options.workflows = resolve(flags.workflows);
          if (flags.timeout !== undefined) options.timeoutMs = flags.timeout;
          const report = await replayHistory(options);
          await Promise.all(lines);
          reports.push(report);
          if (!g.json) await printText(`  ok: ${report.turns} turn${report.turns === 1 ? '' : 's'} replayed`);
        } catch (err) {
          await Promise.all(lines);
          failures.push({ taskId: t.taskId, error: err });
          if (!g.json) await printText(divergenceLine(err));
        }
      }
      if (failures.length === 0) {
        if (g.json) await printJSON({ ok: true, tasks: reports });
        return;
      }
      // One failure keeps its own code and message; several are listed in one error.
      if (failures.length === 1) throw failures[0]!.error;
      const first = toCliError(failures[0]!.error);
      throw new CliError(
        first.code,
        `${failures.length} of ${tasks.length} tasks failed to replay:\n${failures.map((f) => `  ${f.taskId}: ${toCliError(f.error).message}`).join('\n')}`,
        EXIT.error,
      );
    });
}

function turnLine(r: TurnReplayResult): string {
  const status = r.status === 'ok' ? 'ok' : r.status === 'cut-off' ? 'cut off' : 'skipped';
  const note = r.status === 'cut-off' ? ' (outcome not compared)' : r.status === 'older-version' ? ' (recorded by an older version: not replayed)' : '';
  return `  turn ${String(r.turn).padEnd(4)} ${status.padEnd(8)} ${(r.terminal ?? 'history ends').padEnd(14)} event ${String(r.eventId).padEnd(6)} ${r.calls} call${r.calls === 1 ? '' : 's'}${note}`;
}

function divergenceLine(err: unknown): string {
  if (isTurnlogError(err, 'TURNLOG_NON_DETERMINISM')) {
    const e = err as unknown as { turn: number; eventId: number; expected: string; actual: string };
    return `  turn ${String(e.turn).padEnd(4)} DIVERGED event ${e.eventId}: expected ${e.expected}, the handler did ${e.actual}`;
  }
  if (isTurnlogError(err, 'TURNLOG_REPLAY_STALLED') || isTurnlogError(err, 'TURNLOG_REPLAY_TIMEOUT')) {
    const e = err as unknown as { turn: number; eventId: number; lastCall: string; code: string };
    const what = e.code === 'TURNLOG_REPLAY_STALLED' ? 'STALLED' : 'TIMED OUT';
    return `  turn ${String(e.turn).padEnd(4)} ${what} after ${e.lastCall} (event ${e.eventId}): no verdict`;
  }
  return `  FAILED: ${err instanceof Error ? err.message : String(err)}`;
}

/**
 * Imports the module and collects its workflows, and its `payloadConverter` export if any (as
 * process workers do); a module with no workflows is a usage error. Warns when the import
 * activated an engine (top-level work that may have written to the store).
 */
async function loadWorkflows(path: string): Promise<{ workflows: Workflow<any, any, any, any>[]; payloadConverter: PayloadConverter | undefined }> {
  const abs = resolve(path);
  let mod: Record<string, unknown>;
  const mark = engineActivationMark();
  try {
    mod = (await import(pathToFileURL(abs).href)) as Record<string, unknown>;
    // One macrotask more: catches an un-awaited `main()` that opens its engine right after import.
    await new Promise((r) => setImmediate(r));
  } catch (err) {
    throw new CliError(
      'TURNLOG_WORKFLOWS_MODULE',
      `Cannot load workflows module ${abs}: ${(err as Error).message}. Pass the compiled JavaScript module that exports your workflows (for TypeScript, its .js output).`,
      EXIT.error,
      { cause: err },
    );
  }
  const started = engineActivationsSince(mark);
  if (started.count > 0) {
    const stores = [...new Set(started.latest.map((a) => a.store))].join(', ');
    process.stderr.write(
      `turnlog: warning: importing ${abs} started work: it opened ${started.count} engine${started.count === 1 ? '' : 's'} (store ${stores}), ` +
        'which may have run turns and written to a store. A workflows module must have no side effects: ' +
        'keep defineWorkflow in it and open the engine in another module (docs/testing.md#cli).\n',
    );
  }
  const workflows = [...workflowMap(mod).values()];
  if (workflows.length === 0) {
    throw usageError(`Module ${abs} exports no workflows. Export them by name (export const agent = defineWorkflow(…)) or as a default array.`);
  }
  return { workflows, payloadConverter: moduleConverter(mod) };
}

/** A history file when `target` is a file, else the task of that id in the store. */
async function loadTasks(target: string, flags: ReplayFlags, cmd: Command): Promise<{ taskId: string; events: HistoryEvent[] }[]> {
  if (existsSync(target) && statSync(target).isFile()) {
    let tasks = parseHistoryFile(await readFile(target), target).tasks;
    if (flags.task !== undefined) {
      tasks = tasks.filter((t) => t.taskId === flags.task);
      if (tasks.length === 0) throw usageError(`History file ${target} has no task ${flags.task}.`);
    }
    return tasks;
  }
  if (flags.task !== undefined) throw usageError('--task selects a task of a multi-task file; with a task id, leave it out.');
  return withStore(cmd, {}, async (store) => {
    await requireTask(store, target);
    return [{ taskId: target, events: await store.readEvents(target) }];
  });
}
