/**
 * The CLI's side of live inspection: connects to a running engine's socket and speaks the
 * read side of `HistoryStore` plus the operator actions (docs/cli.md#live-inspection).
 */
import { connect, type Socket } from 'node:net';
import { TurnlogError } from '../errors.js';
import type { HistoryEvent, Lease, TaskSummary } from '../history/events.js';
import type {
  AppendResult,
  DueBatch,
  CorruptMark,
  HistoryStore,
  ListOptions,
  ReadOptions,
  StoredSnapshot,
  TaskPage,
} from '../store/history-store.js';
import { iterateInPages } from '../store/paging.js';
import { decodeEvents, errorFromWire, lineReader, socketPath, type ActionOp, type Op, type Response } from './protocol.js';

/** A connection to a live engine's inspection socket. */
export class InspectClient {
  readonly #socket: Socket;
  readonly #pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  #next = 1;
  #closed: Error | undefined;

  private constructor(socket: Socket, readonly path: string) {
    this.#socket = socket;
    socket.on(
      'data',
      lineReader((line) => {
        const r = JSON.parse(line) as Response;
        const p = this.#pending.get(r.id);
        if (!p) return;
        this.#pending.delete(r.id);
        if ('error' in r) p.reject(errorFromWire(r.error));
        else p.resolve(r.result);
      }),
    );
    const fail = (why: string) => {
      this.#closed ??= new TurnlogError('TURNLOG_INSPECT_SOCKET', `The engine serving ${path} ${why}. Run the command again (the engine may have stopped: then the store is free).`);
      for (const p of this.#pending.values()) p.reject(this.#closed);
      this.#pending.clear();
    };
    socket.on('error', (err) => fail(`failed: ${err.message}`));
    socket.on('close', () => fail('closed the connection'));
  }

  /**
   * Connects to `<storeDir>/turnlog.sock`; undefined when no engine serves it (no socket file,
   * or a file a dead engine left: connection refused).
   */
  static async connect(storeDir: string): Promise<InspectClient | undefined> {
    const path = socketPath(storeDir);
    return new Promise((resolve, reject) => {
      const socket = connect(path);
      socket.once('connect', () => {
        socket.removeAllListeners('error');
        resolve(new InspectClient(socket, path));
      });
      socket.once('error', (err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOENT' || err.code === 'ECONNREFUSED' || err.code === 'ENOTSOCK') return resolve(undefined);
        reject(new TurnlogError('TURNLOG_INSPECT_SOCKET', `Cannot connect to the engine's inspection socket ${path}: ${err.message}. The socket is mode 0600: run the CLI as the engine's OS user.`, { cause: err }));
      });
    });
  }

  call<T>(op: Op, args: Record<string, unknown> = {}): Promise<T> {
    if (this.#closed) return Promise.reject(this.#closed);
    const id = this.#next++;
    return new Promise<T>((resolve, reject) => {
      this.#pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.#socket.write(JSON.stringify({ id, op, args }) + '\n');
    });
  }

  /** Runs an operator action in the engine; it records who did it. */
  action<T = unknown>(op: ActionOp, args: Record<string, unknown>): Promise<T> {
    return this.call<T>(op, args);
  }

  close(): void {
    this.#closed ??= new TurnlogError('TURNLOG_INSPECT_SOCKET', `The connection to ${this.path} is closed.`);
    this.#socket.destroy();
  }
}

function readOnly(location: string, what: string): TurnlogError {
  return new TurnlogError(
    'TURNLOG_INSPECT_SOCKET',
    `Store ${location} is held by a running engine, which answers this CLI read-only: ${what} would make a second writer. Stop the engine first, or change the task through the engine's API.`,
  );
}

/**
 * The read side of a store a live engine holds, over its socket. `exclusive` is false: the
 * engine's leases are live, so `why` weighs them, on the engine's clock (`databaseNow`).
 */
export class RemoteHistoryStore implements HistoryStore {
  readonly exclusive = false;
  /** Read-only: it claims nothing and watches nothing (the engine behind it does both). */
  readonly supports = { exclusive: false, watch: false, claim: false, groupCommit: false, flowLimits: false } as const;
  constructor(
    readonly client: InspectClient,
    readonly location: string,
  ) {}

  async open(): Promise<void> {}
  async close(): Promise<void> {
    this.client.close();
  }

  async readEvents(taskId: string, options: ReadOptions = {}): Promise<HistoryEvent[]> {
    return decodeEvents(taskId, await this.client.call<string[]>('readEvents', { taskId, options }));
  }
  iterateEvents(taskId: string, options: ReadOptions = {}): AsyncIterable<HistoryEvent> {
    return iterateInPages((o) => this.readEvents(taskId, o), options);
  }
  async getSummary(taskId: string): Promise<TaskSummary | undefined> {
    return (await this.client.call<TaskSummary | null>('getSummary', { taskId })) ?? undefined;
  }
  listTasks(options: ListOptions = {}): Promise<TaskPage> {
    return this.client.call<TaskPage>('listTasks', { options });
  }
  async getLease(taskId: string): Promise<Lease | undefined> {
    return (await this.client.call<Lease | null>('getLease', { taskId })) ?? undefined;
  }
  async getSnapshot(taskId: string): Promise<StoredSnapshot | undefined> {
    const s = await this.client.call<{ eventId: number; data: string } | null>('getSnapshot', { taskId });
    return s ? { eventId: s.eventId, data: Buffer.from(s.data, 'base64') } : undefined;
  }
  listCorrupt(): Promise<CorruptMark[]> {
    return this.client.call<CorruptMark[]>('listCorrupt');
  }
  /** The engine's clock (what its replayer decides with), for `turnlog why`. */
  databaseNow(): Promise<number> {
    return this.client.call<number>('now');
  }

  append(): Promise<AppendResult> {
    return Promise.reject(readOnly(this.location, 'appending'));
  }
  claimDueWork(): Promise<DueBatch> {
    return Promise.reject(readOnly(this.location, 'claiming due work'));
  }
  claimLease(): Promise<Lease> {
    return Promise.reject(readOnly(this.location, 'claiming a lease'));
  }
  renewLease(): Promise<Lease> {
    return Promise.reject(readOnly(this.location, 'renewing a lease'));
  }
  releaseLease(): Promise<void> {
    return Promise.reject(readOnly(this.location, 'releasing a lease'));
  }
  listRecoverable(): Promise<string[]> {
    return Promise.reject(readOnly(this.location, 'recovering'));
  }
  putSnapshot(): Promise<void> {
    return Promise.reject(readOnly(this.location, 'writing a snapshot'));
  }
  deleteTask(): Promise<void> {
    return Promise.reject(readOnly(this.location, 'deleting a task'));
  }
  purgeCompleted(): Promise<string[]> {
    return Promise.reject(readOnly(this.location, 'purging'));
  }
  markCorrupt(): Promise<void> {
    return Promise.reject(readOnly(this.location, 'marking a task corrupt'));
  }
}
