/**
 * A private PostgreSQL cluster for tests that stop and restart the server: initdb in a temp dir,
 * its own port and socket dir, run as the `postgres` OS user when the tests run as root (the
 * server refuses root). `PG_BIN` (default /usr/lib/postgresql/15/bin) holds the binaries.
 */
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { chownSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const PG_BIN = process.env['TURNLOG_PG_BIN'] ?? '/usr/lib/postgresql/15/bin';

/** Why a private cluster cannot run here, or undefined when it can. */
export function privateClusterMissing(): string | undefined {
  if (!existsSync(join(PG_BIN, 'initdb')) || !existsSync(join(PG_BIN, 'pg_ctl'))) return `no PostgreSQL binaries in ${PG_BIN} (set TURNLOG_PG_BIN)`;
  if (process.getuid?.() === 0 && !postgresUser()) return 'running as root and there is no postgres OS user to run the server';
  return undefined;
}

function postgresUser(): { uid: number; gid: number } | undefined {
  try {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    return { uid, gid };
  } catch {
    return undefined;
  }
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

export class PrivateCluster {
  readonly dir: string;
  readonly port: number;
  readonly #asPostgres: boolean;

  private constructor(dir: string, port: number, asPostgres: boolean) {
    this.dir = dir;
    this.port = port;
    this.#asPostgres = asPostgres;
  }

  /** initdb (trust auth, superuser `postgres`, no fsync) and start. */
  static async create(): Promise<PrivateCluster> {
    const root = process.getuid?.() === 0;
    const dir = mkdtempSync(join(tmpdir(), 'turnlog-pg-'));
    if (root) {
      const u = postgresUser()!;
      chownSync(dir, u.uid, u.gid);
    }
    const c = new PrivateCluster(dir, await freePort(), root);
    await c.#run('initdb', ['-D', join(dir, 'data'), '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8']);
    await c.start();
    return c;
  }

  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  /** Runs a server binary (as `postgres` under root) without blocking the event loop: engines run meanwhile. */
  async #run(bin: string, args: string[]): Promise<void> {
    const cmd = join(PG_BIN, bin);
    const [file, argv] = this.#asPostgres ? ['runuser', ['-u', 'postgres', '--', cmd, ...args]] : [cmd, args];
    await promisify(execFile)(file, argv, { encoding: 'utf8', timeout: 60_000 });
  }

  /** Starts the server and waits until it accepts connections. */
  async start(): Promise<void> {
    const opts = `-p ${this.port} -k ${this.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60`;
    await this.#run('pg_ctl', ['-D', join(this.dir, 'data'), '-o', opts, '-l', join(this.dir, 'log'), '-w', '-t', '60', 'start']);
  }

  /** Stops the server: `fast` ends sessions (rolls back), `immediate` is a crash. */
  async stop(mode: 'fast' | 'immediate' = 'fast'): Promise<void> {
    await this.#run('pg_ctl', ['-D', join(this.dir, 'data'), '-m', mode, '-w', '-t', '60', 'stop']);
  }

  /** Stops (if running) and deletes the cluster. */
  async destroy(): Promise<void> {
    await this.stop('immediate').catch(() => undefined); // already stopped
    rmSync(this.dir, { recursive: true, force: true });
  }
}
