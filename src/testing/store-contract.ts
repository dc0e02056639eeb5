/**
 * The HistoryStore contract suite, exported from `turnlog/testing` so a third-party store can
 * prove itself (abstract-level's pattern: the suite takes the test framework's functions and a
 * factory). The Level, memory and PostgreSQL stores run it through this export. See
 * docs/storage.md "Proving a store".
 *
 * @example
 * import * as vitest from 'vitest';
 * import { MemoryHistoryStore, storeContract } from 'turnlog/testing';
 * storeContract(vitest, 'MemoryHistoryStore', async () => {
 *   const store = new MemoryHistoryStore();
 *   await store.open();
 *   return { store, dispose: () => store.close() };
 * }, { callerClock: true });
 */
import { isTurnlogError, type ErrorCode } from '../errors.js';
import type { AppendResult, HistoryStore } from '../store/history-store.js';
import { appendContract } from './store-contract-append.js';
import { leaseContract } from './store-contract-leases.js';
import { readContract } from './store-contract-reads.js';
import { upkeepContract } from './store-contract-upkeep.js';
import { created, queued } from './store-events.js';

/** The assertions the suite uses; vitest's and jest's `expect` have them. */
export interface ContractAssertion {
  toBe(expected: unknown): void;
  toEqual(expected: unknown): void;
  toMatchObject(expected: object): void;
  toBeUndefined(): void;
  toBeDefined(): void;
  toHaveLength(length: number): void;
  toBeLessThanOrEqual(n: number): void;
  toContain(item: unknown): void;
}

/**
 * The test framework's functions, e.g. `import * as vitest from 'vitest'` (the suite imports no
 * framework itself, so `turnlog/testing` does not depend on one).
 */
export interface ContractTestApi {
  describe(name: string, fn: () => void): void;
  it(name: string, fn: () => Promise<void> | void): void;
  beforeEach(fn: () => Promise<void>): void;
  afterEach(fn: () => Promise<void>): void;
  expect(actual: unknown, message?: string): ContractAssertion;
}

export interface StoreFixture {
  store: HistoryStore;
  /** Closes the store and opens the same data again (persistent backends only). */
  reopen?: () => Promise<HistoryStore>;
  dispose(): Promise<void>;
}


/** What a backend can do beyond the core contract; gates the tests that need it. */
export interface StoreCapabilities {
  /** Data survives close + open (the fixture provides `reopen`). */
  persistent?: boolean;
  /**
   * Lease expiry follows the caller's `now` (Level, memory). A store that decides expiry on its
   * own clock (PostgreSQL: the database's) runs the tests that need synthetic time in its own suite.
   */
  callerClock?: boolean;
  /** Opening proves earlier writers dead (`store.supports.exclusive`); default true. */
  exclusive?: boolean;
}

/**
 * What each part of the suite (store-contract-*.ts) registers its tests with: the framework's
 * functions, the fixture of the running test (set in `beforeEach`; a reopen replaces `store`) and
 * the helpers every part shares.
 * @internal
 */
export interface ContractSuite extends ContractTestApi {
  capabilities: StoreCapabilities;
  fx: StoreFixture;
  store: HistoryStore;
  /** `it` where lease expiry follows the caller's `now`; registers nothing elsewhere (no skipped test reported). */
  callerClockIt: ContractTestApi['it'];
  rejectsWith(p: Promise<unknown>, code: ErrorCode): Promise<Error>;
  req(owner: string, instance: string, now: number, durationMs?: number): { owner: string; instance: string; now: number; durationMs: number };
  /** Creates task `id` with TaskCreated + InputQueued under generation `gen`. */
  createTask(id: string, opts?: { workflow?: string; kind?: 'one-shot' | 'multi-turn'; gen?: number }): Promise<AppendResult>;
}

/** Registers the contract's tests (`describe`/`it`) for the store `factory` makes; call it at a test file's top level. */
export function storeContract(api: ContractTestApi, name: string, factory: () => Promise<StoreFixture>, capabilities: StoreCapabilities = {}): void {
  const suite: ContractSuite = {
    ...api,
    capabilities,
    fx: undefined as unknown as StoreFixture,
    store: undefined as unknown as HistoryStore,
    // Registered only where expiry follows the caller's `now`, so no test is reported as skipped.
    callerClockIt: capabilities.callerClock ? api.it : () => undefined,
    async rejectsWith(p, code) {
      const err = await p.then(
        () => undefined,
        (e: unknown) => e,
      );
      api.expect(isTurnlogError(err, code), `expected ${code}, got ${String(err)}`).toBe(true);
      return err as Error;
    },
    req: (owner, instance, now, durationMs = 1_000) => ({ owner, instance, now, durationMs }),
    createTask(id, opts = {}) {
      const generation = opts.gen ?? 1;
      const c = { workflow: opts.workflow ?? 'wf', kind: opts.kind ?? 'one-shot', generation };
      return suite.store.append(id, [created(1, c), queued(2, 'in-1', { generation })], { expectedLastEventId: 0, generation });
    },
  };
  api.describe(`HistoryStore contract: ${name}`, () => {
    api.beforeEach(async () => {
      suite.fx = await factory();
      suite.store = suite.fx.store;
    });
    api.afterEach(async () => {
      await suite.fx.dispose();
    });

    api.it(capabilities.exclusive === false ? 'is not exclusive' : 'is exclusive', () => {
      const { expect, store } = suite;
      expect(store.exclusive).toBe(capabilities.exclusive !== false);
      expect(store.supports.exclusive).toBe(store.exclusive);
      for (const k of ['watch', 'claim', 'groupCommit'] as const) expect(typeof store.supports[k]).toBe('boolean');
      expect(typeof store.location).toBe('string');
    });
    appendContract(suite);
    leaseContract(suite);
    readContract(suite);
    upkeepContract(suite);
  });
}
