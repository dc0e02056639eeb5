/**
 * The engine's side of live inspection: a Unix domain socket in the LevelDB store directory,
 * mode 0600 (only the store's OS user, and root, may connect). The engine stays the only
 * writer: reads go to its open store, actions to its own public methods.
 */
import { chmod, unlink } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import type { Logger } from '../logger.js';
import { MAX_SOCKET_PATH, errorToWire, lineReader, socketPath, type Op, type Request, type Response } from './protocol.js';

/** Answers one request; throws a TurnlogError for the CLI to print. */
export type InspectHandler = (op: Op, args: Record<string, unknown>) => Promise<unknown>;

export interface InspectServer {
  readonly path: string;
  close(): Promise<void>;
}

/**
 * Listens on `<storeDir>/turnlog.sock`. A socket file left by a dead engine is removed first:
 * the caller holds the store's lock, so no other engine can be serving it. Returns undefined
 * (after a warning) when the path is too long for a Unix socket.
 */
export async function serveInspection(storeDir: string, handler: InspectHandler, log: Logger): Promise<InspectServer | undefined> {
  const path = socketPath(storeDir);
  if (Buffer.byteLength(path) > MAX_SOCKET_PATH) {
    log.warn('live inspection is off: the store path is too long for a Unix socket', { path, maxBytes: MAX_SOCKET_PATH });
    return undefined;
  }
  await unlink(path).catch(() => undefined);
  const sockets = new Set<Socket>();
  // Connections accepted before chmod narrowed the mode are refused (no window for other users).
  let ready = false;
  const server: Server = createServer((socket) => {
    if (!ready) return void socket.destroy();
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    socket.on(
      'data',
      lineReader((line) => void answer(socket, line, handler)),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(path, () => {
      server.off('error', reject);
      resolve();
    });
  });
  await chmod(path, 0o600);
  ready = true;
  server.unref();
  return {
    path,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await unlink(path).catch(() => undefined);
    },
  };
}

async function answer(socket: Socket, line: string, handler: InspectHandler): Promise<void> {
  let id = 0;
  let response: Response;
  try {
    const req = JSON.parse(line) as Request;
    id = req.id;
    response = { id, result: (await handler(req.op, req.args ?? {})) ?? null };
  } catch (err) {
    response = { id, error: errorToWire(err) };
  }
  if (!socket.destroyed) socket.write(JSON.stringify(response) + '\n');
}
