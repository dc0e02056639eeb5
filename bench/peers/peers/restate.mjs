/**
 * Restate: the server binary from its npm package (@restatedev/restate-server) in a temp
 * directory on free loopback ports, and the SDK's HTTP/2 endpoint in this process. A one-step
 * workflow is a service handler with one `ctx.run`; a conversation is a virtual object whose
 * turn handler runs one `ctx.run`. Calls go through the ingress with the SDK's clients.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { labelOf, pkgVersion } from './common.mjs';

process.env.RESTATE_LOGGING ??= 'ERROR'; // the SDK logs every invocation at INFO otherwise

// The SDK calls Promise.withResolvers (Node 22); Node 20 needs the shim before it loads.
if (typeof Promise.withResolvers !== 'function') {
  Promise.withResolvers = function withResolvers() {
    let resolve, reject;
    const promise = new this((a, b) => ((resolve = a), (reject = b)));
    return { promise, resolve, reject };
  };
}

const version = pkgVersion('@restatedev/restate-server');
export const info = { label: labelOf('Restate', version), version, notes: `server ${version} (its default durability), SDK ${pkgVersion('@restatedev/restate-sdk')}` };

const freePort = () =>
  new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });

async function waitHttp(url, ms) {
  const end = Date.now() + ms;
  for (;;) {
    try {
      const r = await fetch(url);
      if (r.ok) return;
    } catch {}
    if (Date.now() > end) throw new Error(`Restate did not answer ${url} within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export async function open() {
  const restate = await import('@restatedev/restate-sdk');
  const clients = await import('@restatedev/restate-sdk-clients');
  const dir = mkdtempSync(join(tmpdir(), 'turnlog-peers-restate-'));
  const [ingress, admin, node, sdk] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const bin = fileURLToPath(new URL(`../node_modules/@restatedev/restate-server-linux-${process.arch}/bin/restate-server`, import.meta.url));
  const server = spawn(bin, ['--no-logo', '--listen-mode', 'tcp'], {
    cwd: dir,
    stdio: ['ignore', 'ignore', 'pipe'],
    env: {
      ...process.env,
      RESTATE_BASE_DIR: dir,
      RESTATE_LOG_FILTER: 'error',
      RESTATE_INGRESS__BIND_ADDRESS: `127.0.0.1:${ingress}`,
      RESTATE_ADMIN__BIND_ADDRESS: `127.0.0.1:${admin}`,
      RESTATE_BIND_ADDRESS: `127.0.0.1:${node}`,
      RESTATE_ADVERTISED_ADDRESS: `http://127.0.0.1:${node}`,
    },
  });
  let stderr = '';
  server.stderr.on('data', (d) => (stderr = (stderr + d).slice(-4000)));
  const exited = new Promise((resolve) => server.once('exit', resolve));
  try {
    await Promise.race([waitHttp(`http://127.0.0.1:${admin}/health`, 60_000), exited.then(() => Promise.reject(new Error(`restate-server exited: ${stderr}`)))]);
    const bench = restate.service({
      name: 'bench',
      handlers: {
        one: async (ctx, x) => ctx.run('s', () => x + 1),
        many: async (ctx) => {
          for (let i = 0; i < 100; i++) await ctx.run('s', () => i);
          return 100;
        },
      },
    });
    const conv = restate.object({ name: 'conv', handlers: { turn: async (ctx, x) => ctx.run('s', () => x + 1) } });
    await restate.serve({ services: [bench, conv], port: sdk });
    const reg = await fetch(`http://127.0.0.1:${admin}/deployments`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ uri: `http://127.0.0.1:${sdk}` }),
    });
    if (!reg.ok) throw new Error(`registering the deployment: ${reg.status} ${await reg.text()}`);
    const rs = clients.connect({ url: `http://127.0.0.1:${ingress}` });
    const svc = rs.serviceClient(bench);
    return {
      workflow100: () => svc.many(null),
      oneStep: (i) => svc.one(i),
      async conversations(n) {
        const cs = Array.from({ length: n }, (_, i) => rs.objectClient(conv, `c${i}`));
        await Promise.all(cs.map((c, i) => c.turn(i)));
        return cs;
      },
      turn: (c, i) => c.turn(i),
      async close() {
        server.kill('SIGTERM');
        await exited;
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (e) {
    server.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
}
