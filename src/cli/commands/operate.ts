/**
 * Operator actions (docs/cli.md#operator-actions): `cancel`, `withdraw`, `resend`, `resume` and `signal`
 * against the running engine that holds a LevelDB store (over its inspection socket), or on a
 * PostgreSQL store appended by the CLI itself (Engine.openForOperator, no claim). Each asks
 * for confirmation unless `--yes` (and refuses without a terminal), and the engine records it in
 * the history as an `OperatorAction` event naming `--by` (default: the OS user).
 */
import { hostname, userInfo } from 'node:os';
import { createInterface } from 'node:readline/promises';
import type { Command } from 'commander';
import { TurnlogError } from '../../errors.js';
import { isPostgresUrl } from '../../store/postgres-store.js';
import { Engine } from '../../runtime/engine.js';
import {
  CliError,
  EXIT,
  connectLiveEngine,
  globals,
  loadCodecsModule,
  openPostgresCliStore,
  positiveInt,
  printJSON,
  printText,
  usageError,
  type GlobalOptions,
} from '../context.js';

interface ActionFlags {
  by?: string;
  reason?: string;
  yes?: boolean;
}

function defaultBy(): string {
  try {
    return userInfo().username;
  } catch {
    return process.env['USER'] ?? 'unknown';
  }
}

/** Asks on the terminal; without one, refuses unless `--yes` (a script must say so). */
async function confirm(question: string, flags: ActionFlags): Promise<void> {
  if (flags.yes) return;
  assertCanConfirm(question, flags);
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    const answer = (await rl.question(`${question} [y/N] `)).trim().toLowerCase();
    if (answer !== 'y' && answer !== 'yes') throw new CliError('ABORTED', 'Not confirmed; nothing was done.', EXIT.error);
  } finally {
    rl.close();
  }
}

/** A usage error (exit 2) without `--yes` and without a terminal, before any store or engine is reached. */
function assertCanConfirm(question: string, flags: ActionFlags): void {
  if (!flags.yes && (!process.stdin.isTTY || !process.stderr.isTTY)) {
    throw usageError(`${question} needs confirmation, and there is no terminal to ask on. Pass --yes to confirm in a script.`);
  }
}

/** Sends one action to the engine holding the store and prints what it did. */
async function act(cmd: Command, question: string, op: 'cancel' | 'withdraw' | 'resend' | 'resume', args: Record<string, unknown>, flags: ActionFlags): Promise<void> {
  const g = globals(cmd);
  const by = flags.by ?? defaultBy();
  if (by === '') throw usageError('--by must not be empty.');
  assertCanConfirm(question, flags);
  if (isPostgresUrl(g.store)) return actOnPostgres(g, question, op, args, { ...flags, by });
  const engine = await connectLiveEngine(g.store);
  if (!engine) {
    throw new TurnlogError(
      'TURNLOG_INSPECT_SOCKET',
      `No running engine answers on store ${g.store}: operator actions are carried out by the engine that holds the store, so its history gets one writer. Start the engine (with inspect on, the default) and run this again.`,
    );
  }
  try {
    await confirm(question, flags);
    const result = await engine.action<{ message: string; done: boolean }>(op, { ...args, by, ...(flags.reason === undefined ? {} : { reason: flags.reason }) });
    if (g.json) await printJSON(result);
    else await printText(result.message);
  } finally {
    engine.close();
  }
}

/**
 * On a shared PostgreSQL store the CLI appends the action itself (Engine.openForOperator): under
 * the task's current generation, without claiming it; the engine running the task hears it.
 */
async function actOnPostgres(g: GlobalOptions, question: string, op: string, args: Record<string, unknown>, flags: ActionFlags & { by: string }): Promise<void> {
  const loaded = g.codecs === undefined ? undefined : await loadCodecsModule(g.codecs);
  const store = await openPostgresCliStore(g.store, { create: false, write: true });
  try {
    await confirm(question, flags);
    const engine = await Engine.openForOperator({
      store,
      // The command prints its one result; the engine's own lines (a retried race) stay quiet.
      logger: { info: () => {}, warn: () => {}, error: () => {} },
      owner: `${hostname()}|turnlog-cli`,
      ...(loaded ? { payloadCodecs: loaded.codecs, ...(loaded.converter ? { payloadConverter: loaded.converter } : {}) } : {}),
    });
    try {
      const taskId = args['taskId'] as string;
      const result = await engine.operatorAction(op, { taskId, by: flags.by, ...(flags.reason === undefined ? {} : { reason: flags.reason }) }, args);
      if (g.json) await printJSON(result);
      else await printText(result.message);
    } finally {
      await engine.shutdown();
    }
  } finally {
    await store.close();
  }
}

/**
 * `turnlog signal`: a named signal, appended by the engine holding a LevelDB store (its socket)
 * or, on PostgreSQL, by an operator engine of the CLI. No confirmation: it only adds an event.
 */
async function signal(cmd: Command, taskId: string, name: string, json: string | undefined): Promise<void> {
  const g = globals(cmd);
  let value: unknown;
  try {
    value = json === undefined ? null : JSON.parse(json);
  } catch (err) {
    throw usageError(`The signal value must be JSON (got ${JSON.stringify(json)}: ${(err as Error).message}). Quote it for the shell, e.g. '{"approved":true}'.`);
  }
  let result: { message: string; signalId: string };
  if (isPostgresUrl(g.store)) {
    const loaded = g.codecs === undefined ? undefined : await loadCodecsModule(g.codecs);
    const store = await openPostgresCliStore(g.store, { create: false, write: true });
    try {
      const engine = await Engine.openForOperator({
        store,
        logger: { info: () => {}, warn: () => {}, error: () => {} },
        owner: `${hostname()}|turnlog-cli`,
        ...(loaded ? { payloadCodecs: loaded.codecs, ...(loaded.converter ? { payloadConverter: loaded.converter } : {}) } : {}),
      });
      try {
        const signalId = await engine.signal(taskId, name, value);
        result = { action: 'signal', done: true, signalId, message: `signal ${signalId} sent to task ${taskId}` } as typeof result;
      } finally {
        await engine.shutdown();
      }
    } finally {
      await store.close();
    }
  } else {
    const engine = await connectLiveEngine(g.store);
    if (!engine) {
      throw new TurnlogError('TURNLOG_INSPECT_SOCKET', `No running engine answers on store ${g.store}: a signal is appended by the engine that holds the store. Start the engine (with inspect on, the default) and run this again.`);
    }
    try {
      result = await engine.action<{ message: string; signalId: string }>('signal', { taskId, name, value });
    } finally {
      engine.close();
    }
  }
  if (g.json) await printJSON(result);
  else await printText(result.message);
}

function common(c: Command): Command {
  return c
    .option('--by <who>', 'who is acting, recorded in the history (default: the OS user)')
    .option('--reason <text>', 'why, recorded in the history')
    .option('-y, --yes', 'do not ask for confirmation (required without a terminal)');
}

/** Registers `cancel`, `withdraw`, `resend`, `resume` and `signal` on the program. */
export function registerOperatorActions(program: Command): void {
  program
    .command('signal')
    .description("send a named signal to a task (ends its turn's ctx.waitFor(name), or waits buffered until one does)")
    .argument('<task>', 'task id')
    .argument('<name>', 'the signal name')
    .argument('[json]', 'the value, as JSON (default null)')
    .action(async (taskId: string, name: string, json: string | undefined, _flags: unknown, cmd: Command) => {
      await signal(cmd, taskId, name, json);
    });
  common(
    program
      .command('cancel')
      .description('cancel a task (or, with --turn, only its open turn) in the running engine')
      .argument('<task>', 'task id')
      .option('--turn', 'cancel only the open turn; a multi-turn task stays open for more input'),
  ).action(async (taskId: string, flags: ActionFlags & { turn?: boolean }, cmd: Command) => {
    const scope = flags.turn ? 'turn' : 'task';
    await act(cmd, scope === 'turn' ? `Cancel the open turn of task ${taskId}?` : `Cancel task ${taskId}? It will never run again.`, 'cancel', { taskId, scope }, flags);
  });
  common(
    program
      .command('withdraw')
      .description('withdraw a queued input that no turn has taken yet')
      .argument('<task>', 'task id')
      .argument('<input>', 'the queued input id (turnlog show lists the queue)'),
  ).action(async (taskId: string, inputId: string, flags: ActionFlags, cmd: Command) => {
    await act(cmd, `Withdraw input ${inputId} of task ${taskId}?`, 'withdraw', { taskId, inputId }, flags);
  });
  common(
    program
      .command('resend')
      .description("re-send a failed (or timed-out) turn's input as a new turn")
      .argument('<task>', 'task id')
      .argument('<turn>', 'the turn number', positiveInt),
  ).action(async (taskId: string, turn: number, flags: ActionFlags, cmd: Command) => {
    await act(cmd, `Re-send the input of turn ${turn} of task ${taskId} as a new turn?`, 'resend', { taskId, turn }, flags);
  });
  common(
    program
      .command('resume')
      .description("resume a task whose last turn failed (e.g. NonDeterminismError after a code change): run that turn's input again on the code now deployed")
      .argument('<task>', 'task id'),
  ).action(async (taskId: string, flags: ActionFlags, cmd: Command) => {
    await act(cmd, `Resume task ${taskId} by running its last failed turn's input again?`, 'resume', { taskId }, flags);
  });
}
