/** turnlog on the local PostgreSQL (a fresh schema, dropped at the end). */
import { randomBytes } from 'node:crypto';
import { PG_URL, dropSchema } from './common.mjs';
import { openTurnlog } from './turnlog-level.mjs';

export const info = { label: 'turnlog (PostgreSQL)', notes: 'inline executor, PostgreSQL store, synchronous_commit on' };

export async function open() {
  const schema = `turnlog_peers_${randomBytes(4).toString('hex')}`;
  const t = await openTurnlog(`${PG_URL}?schema=${schema}`);
  return {
    ...t,
    async close() {
      await t.close();
      await dropSchema(schema);
    },
  };
}
