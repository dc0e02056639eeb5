import { EventEmitter } from 'node:events';
import pg from 'pg';
import { expect, it } from 'vitest';
import { guard } from '../../src/store/postgres-rows.js';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { PG_URL, describePg, dropSchema, uniqueSchema } from '../helpers/postgres.js';
import { created, step } from './events.js';

/** A wrapper made anew for each checkout, delegating to one client (as a user's instrumented pool may). */
function wrap<T extends object>(target: T): T {
  return new Proxy(target, {
    get(t, key) {
      const v = Reflect.get(t, key) as unknown;
      return typeof v === 'function' ? v.bind(t) : v;
    },
  });
}

it('guard listens for errors once per client, also through a new wrapper each time', () => {
  const client = new EventEmitter();
  guard(client);
  guard(client);
  for (let i = 0; i < 20; i++) guard(wrap(client));
  expect(client.listenerCount('error')).toBe(1);
  // The one listener keeps a connection error from crashing the process.
  expect(() => client.emit('error', new Error('connection reset'))).not.toThrow();
  // A client without listeners() (a minimal wrapper) still gets one listener.
  const other = new EventEmitter();
  guard({ on: other.on.bind(other) });
  expect(other.listenerCount('error')).toBe(1);
});

describePg('guard behind a pool that wraps each checkout', () => {
  it('a hundred appends add one error listener to the connection, not one each', async () => {
    const schema = uniqueSchema('turnlog_guard');
    const real = new pg.Pool({ connectionString: PG_URL, max: 1 });
    const clients = new Set<pg.PoolClient>();
    const pool = {
      connect: async () => {
        const c = await real.connect();
        clients.add(c);
        return wrap(c);
      },
      query: (text: string, values?: unknown[]) => real.query(text, values),
      end: () => real.end(),
      on: (e: string, f: () => void) => real.on(e as 'error', f),
    };
    const store = createPostgresStore({ pool: pool as never, schema, max: 1 });
    try {
      await store.open();
      await store.append('t', [created(1)], { expectedLastEventId: 0, generation: 1 });
      for (let id = 2; id <= 100; id++) await store.append('t', [step(id, id - 1)], { expectedLastEventId: id - 1, generation: 1 });
      expect(clients.size).toBe(1);
      const [c] = [...clients];
      // pg's own listener (if any) plus ours.
      expect(c!.listenerCount('error')).toBeLessThanOrEqual(2);
    } finally {
      await store.close();
      await real.end();
      await dropSchema(schema);
    }
  });
});
