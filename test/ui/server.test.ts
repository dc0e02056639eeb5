import { Level } from 'level';
import { afterEach, describe, expect, it } from 'vitest';
import { summaryKey } from '../../src/store/keys.js';
import { LevelHistoryStore } from '../../src/store/index.js';
import { startUiServer, type UiServer } from '../../src/ui/server.js';
import { appendHistory } from '../cli/run-cli.js';
import { number, p, POLICY, richHistory } from '../cli/helpers.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

describe('turnlog ui server', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  async function serve(): Promise<UiServer> {
    const tmp = await makeTmpDir('turnlog-ui-api-');
    cleanups.push(tmp.remove);
    const store = new LevelHistoryStore(tmp.path, { sync: false });
    await store.open();
    cleanups.push(() => store.close());
    await appendHistory(store, 't-rich', richHistory());
    const base = { time: 0, generation: 1 };
    await appendHistory(store, 'other', number([
      { ...base, type: 'TaskCreated', workflow: 'billing', kind: 'one-shot', policy: POLICY, formatVersion: 1 },
      { ...base, type: 'InputQueued', inputId: 'in-1', input: p('x'), steering: false },
    ]));
    const server = await startUiServer({ store });
    cleanups.push(() => server.close());
    return server;
  }

  const get = async (server: UiServer, path: string) => {
    const res = await fetch(new URL(path, server.url));
    const json = res.headers.get('content-type')?.startsWith('application/json');
    return { status: res.status, body: (json ? await res.json() : await res.text()) as any };
  };

  it('binds to loopback by default and serves the page', async () => {
    const server = await serve();
    expect(new URL(server.url).hostname).toBe('127.0.0.1');
    const page = await get(server, '/');
    expect(page.status).toBe(200);
    expect(page.body).toContain('<title>turnlog</title>');
  });

  it('lists tasks with status filter and search', async () => {
    const server = await serve();
    const ids = async (q: string) => (await get(server, `/api/tasks${q}`)).body.tasks.map((t: { taskId: string }) => t.taskId).sort();
    expect(await ids('')).toEqual(['other', 't-rich']);
    expect(await ids('?status=suspended')).toEqual(['t-rich']);
    expect(await ids('?q=BILL')).toEqual(['other']);
    const bad = await get(server, '/api/tasks?status=done');
    expect([bad.status, bad.body.error.code]).toEqual([400, 'TURNLOG_INVALID_ARGUMENT']);
  });

  it('answers a caller\'s mistake with 400, never 500: a cursor of another filter, an invalid task id, a malformed escape', async () => {
    const server = await serve();
    for (const path of ['/api/tasks?cursor=zzz', `/api/tasks/${'x'.repeat(201)}`, '/api/tasks/a%0Ab', '/api/tasks/%E0%A4%A']) {
      const r = await get(server, path);
      expect([path, r.status, r.body.error.code]).toEqual([path, 400, 'TURNLOG_INVALID_ARGUMENT']);
    }
  });

  it('serves a task as summary, timeline, recoveries and decision; an unknown task is 404', async () => {
    const server = await serve();
    const { status, body } = await get(server, '/api/tasks/t-rich');
    expect(status).toBe(200);
    expect(body.task.taskId).toBe('t-rich');
    expect(body.turns).toHaveLength(2);
    expect(body.recoveries.map((r: { rule: string }) => r.rule)).toEqual(['recover', 'recover']);
    expect(body.decision.decision.rule).toBe('queued-input');
    expect(body.events).toHaveLength(body.timeline.length);
    const missing = await get(server, '/api/tasks/nope');
    expect([missing.status, missing.body.error.code]).toEqual([404, 'TURNLOG_TASK_NOT_FOUND']);
    expect(missing.body.error.message).toContain('Task nope');
  });
});

describe('turnlog ui server: a task whose summary cannot be read', () => {
  it('is served as corrupt (rebuilt from its history), not as a 500', async () => {
    const tmp = await makeTmpDir('turnlog-ui-corrupt-');
    const dir = tmp.path + '/s';
    const store = new LevelHistoryStore(dir, { sync: false });
    await store.open();
    await appendHistory(store, 't-rich', richHistory());
    await store.close();
    const db = new Level<Buffer, Buffer>(dir, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
    await db.open();
    await db.put(summaryKey('t-rich'), Buffer.from([0xff, 0xff, 0x01]));
    await db.close();
    await store.open();
    const server = await startUiServer({ store });
    try {
      const res = await fetch(new URL('/api/tasks/t-rich', server.url));
      expect(res.status).toBe(200);
      const body = (await res.json()) as { task: { taskId: string; status: string; corrupt?: { key: string; code: string } }; turns: unknown[] };
      expect(body.task).toMatchObject({ taskId: 't-rich', status: 'suspended', corrupt: { key: 'summary/t-rich', code: 'TURNLOG_HISTORY_CORRUPT' } });
      expect(body.turns).toHaveLength(2);
    } finally {
      await server.close();
      await store.close();
      await tmp.remove();
    }
  });
});
