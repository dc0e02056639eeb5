/**
 * The `turnlog ui` server: a `node:http` server with a JSON API over one open store and the
 * single timeline page. Read-only; no authentication, so it binds to loopback by default
 * (docs/ui.md "Who can connect").
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { isHistoryUnreadable, isTurnlogError } from '../errors.js';
import type { HistoryEvent, Lease, TaskStatus, TaskSummary } from '../history/events.js';
import { summarize } from '../history/summary.js';
import type { PayloadConverter } from '../history/payload.js';
import type { HistoryStore, ListOptions } from '../store/history-store.js';
import { taskTimeline } from '../timeline/build.js';
import { PAGE_HTML } from './page.js';

const STATUSES: readonly string[] = ['pending', 'in_progress', 'suspended', 'completed'];

/** What `startUiServer` needs: the open store and how to decode payloads (`--codecs`). */
export interface UiServerOptions {
  store: HistoryStore;
  decodeEvent?: (e: HistoryEvent) => HistoryEvent;
  /** Converts payloads for display (a `--codecs` module's `payloadConverter`); default JSON. */
  converter?: PayloadConverter;
  host?: string;
  /** 0 picks a free port. */
  port?: number;
}

/** A running `turnlog ui` server. */
export interface UiServer {
  url: string;
  close(): Promise<void>;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** A caller's mistake is 4xx (a cursor of another filter, an invalid task id, a malformed %-escape), never 500. */
function httpStatusOf(err: unknown): [number, string | undefined] {
  if (err instanceof HttpError) return [err.status, undefined];
  if (isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT')) return [400, undefined];
  if (isTurnlogError(err, 'TURNLOG_TASK_NOT_FOUND')) return [404, undefined];
  if (err instanceof URIError) return [400, 'TURNLOG_INVALID_ARGUMENT'];
  return [500, undefined];
}

function sendJSON(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' });
  res.end(text);
}

async function listTasks(store: HistoryStore, params: URLSearchParams): Promise<unknown> {
  const status = params.get('status') || undefined;
  if (status !== undefined && !STATUSES.includes(status)) {
    throw new HttpError(400, 'TURNLOG_INVALID_ARGUMENT', `Unknown status ${JSON.stringify(status)}. Use one of ${STATUSES.join(', ')}.`);
  }
  const opts: ListOptions = { limit: 100 };
  if (status !== undefined) opts.status = status as TaskStatus;
  const cursor = params.get('cursor');
  if (cursor) opts.cursor = cursor;
  const page = await store.listTasks(opts);
  // Search filters the page by task id or workflow (substring, case-insensitive).
  const q = (params.get('q') ?? '').trim().toLowerCase();
  const tasks = q ? page.tasks.filter((t) => t.taskId.toLowerCase().includes(q) || t.workflow.toLowerCase().includes(q)) : page.tasks;
  return { tasks, next: page.next ?? null };
}

/**
 * The task's summary; one whose record cannot be read is rebuilt from the history (summaries are
 * derived, invariant 1) and shown as corrupt, never as a server error.
 */
async function summaryOf(store: HistoryStore, taskId: string): Promise<TaskSummary | undefined> {
  try {
    return await store.getSummary(taskId);
  } catch (err) {
    if (!isHistoryUnreadable(err)) throw err;
    const e = err as Error & { code: string; key?: string };
    const corrupt = { key: e.key ?? `summary/${taskId}`, code: e.code, message: e.message };
    const events: HistoryEvent[] = [];
    try {
      for await (const ev of store.iterateEvents(taskId)) events.push(ev);
    } catch (inner) {
      if (!isHistoryUnreadable(inner)) throw inner;
    }
    if (events.length > 0) return { ...summarize(taskId, undefined, events), corrupt };
    return { taskId, workflow: '', kind: 'one-shot', status: 'pending', lastEventId: 0, turn: 0, queued: 0, createdAt: 0, updatedAt: 0, corrupt };
  }
}

async function showTask(store: HistoryStore, decodeEvent: (e: HistoryEvent) => HistoryEvent, taskId: string, converter?: PayloadConverter): Promise<unknown> {
  const task = await summaryOf(store, taskId);
  if (!task) throw new HttpError(404, 'TURNLOG_TASK_NOT_FOUND', `Task ${taskId} is not in store ${store.location}. Pick a task from the list.`);
  // A task the engine isolated carries its mark, as in the list.
  const mark = task.corrupt ? undefined : (await store.listCorrupt()).find((m) => m.taskId === taskId);
  if (mark) task.corrupt = { key: mark.key, code: mark.code, message: mark.message };
  const events: HistoryEvent[] = [];
  let unreadable: { code: string; message: string } | null = null;
  try {
    for await (const e of store.iterateEvents(taskId)) events.push(decodeEvent(e));
  } catch (err) {
    if (!isHistoryUnreadable(err)) throw err;
    const e = err as Error & { code: string };
    unreadable = { code: e.code, message: e.message };
  }
  // An exclusive store the server holds proves no engine runs: its leases are void (like `why`).
  const lease: Lease | undefined = store.supports.exclusive ? undefined : await store.getLease(taskId);
  const clocked = store as { databaseNow?: () => Promise<number> };
  const now = clocked.databaseNow ? await clocked.databaseNow() : Date.now();
  return { ...taskTimeline(task, events, lease, now, 0, converter), unreadable };
}

/** Starts the server on `host:port` (default 127.0.0.1, a free port). */
export async function startUiServer(options: UiServerOptions): Promise<UiServer> {
  const { store } = options;
  const decodeEvent = options.decodeEvent ?? ((e: HistoryEvent) => e);
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (req.method !== 'GET') throw new HttpError(405, 'TURNLOG_INVALID_ARGUMENT', `${req.method} is not served; the page only reads.`);
    if (url.pathname === '/' || url.pathname === '/index.html') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
      res.end(PAGE_HTML);
      return;
    }
    if (url.pathname === '/api/tasks') return sendJSON(res, 200, await listTasks(store, url.searchParams));
    const m = /^\/api\/tasks\/([^/]+)$/.exec(url.pathname);
    if (m) return sendJSON(res, 200, await showTask(store, decodeEvent, decodeURIComponent(m[1]!), options.converter));
    throw new HttpError(404, 'TURNLOG_INVALID_ARGUMENT', `No page at ${url.pathname}. Open / for the timeline page.`);
  };
  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      const e = err as Error & { code?: string };
      const [status, code] = httpStatusOf(err);
      if (!res.headersSent) sendJSON(res, status, { error: { code: code ?? e.code ?? null, message: e.message } });
      else res.end();
    });
  });
  const host = options.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => resolve());
  });
  const addr = server.address() as AddressInfo;
  const shown = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  return {
    url: `http://${shown}:${addr.port}/`,
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}
