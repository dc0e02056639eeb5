import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Level } from 'level';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { isTurnlogError } from '../../src/errors.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { describeKey, eventKey, summaryKey } from '../../src/store/keys.js';
import { openStore } from '../../src/store/index.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';
import * as vitest from 'vitest';
import { storeContract } from '../../src/testing/index.js';
import { created, queued, started, step, steps, taskCompleted, turnCompleted } from './events.js';

storeContract(
  vitest,
  'LevelHistoryStore',
  async () => {
    const dir = await makeTmpDir('turnlog-store-');
    let store = new LevelHistoryStore(dir.path);
    await store.open();
    return {
      get store() {
        return store;
      },
      reopen: async () => {
        await store.close();
        store = new LevelHistoryStore(dir.path);
        await store.open();
        return store;
      },
      dispose: async () => {
        await store.close();
        await dir.remove();
      },
    };
  },
  { persistent: true, callerClock: true },
);

/** Records classic-level's reads (get, getMany, iterators) of every database until `restore()`. */
async function spyReads(): Promise<{ reads: string[]; restore: () => void }> {
  const { ClassicLevel } = await import('classic-level');
  const proto = ClassicLevel.prototype as unknown as Record<string, (...a: unknown[]) => unknown>;
  const reads: string[] = [];
  const originals = new Map<string, (...a: unknown[]) => unknown>();
  for (const m of ['_get', '_getMany', '_iterator']) {
    const orig = proto[m]!;
    originals.set(m, orig);
    proto[m] = function (this: unknown, ...a: unknown[]) {
      reads.push(m);
      return orig.apply(this, a);
    };
  }
  return { reads, restore: () => originals.forEach((f, m) => (proto[m] = f)) };
}

const lockChild = fileURLToPath(new URL('../fixtures/children/hold-store-lock.mjs', import.meta.url));

describe('LevelHistoryStore on disk', () => {
  let dir: Awaited<ReturnType<typeof makeTmpDir>>;
  let child: ChildProcess | undefined;
  beforeEach(async () => {
    dir = await makeTmpDir('turnlog-level-');
  });
  afterEach(async () => {
    if (child && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child!.once('exit', r));
      child.kill('SIGKILL');
      await exited;
    }
    child = undefined;
    await dir.remove();
  });

  /** Writes raw bytes under a key with plain `level`, as a disk fault or a bug would. */
  async function writeRaw(key: Uint8Array, value: Uint8Array | undefined): Promise<void> {
    const db = new Level<Buffer, Buffer>(dir.path, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
    await db.open();
    if (value === undefined) await db.del(Buffer.from(key));
    else await db.put(Buffer.from(key), Buffer.from(value));
    await db.close();
  }

  it('a directory held by another process gives StoreLockedError naming the path, and loses nothing', async () => {
    const store = new LevelHistoryStore(dir.path);
    await store.open();
    await store.append('t1', [created(1), queued(2, 'x')], { expectedLastEventId: 0, generation: 1 });
    await store.close();

    child = spawn(process.execPath, [lockChild, dir.path], { stdio: ['pipe', 'pipe', 'inherit'] });
    await new Promise<void>((resolve, reject) => {
      let out = '';
      child!.stdout!.on('data', (b: Buffer) => {
        out += b.toString();
        if (out.includes('ready\n')) resolve();
      });
      child!.once('exit', (code) => reject(new Error(`lock holder exited early (${code})`)));
    });

    const second = new LevelHistoryStore(dir.path);
    const err = await second.open().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isTurnlogError(err, 'TURNLOG_STORE_LOCKED')).toBe(true);
    expect((err as Error).message).toContain(dir.path);
    expect((err as { location: string }).location).toBe(dir.path);

    const exited = new Promise((r) => child!.once('exit', r));
    child.stdin!.end();
    await exited;
    await second.open();
    expect((await second.readEvents('t1')).map((e) => e.eventId)).toEqual([1, 2]);
    await second.close();
  });

  it('voids leases left by an earlier process: the lock proves it dead, so a new owner claims at once', async () => {
    let store = new LevelHistoryStore(dir.path);
    await store.open();
    const t = Date.now();
    const theirs = { owner: 'old-session', instance: 'old-1', generation: 1, expiresAt: t + 3_600_000 };
    await store.append('t1', [created(1, { time: t }), started(2, 1, { time: t })], { expectedLastEventId: 0, generation: 1, lease: theirs });
    // Same process: the live foreign lease is honoured.
    await expect(store.claimLease('t1', { owner: 'new-session', instance: 'new-1', durationMs: 1000, now: t })).rejects.toMatchObject({ code: 'TURNLOG_LEASE_HELD' });
    await store.close();

    store = new LevelHistoryStore(dir.path);
    await store.open();
    expect((await store.getLease('t1'))!.expiresAt).toBe(0);
    expect(await store.listRecoverable(t, 'new-1')).toEqual(['t1']);
    const ours = await store.claimLease('t1', { owner: 'new-session', instance: 'new-1', durationMs: 1000, now: t });
    expect(ours.generation).toBe(2); // the voided lease still fences: generation goes up
    await store.close();
  });

  it('a claim after reopening loads the page\'s heads in one read: appends, fencing, leases and snapshots behave as without it', async () => {
    let store = new LevelHistoryStore(dir.path);
    await store.open();
    const t = Date.now();
    const lease = { owner: 'old', instance: 'old-1', generation: 2, expiresAt: t + 3_600_000 };
    for (const id of ['a', 'b', 'stale']) {
      await store.append(id, [created(1, { time: t, generation: 2 }), started(2, 1, { time: t, generation: 2 })], { expectedLastEventId: 0, generation: 2, lease });
    }
    await store.putSnapshot('a', { eventId: 2, data: new Uint8Array([7]) });
    await store.close();
    // A summary behind its history (as a fault could leave it): that task is not primed, and its
    // head loads as before (rebuilding the summary).
    const db = new Level<Buffer, Buffer>(dir.path, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
    await db.open();
    const oldSummary = await db.get(Buffer.from(summaryKey('stale')));
    await db.close();
    store = new LevelHistoryStore(dir.path);
    await store.open();
    await store.append('stale', [step(3, 1, { generation: 2 })], { expectedLastEventId: 2, generation: 2 });
    await store.close();
    await writeRaw(summaryKey('stale'), oldSummary!);

    store = new LevelHistoryStore(dir.path);
    await store.open();
    const batch = await store.claimDueWork({ now: t, instance: 'new-1', limit: 10 });
    expect(batch.tasks.map((d) => d.taskId)).toEqual(['a', 'b', 'stale']);
    // Leases from the earlier process are void; generations still fence.
    expect(await store.getLease('a')).toEqual({ ...lease, expiresAt: 0 });
    await expect(store.append('a', [step(3, 1)], { expectedLastEventId: 2, generation: 1 })).rejects.toMatchObject({ code: 'TURNLOG_STALE_GENERATION' });
    await expect(store.append('a', [step(2, 1, { generation: 2 })], { expectedLastEventId: 1, generation: 2 })).rejects.toMatchObject({ code: 'TURNLOG_CONCURRENCY' });
    await store.append('a', [step(3, 1, { generation: 2 })], { expectedLastEventId: 2, generation: 2 });
    expect((await store.getSummary('a'))!.lastEventId).toBe(3);
    // The snapshot read with the page is the stored one; a later write replaces it.
    expect([...(await store.getSnapshot('a'))!.data]).toEqual([7]);
    await store.putSnapshot('a', { eventId: 3, data: new Uint8Array([8]) });
    expect([...(await store.getSnapshot('a'))!.data]).toEqual([8]);
    expect(await store.getSnapshot('b')).toBeUndefined();
    await store.append('stale', [step(4, 2, { generation: 2 })], { expectedLastEventId: 3, generation: 2 });
    expect((await store.readEvents('stale')).map((e) => e.eventId)).toEqual([1, 2, 3, 4]);
    await store.close();
  });

  it('a claim after reopening reads short tails with the heads: the next read of each opens no iterator, and every read returns what is stored', async () => {
    let store = new LevelHistoryStore(dir.path);
    await store.open();
    const t = Date.now();
    const g = { time: t, generation: 1 };
    const open = (id: string, more: number) => store.append(id, [created(1, g), started(2, 1, g), ...steps(3, more)], { expectedLastEventId: 0, generation: 1 });
    for (const id of ['a', 'b', 'c', 'd', 'e']) await open(id, 2);
    await open('long', 80); // past the read-ahead: read by the iterator as before
    await store.putSnapshot('a', { eventId: 3, data: new Uint8Array([7]) });
    await store.close();

    store = new LevelHistoryStore(dir.path);
    await store.open();
    const claimReads = vi.spyOn(Level.prototype, 'getMany');
    const batch = await store.claimDueWork({ now: t, instance: 'new-1', limit: 10 });
    expect(batch.tasks.map((d) => d.taskId)).toEqual(['a', 'b', 'c', 'd', 'e', 'long']);
    // No record is read twice: the last event, read to check the summary, is not read again with the tail.
    const keysRead = claimReads.mock.calls.flatMap(([keys]) => (keys as Buffer[]).map((k) => k.toString('hex')));
    expect(new Set(keysRead).size).toBe(keysRead.length);
    claimReads.mockRestore();
    const iterator = vi.spyOn(Level.prototype, 'iterator');
    try {
      const ids = async (id: string, from?: number) => (await store.readEvents(id, from === undefined ? {} : { fromEventId: from })).map((e) => e.eventId);
      // What the task cache reads next: the tail after the snapshot, or the whole short history,
      // read with the heads (the last event, which the head was read from, decoded once): no read now.
      const getMany = vi.spyOn(Level.prototype, 'getMany');
      expect((await store.getSnapshot('a'))!.eventId).toBe(3);
      const hintedA = await store.readEvents('a', { fromEventId: 4 });
      const hintedB = await store.readEvents('b');
      expect(hintedA.map((e) => e.eventId)).toEqual([4]);
      expect(hintedB.map((e) => e.eventId)).toEqual([1, 2, 3, 4]);
      expect(iterator).not.toHaveBeenCalled();
      expect(getMany).not.toHaveBeenCalled();
      // A limit below the hinted tail (its events and the last): read from disk, the limit kept.
      expect((await store.readEvents('e', { limit: 3 })).map((e) => e.eventId)).toEqual([1, 2, 3]);
      iterator.mockClear();
      // Once taken, or another range: read from disk, by keys (the loaded head bounds the span).
      expect(await store.readEvents('a', { fromEventId: 4 })).toEqual(hintedA);
      expect(await store.readEvents('b')).toEqual(hintedB);
      getMany.mockClear();
      expect(await ids('b')).toEqual([1, 2, 3, 4]);
      expect(await ids('e', 2)).toEqual([2, 3, 4]);
      expect(getMany).toHaveBeenCalledTimes(2);
      // A write of the task's events in between is seen.
      await store.append('c', [step(5, 3, g)], { expectedLastEventId: 4, generation: 1 });
      expect(await ids('c')).toEqual([1, 2, 3, 4, 5]);
      expect((await ids('long')).length).toBe(82);
      expect(await ids('long', 80)).toEqual([80, 81, 82]);
      expect(iterator).not.toHaveBeenCalled();
      getMany.mockRestore();
      // No head (deleted), or a limit below the span: the iterator reads.
      await store.deleteTask('d');
      expect(await ids('d')).toEqual([]);
      expect((await store.readEvents('long', { fromEventId: 70, limit: 5 })).map((e) => e.eventId)).toEqual([70, 71, 72, 73, 74]);
      expect(iterator).toHaveBeenCalledTimes(2);
    } finally {
      iterator.mockRestore();
    }
    await store.close();
  });

  it('readTaskStart of a claimed task takes the claim\'s snapshot, tail and lease without a read, once; then, or after a write, it reads what is stored', async () => {
    let store = new LevelHistoryStore(dir.path);
    await store.open();
    const t = Date.now();
    const g = { time: t, generation: 1 };
    const lease = { owner: 'old', instance: 'old-1', generation: 1, expiresAt: t + 3_600_000 };
    for (const id of ['a', 'b', 'c', 'd']) await store.append(id, [created(1, g), started(2, 1, g), ...steps(3, 2)], { expectedLastEventId: 0, generation: 1, lease });
    await store.putSnapshot('a', { eventId: 3, data: new Uint8Array([7]) });
    await store.close();

    store = new LevelHistoryStore(dir.path);
    await store.open();
    await store.claimDueWork({ now: t, instance: 'new-1', limit: 10 });
    const reads = ['getMany', 'get', 'iterator'].map((m) => vi.spyOn(Level.prototype, m as 'get'));
    try {
      const a = await store.readTaskStart('a', 1_000);
      const b = await store.readTaskStart('b', 1_000);
      for (const r of reads) expect(r).not.toHaveBeenCalled();
      expect(a.snapshot).toEqual({ eventId: 3, data: new Uint8Array([7]) });
      expect(a.events.map((e) => e.eventId)).toEqual([4]);
      expect(b.snapshot).toBeUndefined();
      expect(b.events.map((e) => e.eventId)).toEqual([1, 2, 3, 4]);
      // A lease from the earlier process is void at once, as getLease has it.
      expect(a.lease).toEqual({ ...lease, expiresAt: 0 });
      // Taken once: the next call reads, and finds the same.
      expect(await store.readTaskStart('a', 1_000)).toEqual(a);
      expect(await store.readTaskStart('b', 1_000)).toEqual(b);
      expect(reads[0]).toHaveBeenCalled();
      // A limit below the hinted tail reads, the limit kept.
      expect((await store.readTaskStart('c', 2)).events.map((e) => e.eventId)).toEqual([1, 2]);
    } finally {
      for (const r of reads) r.mockRestore();
    }
    // A write after the claim: what is stored now, not the hint.
    await store.append('d', [step(5, 3, g)], { expectedLastEventId: 4, generation: 1 });
    expect((await store.readTaskStart('d', 1_000)).events.map((e) => e.eventId)).toEqual([1, 2, 3, 4, 5]);
    await store.close();
  });

  it('takeTaskStart gives a claimed task\'s start synchronously and once, as readTaskStart would read it; undefined without a claim\'s read', async () => {
    let store = new LevelHistoryStore(dir.path);
    await store.open();
    const t = Date.now();
    const g = { time: t, generation: 1 };
    const lease = { owner: 'old', instance: 'old-1', generation: 1, expiresAt: t + 3_600_000 };
    for (const id of ['a', 'b']) await store.append(id, [created(1, g), started(2, 1, g), ...steps(3, 2)], { expectedLastEventId: 0, generation: 1, lease });
    await store.close();

    store = new LevelHistoryStore(dir.path);
    await store.open();
    expect(store.takeTaskStart('a', 1_000)).toBeUndefined(); // nothing claimed yet
    await store.claimDueWork({ now: t, instance: 'new-1', limit: 10 });
    const reads = ['getMany', 'get', 'iterator'].map((m) => vi.spyOn(Level.prototype, m as 'get'));
    let a;
    try {
      a = store.takeTaskStart('a', 1_000);
      for (const r of reads) expect(r).not.toHaveBeenCalled();
    } finally {
      for (const r of reads) r.mockRestore();
    }
    expect(a?.events.map((e) => e.eventId)).toEqual([1, 2, 3, 4]);
    expect(a?.snapshot).toBeUndefined();
    expect(a?.lease).toEqual({ ...lease, expiresAt: 0 });
    expect(store.takeTaskStart('a', 1_000)).toBeUndefined(); // taken once
    expect(await store.readTaskStart('a', 1_000)).toEqual(a); // the read finds the same
    // A write after the claim drops the hint: nothing to take, the read has the write.
    await store.append('b', [step(5, 3, g)], { expectedLastEventId: 4, generation: 1 });
    expect(store.takeTaskStart('b', 1_000)).toBeUndefined();
    expect((await store.readTaskStart('b', 1_000)).events.map((e) => e.eventId)).toEqual([1, 2, 3, 4, 5]);
    await store.close();
  });

  it('corrupt event bytes give HistoryCorruptError naming the key; other tasks still read', async () => {
    let store = new LevelHistoryStore(dir.path);
    await store.open();
    await store.append('bad', [created(1), ...steps(2, 3)], { expectedLastEventId: 0, generation: 1 });
    await store.append('good', [created(1)], { expectedLastEventId: 0, generation: 1 });
    await store.close();

    const key = eventKey('bad', 3);
    await writeRaw(key, new Uint8Array([0x0a, 0xff, 0xff, 0xff, 0x0f, 0x01]));
    store = new LevelHistoryStore(dir.path);
    await store.open();
    const err = await store.readEvents('bad').then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isTurnlogError(err, 'TURNLOG_HISTORY_CORRUPT')).toBe(true);
    expect((err as { key: string }).key).toBe(describeKey(key));
    expect((err as Error).message).toContain('events/bad/3');
    expect((await store.readEvents('bad', { toEventId: 2 })).length).toBe(2);
    expect((await store.readEvents('good')).length).toBe(1);
    await store.append('good', [step(2, 1)], { expectedLastEventId: 1, generation: 1 });
    await store.close();
  });

  it('deleteTask removes a task whose last event or summary cannot be decoded (so import --force can replace it)', async () => {
    let store = new LevelHistoryStore(dir.path);
    await store.open();
    await store.append('bad', [created(1, { workflow: 'wf' }), ...steps(2, 3)], { expectedLastEventId: 0, generation: 1 });
    await store.append('worse', [created(1, { workflow: 'wf' })], { expectedLastEventId: 0, generation: 1 });
    await store.append('good', [created(1, { workflow: 'wf' })], { expectedLastEventId: 0, generation: 1 });
    await store.markCorrupt({ taskId: 'bad', key: 'events/bad/4', code: 'TURNLOG_HISTORY_CORRUPT', message: 'x', time: 0 });
    await store.close();
    await writeRaw(eventKey('bad', 4), new Uint8Array([0xff]));
    await writeRaw(summaryKey('worse'), new TextEncoder().encode('{not json'));
    store = new LevelHistoryStore(dir.path);
    await store.open();
    await expect(store.append('bad', [step(5, 1)], { expectedLastEventId: 4, generation: 1 })).rejects.toMatchObject({ code: 'TURNLOG_HISTORY_CORRUPT' });
    await store.deleteTask('bad');
    await store.deleteTask('worse');
    expect(await store.readEvents('bad')).toEqual([]);
    expect(await store.readEvents('worse')).toEqual([]);
    expect(await store.listCorrupt()).toEqual([]);
    expect((await store.listTasks()).tasks.map((t) => t.taskId)).toEqual(['good']);
    expect((await store.listTasks({ status: 'pending' })).tasks.map((t) => t.taskId)).toEqual(['good']);
    expect((await store.listTasks({ workflow: 'wf' })).tasks.map((t) => t.taskId)).toEqual(['good']);
    // The id is free again.
    await store.append('bad', [created(1)], { expectedLastEventId: 0, generation: 1 });
    expect((await store.readEvents('bad')).length).toBe(1);
    await store.close();
  });

  it('an event stored under the wrong key is corrupt, not silently renumbered', async () => {
    let store = new LevelHistoryStore(dir.path);
    await store.open();
    await store.append('t1', [created(1), queued(2, 'a')], { expectedLastEventId: 0, generation: 1 });
    const first = await store.readEvents('t1', { toEventId: 1 });
    await store.close();
    const { encodeEvent } = await import('../../src/history/codec.js');
    await writeRaw(eventKey('t1', 2), encodeEvent(first[0]!));
    store = new LevelHistoryStore(dir.path);
    await store.open();
    await expect(store.readEvents('t1')).rejects.toMatchObject({ code: 'TURNLOG_HISTORY_CORRUPT', key: 'events/t1/2' });
    await store.close();
  });

  it('corrupt summary bytes give HistoryCorruptError naming the key', async () => {
    let store = new LevelHistoryStore(dir.path);
    await store.open();
    await store.append('t1', [created(1)], { expectedLastEventId: 0, generation: 1 });
    await store.close();
    await writeRaw(summaryKey('t1'), new TextEncoder().encode('{not json'));
    store = new LevelHistoryStore(dir.path);
    await store.open();
    await expect(store.getSummary('t1')).rejects.toMatchObject({ code: 'TURNLOG_HISTORY_CORRUPT', key: 'summary/t1' });
    await store.close();
  });

  it('listTasks and retention rebuild an unreadable summary from the history: one bad record does not fail every task\'s listing', async () => {
    let store = new LevelHistoryStore(dir.path);
    await store.open();
    for (const id of ['a', 'b', 'c']) await store.append(id, [created(1, { workflow: 'wf' }), queued(2, 'x')], { expectedLastEventId: 0, generation: 1 });
    await store.close();
    await writeRaw(summaryKey('a'), new TextEncoder().encode('{not json'));
    store = new LevelHistoryStore(dir.path);
    await store.open();
    for (const filter of [{}, { status: 'pending' as const }, { workflow: 'wf' }]) {
      const page = await store.listTasks(filter);
      expect(page.tasks.map((t) => [t.taskId, t.status, t.queued])).toEqual([
        ['a', 'pending', 1],
        ['b', 'pending', 1],
        ['c', 'pending', 1],
      ]);
    }
    expect(await store.purgeCompleted(0, Date.now())).toEqual([]);
    // With the history unreadable too there is nothing to rebuild from: the listing still says so.
    await store.close();
    await writeRaw(eventKey('a', 2), new Uint8Array([0xff]));
    store = new LevelHistoryStore(dir.path);
    await store.open();
    await expect(store.listTasks()).rejects.toMatchObject({ code: 'TURNLOG_HISTORY_CORRUPT', key: 'summary/a' });
    await store.close();
  });

  it('rebuilds a missing summary from the history (summaries are derived)', async () => {
    let store = new LevelHistoryStore(dir.path);
    await store.open();
    await store.append('t1', [created(1), queued(2, 'a'), queued(3, 'b')], { expectedLastEventId: 0, generation: 1 });
    await store.close();
    await writeRaw(summaryKey('t1'), undefined);
    store = new LevelHistoryStore(dir.path);
    await store.open();
    const res = await store.append('t1', [step(4, 1)], { expectedLastEventId: 3, generation: 1 });
    expect(res.summary).toMatchObject({ lastEventId: 4, queued: 2, workflow: 'wf' });
    expect(await store.getSummary('t1')).toMatchObject({ lastEventId: 4, queued: 2 });
    await store.close();
  });

  it('merges concurrent appends of many tasks into fewer batches', async () => {
    const store = new LevelHistoryStore(dir.path);
    await store.open();
    const before = store.commitStats;
    await Promise.all(
      Array.from({ length: 100 }, (_, i) => store.append(`t${i}`, [created(1)], { expectedLastEventId: 0, generation: 1 })),
    );
    const after = store.commitStats;
    expect(after.writes - before.writes).toBe(100);
    // The first append goes out alone; everything that arrives while it is written shares the next batch.
    expect(after.batches - before.batches).toBeLessThan(100);
    await store.close();
  });

  it('an append the caller vouches is fresh reads nothing, writes the task whole, and later appends check against it', async () => {
    const { reads, restore } = await spyReads();
    const store = new LevelHistoryStore(dir.path);
    try {
      await store.open();
      reads.length = 0;
      await store.append('fresh', [created(1), queued(2, 'in-1'), started(3, 1)], { expectedLastEventId: 0, generation: 1, fresh: true });
      expect(reads).toEqual([]);
      // The head it made is the one a load would have: a stale expectation is still refused.
      await expect(store.append('fresh', [step(4, 1)], { expectedLastEventId: 2, generation: 1 })).rejects.toSatisfy((e) => isTurnlogError(e, 'TURNLOG_CONCURRENCY'));
      await store.append('fresh', [step(4, 1)], { expectedLastEventId: 3, generation: 1 });
      // Without the flag a new task's head is read first (the store proves it new).
      reads.length = 0;
      await store.append('plain', [created(1)], { expectedLastEventId: 0, generation: 1 });
      expect(reads.length).toBeGreaterThan(0);
    } finally {
      restore();
    }
    await store.close();
    await store.open();
    expect((await store.readEvents('fresh')).map((e) => e.eventId)).toEqual([1, 2, 3, 4]);
    expect((await store.getSummary('fresh'))?.lastEventId).toBe(4);
    await store.close();
  });

  it('keeps at most maxCachedHeads heads: completed tasks are dropped oldest first and read again when touched; live ones stay', async () => {
    const { reads, restore } = await spyReads();
    const store = new LevelHistoryStore(dir.path, { maxCachedHeads: 10 });
    const done = (id: string) => store.append(id, [created(1), queued(2, 'in-1'), started(3, 1), turnCompleted(4, 1), taskCompleted(5)], { expectedLastEventId: 0, generation: 1, fresh: true });
    try {
      await store.open();
      // One live task first (the oldest head), then 30 completed ones.
      await store.append('live', [created(1), queued(2, 'in-1'), started(3, 1)], { expectedLastEventId: 0, generation: 1, fresh: true });
      for (let i = 0; i < 30; i++) await done(`done-${i}`);
      reads.length = 0;
      // The live task's head was kept: its append reads nothing.
      await store.append('live', [step(4, 1)], { expectedLastEventId: 3, generation: 1 });
      expect((await store.getSummary('done-29'))?.status).toBe('completed');
      expect(reads).toEqual([]);
      // An early completed task's head was dropped: touching it reads it back, and it is right.
      await expect(store.append('done-0', [step(6, 1)], { expectedLastEventId: 4, generation: 1 })).rejects.toSatisfy((e) => isTurnlogError(e, 'TURNLOG_CONCURRENCY'));
      expect(reads.length).toBeGreaterThan(0);
      expect((await store.getSummary('done-0'))?.status).toBe('completed');
    } finally {
      restore();
    }
    await store.close();
  });

  it('a claim does not prime a head from a read that a write and a head drop overtook (a task completed and dropped meanwhile)', async () => {
    let store = new LevelHistoryStore(dir.path);
    await store.open();
    await store.append('a', [created(1), queued(2, 'in-1'), started(3, 1)], { expectedLastEventId: 0, generation: 1 });
    await store.close();
    store = new LevelHistoryStore(dir.path, { maxCachedHeads: 1 });
    await store.open();
    // While the claim's read of the page's heads is in flight, the task ends (its head loads and
    // lands) and a new task's head pushes the completed one out of the cache.
    const { ClassicLevel } = await import('classic-level');
    const proto = ClassicLevel.prototype as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;
    const orig = proto._getMany!;
    let armed = true;
    proto._getMany = async function (this: unknown, ...a: unknown[]) {
      const out = await orig.apply(this, a);
      if (armed && (a[0] as unknown[]).length === 4) {
        armed = false;
        await store.append('a', [turnCompleted(4, 1), taskCompleted(5)], { expectedLastEventId: 3, generation: 1 });
        await store.append('x', [created(1)], { expectedLastEventId: 0, generation: 1, fresh: true });
      }
      return out;
    };
    try {
      await store.claimDueWork({ now: Date.now(), instance: 'new-1', limit: 10 });
    } finally {
      proto._getMany = orig;
    }
    expect(armed).toBe(false);
    // The head is the stored one: completed at event 5, so an append after event 3 is refused.
    expect((await store.getSummary('a'))?.status).toBe('completed');
    await expect(store.append('a', [step(4, 1)], { expectedLastEventId: 3, generation: 1 })).rejects.toSatisfy((e) => isTurnlogError(e, 'TURNLOG_CONCURRENCY'));
    expect((await store.readEvents('a')).map((e) => e.type)).toEqual(['TaskCreated', 'InputQueued', 'TurnStarted', 'TurnCompleted', 'TaskCompleted']);
    await store.close();
  });

  it('a deleted task keeps no cached head (retention would grow the cache without bound); its id reads as new and can be written again', async () => {
    const { reads, restore } = await spyReads();
    const store = new LevelHistoryStore(dir.path, { maxCachedHeads: 10 });
    try {
      await store.open();
      await store.append('gone', [created(1), queued(2, 'in-1'), started(3, 1), turnCompleted(4, 1), taskCompleted(5)], { expectedLastEventId: 0, generation: 1 });
      await store.deleteTask('gone');
      reads.length = 0;
      expect(await store.getSummary('gone')).toBeUndefined();
      expect(reads.length).toBeGreaterThan(0);
      await expect(store.append('gone', [created(2)], { expectedLastEventId: 1, generation: 1 })).rejects.toSatisfy((e) => isTurnlogError(e, 'TURNLOG_CONCURRENCY'));
      await store.append('gone', [created(1)], { expectedLastEventId: 0, generation: 1 });
      expect((await store.readEvents('gone')).map((e) => e.eventId)).toEqual([1]);
    } finally {
      restore();
    }
    await store.close();
  });

  it('non-durable appends (sync: false) land and read back', async () => {
    const store = new LevelHistoryStore(dir.path, { sync: false });
    await store.open();
    await store.append('t1', [created(1)], { expectedLastEventId: 0, generation: 1 });
    await store.append('t1', [step(2, 1)], { expectedLastEventId: 1, generation: 1, sync: true });
    await store.close();
    await store.open();
    expect((await store.readEvents('t1')).length).toBe(2);
    await store.close();
  });

  it('openStore turns a path into an open LevelHistoryStore and opens a given store', async () => {
    const store = await openStore(dir.path);
    expect(store).toBeInstanceOf(LevelHistoryStore);
    expect(store.location).toBe(dir.path);
    await store.append('t1', [created(1)], { expectedLastEventId: 0, generation: 1 });
    await store.close();
    const again = await openStore(new LevelHistoryStore(dir.path));
    expect((await again.readEvents('t1')).length).toBe(1);
    await again.close();
  });

  it('refuses a store written by a newer store format', async () => {
    const store = new LevelHistoryStore(dir.path);
    await store.open();
    await store.close();
    const { metaKey } = await import('../../src/store/keys.js');
    await writeRaw(metaKey('format'), new TextEncoder().encode(JSON.stringify({ store: 99, history: 1 })));
    const err = await new LevelHistoryStore(dir.path).open().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isTurnlogError(err, 'TURNLOG_HISTORY_FORMAT')).toBe(true);
    expect((err as Error).message).toContain('99');
  });
});
