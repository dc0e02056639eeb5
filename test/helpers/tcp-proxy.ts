/**
 * A TCP proxy between an engine and PostgreSQL that a test can cut (a network partition) and heal.
 * Cut: the server side of every connection is closed (the server ends those sessions and rolls
 * back their transactions, as its keepalive would), the client side stays open and silent (the
 * engine hears nothing, as behind a dropped route), and new connections are held silent too.
 * Heal: the silent client sockets are reset (the engine's driver sees the loss) and new
 * connections are forwarded again.
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';

export class TcpProxy {
  readonly #server: Server;
  readonly #target: { host: string; port: number };
  readonly #held = new Set<Socket>();
  readonly #live = new Set<{ client: Socket; upstream: Socket }>();
  #cut = false;
  /** Connections accepted since start (forwarded or held). */
  accepted = 0;

  private constructor(target: { host: string; port: number }) {
    this.#target = target;
    this.#server = createServer((client) => this.#accept(client));
  }

  /** Listens on an ephemeral port of 127.0.0.1, forwarding to `target`. */
  static async start(target: { host: string; port: number }): Promise<TcpProxy> {
    const p = new TcpProxy(target);
    await new Promise<void>((resolve) => p.#server.listen(0, '127.0.0.1', resolve));
    return p;
  }

  get port(): number {
    return (this.#server.address() as { port: number }).port;
  }

  /** `url` (a postgres:// URL) pointed at this proxy. */
  url(url: string): string {
    const u = new URL(url);
    u.hostname = '127.0.0.1';
    u.port = String(this.port);
    return u.toString();
  }

  #accept(client: Socket): void {
    this.accepted++;
    client.on('error', () => undefined);
    if (this.#cut) {
      this.#hold(client);
      return;
    }
    const upstream = createConnection(this.#target);
    upstream.on('error', () => client.destroy());
    const pair = { client, upstream };
    this.#live.add(pair);
    client.on('data', (d) => {
      if (!this.#cut) upstream.write(d);
    });
    upstream.on('data', (d) => {
      if (!this.#cut) client.write(d);
    });
    client.on('close', () => {
      this.#live.delete(pair);
      upstream.destroy();
    });
    upstream.on('close', () => {
      // Closed by the cut: the client must not notice. Otherwise (the server ended it): pass it on.
      if (!this.#cut) client.destroy();
    });
  }

  #hold(client: Socket): void {
    this.#held.add(client);
    client.on('data', () => undefined);
    client.on('close', () => this.#held.delete(client));
  }

  /** Partition: nothing passes any more, and the engine is not told. */
  cut(): void {
    this.#cut = true;
    for (const pair of [...this.#live]) {
      this.#live.delete(pair);
      pair.upstream.destroy();
      this.#hold(pair.client);
    }
  }

  /** The partition heals: held connections are reset, new ones forwarded. */
  heal(): void {
    this.#cut = false;
    for (const c of [...this.#held]) c.resetAndDestroy();
    this.#held.clear();
  }

  async close(): Promise<void> {
    this.heal();
    for (const pair of this.#live) {
      pair.client.destroy();
      pair.upstream.destroy();
    }
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}
