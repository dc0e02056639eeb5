/**
 * The engine's parts, wired once per engine: each job of the facade in its own module
 * (docs/architecture.md "The engine"). The parts see the `Runtime` view and each other, never
 * the `Engine`; the few public calls they make on it (a child's result, a cascaded cancel,
 * `turnlog signal`) are lent as {@link FacadeCalls}.
 */
import type { Executor } from '../executor/executor.js';
import type { ExecutorKind } from '../history/events.js';
import type { TurnResult } from '../client/task-client.js';
import { Appender } from './appender.js';
import { Cancels } from './cancels.js';
import { Children } from './children.js';
import { Driver } from './driver.js';
import { FaultInjector } from './fault.js';
import { Inputs } from './inputs.js';
import { OperatorActions } from './operator-actions.js';
import { Reads } from './reads.js';
import { TurnResults } from './results.js';
import type { Runtime } from './runtime.js';
import { Scanner } from './scanner.js';
import { Streams } from './streams.js';
import { Supervisor } from './supervisor.js';
import { TaskCache } from './task-cache.js';
import { Waits } from './waits.js';
import { Wakeups } from './wakeups.js';
import { Watcher } from './watcher.js';

/** The facade's public calls the parts make. */
export interface FacadeCalls {
  turnResult(taskId: string, inputId: string): Promise<TurnResult>;
  cancel(taskId: string, reason: string): Promise<void>;
  /** engine.signal, its open check included. */
  signal(taskId: string, name: string, value: unknown): Promise<string>;
}

export interface Parts {
  readonly cache: TaskCache;
  readonly results: TurnResults;
  readonly streams: Streams;
  readonly appender: Appender;
  readonly supervisor: Supervisor;
  readonly wakeups: Wakeups;
  readonly children: Children;
  readonly waits: Waits;
  readonly driver: Driver;
  readonly watcher: Watcher;
  readonly scanner: Scanner;
  readonly inputs: Inputs;
  readonly cancels: Cancels;
  readonly reads: Reads;
  readonly operator: OperatorActions;
}

export function wireParts(rt: Runtime, executors: Map<ExecutorKind, Executor>, facade: FacadeCalls): Parts {
  // Parts that call each other are bound late (the appender and the supervisor, the driver).
  let supervisor!: Supervisor;
  let driver!: Driver;
  let scanner!: Scanner;
  let inputs!: Inputs;
  const cache = new TaskCache(rt);
  const results = new TurnResults(rt);
  // Turn-result waiters listen on the seam like any observer (they also need the cached entry).
  rt.observers.onAppend((t, before, events) => results.afterAppend(t, before, events));
  const streams = new Streams(rt, cache, results);
  const appender = new Appender(
    rt,
    cache,
    FaultInjector.fromEnv(),
    (t, err) => supervisor.fence(t, err),
    (t) => supervisor.afterRefresh(t),
  );
  supervisor = new Supervisor(rt, cache, results, appender, (t) => driver.drive(t));
  const wakeups = new Wakeups(rt, (id) => scanner.wake(id));
  const children = new Children(rt, {
    create: (id, wf, input, parent) => inputs.createChild(id, wf, input, parent),
    turnResult: (id, inputId) => facade.turnResult(id, inputId),
    cancel: (id, reason) => facade.cancel(id, reason),
  });
  const waits = new Waits(rt, cache, appender);
  rt.observers.onAppend((t, _before, events) => waits.afterAppend(t, events));
  driver = new Driver(rt, executors, cache, appender, supervisor, (id, at) => wakeups.add(id, at), waits, children);
  const watcher = new Watcher(rt, cache, appender, results, (t) => driver.drive(t));
  scanner = new Scanner(rt, cache, driver, () => watcher.poll());
  inputs = new Inputs(rt, cache, driver, appender);
  const cancels = new Cancels(rt, cache, appender, supervisor, driver, children);
  const reads = new Reads(rt, cache, results);
  const operator = new OperatorActions(rt, cache, inputs, cancels, (id, name, value) => facade.signal(id, name, value));
  return { cache, results, streams, appender, supervisor, wakeups, children, waits, driver, watcher, scanner, inputs, cancels, reads, operator };
}
