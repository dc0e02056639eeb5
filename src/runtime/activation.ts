/**
 * What one activation of the engine opens, and its undoing (docs/snapshots.md, docs/recovery.md):
 * the identity, the store, the flow limiter, the live-inspection socket, the watcher, the
 * periodic scanner and the recovery pass at open; quiescing stops them all and leaves history
 * and leases to recovery. The facade (engine.ts) keeps the state machine (inactive, activating,
 * open, quiescing, closed) and calls these steps in its order.
 */
import { hostname } from 'node:os';
import { nanoid } from 'nanoid';
import { invalidArgument } from '../errors.js';
import type { ExecutorKind } from '../history/events.js';
import { illFormedText } from '../history/well-formed.js';
import type { FlowLimitStore, HistoryStore } from '../store/history-store.js';
import type { Executor } from '../executor/executor.js';
import { resolvePolicy } from '../workflow/define-workflow.js';
import type { InspectServer } from '../inspect/server.js';
import { startInspection } from './inspection.js';
import { LocalLimiter, SharedLimiter, type Limiter } from './limits.js';
import type { ActivateOptions, EngineSettings } from './options.js';
import type { Parts } from './parts.js';
import type { Runtime } from './runtime.js';

export class Activation {
  readonly #rt: Runtime;
  readonly #o: EngineSettings;
  readonly #p: Parts;
  readonly #executors: Map<ExecutorKind, Executor>;
  store: HistoryStore | undefined;
  owner: string | undefined;
  instance: string | undefined;
  /** The recovery pass this activation started at open. */
  recovery: Promise<void> = Promise.resolve();
  /** Flow limits of steps (docs/time.md#flow-limits); a new one per activation. */
  limiter: Limiter;
  /** The live-inspection socket while open (docs/cli.md#live-inspection). */
  #inspection: InspectServer | undefined;
  /** Stops telling observers the store's group commits (HistoryStore.onCommit). */
  #unwatchCommits: (() => void) | undefined;

  constructor(rt: Runtime, parts: Parts, executors: Map<ExecutorKind, Executor>) {
    this.#rt = rt;
    this.#o = rt;
    this.#p = parts;
    this.#executors = executors;
    this.limiter = new LocalLimiter(rt.flowLimits, rt.clock);
  }

  /** Identity, executors' checks, the store opened, the limiter, corrupt tasks isolated. */
  async open(options: ActivateOptions): Promise<void> {
    const phase = options.onPhase ?? (() => undefined);
    this.owner = options.owner ?? this.#o.ownerOption ?? `${hostname()}|turnlog`;
    this.instance = options.instance ?? this.#o.instanceOption ?? `engine-${process.pid}-${nanoid(8)}`;
    // Both are written into every TurnStarted and LeaseClaimed: refuse what has no UTF-8 form.
    if (!this.owner.isWellFormed()) throw invalidArgument(`${illFormedText('Engine owner', this.owner)}.`);
    if (!this.instance.isWellFormed()) throw invalidArgument(`${illFormedText('Engine instance', this.instance)}.`);
    // Executors check their set-up (a process executor's module) before anything is opened.
    await this.#checkExecutors();
    await phase('open');
    this.store = await this.#makeStore();
    await this.store.open();
    if (this.store.supports.flowLimits && this.#o.flowLimits.size > 0) {
      this.limiter = new SharedLimiter(this.store as FlowLimitStore, this.#o.flowLimits, this.#o.clock, this.instance, this.#o.leaseMs);
    }
    this.#unwatchCommits = this.store.onCommit?.((writes) => this.#rt.observers.groupCommitted(writes));
    for (const m of await this.store.listCorrupt()) {
      this.#p.cache.markCorrupt(m);
      this.#o.log.error('task isolated: its stored history cannot be read', { taskId: m.taskId, key: m.key, error: m.message });
    }
  }

  /** Once open (not for an operator engine): the socket, the watcher, the scanner, recovery. */
  async start(options: ActivateOptions): Promise<void> {
    const phase = options.onPhase ?? (() => undefined);
    this.#inspection = await startInspection(this.#rt, this.#o.inspect, (op, args) => this.#p.operator.fromSocket(op, args));
    this.#p.watcher.start();
    // Scanner before recovery: every phase that can fail runs before any turn starts, so a
    // rolled-back activation never ran (nor interrupted) a handler (test: lifecycle "scanner fails twice").
    await phase('scanner');
    this.#p.scanner.arm();
    await phase('recovery');
    // Recovery runs in the background: open returns at once and serves new work meanwhile
    // (docs/recovery.md "What Engine.open waits for"); `recovered()` waits for this pass.
    const pass = this.#p.scanner.pass();
    pass.catch((err: unknown) => this.#o.log.error('recovery at open failed; the periodic scan retries', { error: err }));
    this.recovery = pass;
  }

  /** Stops everything this activation started; leaves history and leases for recovery. */
  async quiesce(graceMs: number): Promise<void> {
    this.#p.streams.reset();
    await this.#inspection?.close();
    this.#inspection = undefined;
    this.#p.watcher.stop();
    this.#unwatchCommits?.();
    this.#unwatchCommits = undefined;
    await this.#p.scanner.stop();
    this.#p.wakeups.stop();
    await this.#p.supervisor.stopAll(graceMs);
    this.limiter.close();
    this.limiter = new LocalLimiter(this.#o.flowLimits, this.#o.clock);
    await Promise.all([...this.#p.cache.entries()].map((t) => t.chain.catch(() => undefined)));
    for (const t of this.#p.cache.entries()) {
      // An error (and its stack) only for an entry someone waits on: shutting down with 10,000 cached tasks built 10,000.
      if (t.waiters.size === 0 && t.turnWaiters.length === 0) continue;
      this.#p.results.rejectAll(t, this.#p.results.deferred(t.id, t.state?.turn ?? 0, 'the engine shut down before the turn ended; the next engine recovers it'));
    }
    this.#p.cache.clear();
    for (const ex of new Set(this.#executors.values())) await ex.close().catch((err) => this.#o.log.warn('executor close failed', { error: err }));
    if (this.store && typeof this.#o.storeSpec === 'string') await this.store.close();
    this.store = undefined;
  }

  async #makeStore(): Promise<HistoryStore> {
    if (typeof this.#o.storeSpec !== 'string') return this.#o.storeSpec;
    if (/^postgres(ql)?:\/\//i.test(this.#o.storeSpec)) {
      // A URL is a PostgreSQL store, never a LevelDB directory named `postgres:`.
      const { createPostgresStore, parsePostgresUrl } = await import('../store/postgres-store.js');
      return createPostgresStore(parsePostgresUrl(this.#o.storeSpec));
    }
    // Loaded on first activation, never at import: native modules cannot be in a startup snapshot.
    const { LevelHistoryStore } = await import('../store/level-store.js');
    return new LevelHistoryStore(this.#o.storeSpec);
  }

  async #checkExecutors(): Promise<void> {
    for (const [kind, ex] of this.#executors) {
      if (!ex.check) continue;
      const mine = [...this.#o.workflows.values()].filter((wf) => resolvePolicy(wf, this.#o.defaultExecutor).executor === kind);
      if (mine.length > 0) await ex.check(mine);
    }
  }
}
