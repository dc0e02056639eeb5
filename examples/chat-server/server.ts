/**
 * The chat server (`npm run chat`): node:http, one page, a LevelDB store in CHAT_DATA.
 *   GET  /                       the page
 *   POST /api/messages?task=id   { text } → starts the task's next turn, or steers the running one
 *   GET  /api/stream?task=id     Server-Sent Events: one stream item per event, `id:` its offset
 *   GET  /api/refunds            the payment ledger (what the refund tool issued)
 * Kill it mid-answer (SIGKILL) and start it again: the engine recovers the turn, the page's
 * EventSource reconnects with Last-Event-ID and carries on from its offset.
 */
import { mkdirSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { Engine, isTurnlogError } from '../../src/index.js';
import { PAGE } from './page.js';
import { chat, ledger, refunds } from './workflows.js';

const dir = process.env['CHAT_DATA'] ?? '.chat-data';
mkdirSync(dir, { recursive: true });
ledger.dir = dir;
const engine = await Engine.open({ store: join(dir, 'store'), workflows: [chat] });

async function body(req: IncomingMessage): Promise<string> {
  let s = '';
  for await (const chunk of req) s += chunk;
  return s;
}

function send(res: ServerResponse, status: number, value: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(value));
}

async function stream(req: IncomingMessage, res: ServerResponse, taskId: string, from: string | undefined): Promise<void> {
  const ac = new AbortController();
  req.on('close', () => ac.abort());
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive' });
  res.write('retry: 500\n\n');
  for (;;) {
    try {
      for await (const item of engine.stream(taskId, { signal: ac.signal, ...(from ? { from } : {}) })) {
        res.write(`id: ${item.offset}\ndata: ${JSON.stringify(item)}\n\n`);
      }
      break;
    } catch (err) {
      // A task not started yet: wait for its first message. An offset of another store: from the start.
      if (isTurnlogError(err, 'TURNLOG_TASK_NOT_FOUND')) await new Promise((r) => setTimeout(r, 200));
      else if (isTurnlogError(err, 'TURNLOG_STREAM_OFFSET')) {
        res.write('event: reset\ndata: {}\n\n');
        from = undefined;
      } else throw err;
      if (ac.signal.aborted) break;
    }
  }
  res.end();
}

const server = createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://localhost');
  const taskId = url.searchParams.get('task') ?? 'chat-demo';
  (async () => {
    if (req.method === 'GET' && url.pathname === '/') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(PAGE);
    } else if (req.method === 'POST' && url.pathname === '/api/messages') {
      const { text } = JSON.parse(await body(req)) as { text: string };
      const task = await engine.start(chat, String(text), { taskId });
      send(res, 202, { taskId, inputId: task.inputId });
    } else if (req.method === 'GET' && url.pathname === '/api/stream') {
      // On a reconnect EventSource sends the last id it saw; the page's own offset otherwise.
      const from = (req.headers['last-event-id'] as string | undefined) || url.searchParams.get('from') || undefined;
      await stream(req, res, taskId, from);
    } else if (req.method === 'GET' && url.pathname === '/api/refunds') {
      send(res, 200, refunds());
    } else {
      send(res, 404, { error: 'not found' });
    }
  })().catch((err: unknown) => {
    if (!res.headersSent) send(res, isTurnlogError(err) ? 409 : 500, { error: (err as Error).message, code: (err as { code?: string }).code });
    else res.end();
  });
});

server.listen(Number(process.env['PORT'] ?? 3000), '127.0.0.1', () => {
  const a = server.address();
  console.log(`chat server listening on http://127.0.0.1:${typeof a === 'object' && a ? a.port : '?'}`);
});
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.on(sig, () => {
    server.close();
    server.closeAllConnections();
    void engine.shutdown().then(() => process.exit(0));
  });
}
